"""One least-squares fit for all numerics of an engine on one kind of hardware. The step overhead and the
per-sampled-sequence cost belong to the engine on that machine (scheduling, sampling, detokenizing, streaming)
and are shared; bandwidth and compute efficiency belong to each numerics' kernels and are fitted per group.
Sharing is what lets a group measured at one slot count predict another: the cost of batching more
sequences is learnt from every group that measured it. The Jacobian is sparse (a group's points depend on the
two shared parameters and its own two), so finite differences cost five simulations of the data per step,
not two per group."""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Sequence

import numpy as np
from scipy.optimize import least_squares
from scipy.sparse import lil_matrix

from atlas.metrics import LoadSummary
from atlas.results import RunResult
from atlas.simulator.features import Efficiencies

MISSING = 3.0  # log error charged where a measured metric has no prediction (the simulated point failed)
SHARED_X0, SHARED_LO, SHARED_HI = (1e-3, 1e-5), (1e-6, 1e-8), (10.0, 1.0)  # overhead_s, sample_s
GROUP_X0, GROUP_LO, GROUP_HI = (0.3, 0.3), (1e-4, 1e-4), (1.0, 1.0)  # bw_eff, compute_eff <= 1: the roofline holds

Point = tuple[RunResult, object]  # a result and the model it is simulated with
Simulate = Callable[[RunResult, object, Efficiencies], LoadSummary]


def _unpack(x: np.ndarray, keys: Sequence[Hashable]) -> dict[Hashable, Efficiencies]:
    v = np.exp(x)
    return {k: Efficiencies(float(v[0]), float(v[2 + 2 * i]), float(v[3 + 2 * i]), float(v[1]))
            for i, k in enumerate(keys)}


def fit_family(groups: dict[Hashable, list[Point]], targets: Sequence[str], simulate: Simulate,
               x0: np.ndarray | None = None, max_nfev: int = 60,
               shared: np.ndarray | None = None) -> tuple[dict[Hashable, Efficiencies], np.ndarray]:
    """Efficiencies per group (shared overhead and per-sequence cost) and the solution vector (a warm start
    for refits of nearly the same data). `shared`: the two shared parameters (log) held fixed, only the groups'
    own fitted (a leave-one-out refit of one group among many: the rest of the family fixes them)."""
    if shared is not None:
        fixed = np.asarray(shared, dtype=float)
        rest = None if x0 is None else x0[2:]
        effs, xg = _fit(groups, targets, simulate, rest, max_nfev, fixed)
        return effs, np.concatenate([fixed, xg])
    return _fit(groups, targets, simulate, x0, max_nfev, None)


def _fit(groups: dict[Hashable, list[Point]], targets: Sequence[str], simulate: Simulate, x0: np.ndarray | None,
         max_nfev: int, fixed: np.ndarray | None) -> tuple[dict[Hashable, Efficiencies], np.ndarray]:
    keys = sorted(groups, key=repr)
    lead = 0 if fixed is not None else 2  # free shared parameters at the front of x
    rows: list[tuple[int, RunResult, object, str, float]] = []  # (group index, result, model, metric, measured)
    for i, k in enumerate(keys):
        for r, model in groups[k]:
            assert r.metrics is not None
            for name in targets:
                m = r.metrics.value(name)
                if m and m > 0:
                    rows.append((i, r, model, name, float(m)))
    if not rows:
        raise ValueError("no measured values to fit")

    def full(x: np.ndarray) -> np.ndarray:
        return x if fixed is None else np.concatenate([fixed, x])

    def residuals(x: np.ndarray) -> np.ndarray:
        effs = _unpack(full(x), keys)
        cache: dict[int, LoadSummary] = {}
        out = np.empty(len(rows))
        for j, (i, r, model, name, m) in enumerate(rows):
            if id(r) not in cache:
                cache[id(r)] = simulate(r, model, effs[keys[i]])
            p = cache[id(r)].value(name)
            out[j] = math.log(p / m) if p and p > 0 else MISSING
        return out

    n = lead + 2 * len(keys)
    sparsity = lil_matrix((len(rows), n), dtype=int)
    for j, (i, *_rest) in enumerate(rows):
        for c in (*range(lead), lead + 2 * i, lead + 2 * i + 1):
            sparsity[j, c] = 1
    lo = np.log([*SHARED_LO[:lead], *GROUP_LO * len(keys)])
    hi = np.log([*SHARED_HI[:lead], *GROUP_HI * len(keys)])
    start = np.log([*SHARED_X0[:lead], *GROUP_X0 * len(keys)]) if x0 is None else np.clip(x0, lo + 1e-9, hi - 1e-9)
    # ~1% precision is all a model this coarse can use; tight tolerances only cost simulations
    sol = least_squares(residuals, start, bounds=(lo, hi), diff_step=1e-3, xtol=1e-6, ftol=1e-6,
                        max_nfev=max_nfev, jac_sparsity=sparsity)
    return _unpack(full(sol.x), keys), sol.x
