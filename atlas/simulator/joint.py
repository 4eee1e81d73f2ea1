"""One least-squares fit for all numerics of an engine on one kind of hardware. The step overhead and the
per-sampled-sequence cost belong to the engine on that machine (scheduling, sampling, detokenizing, streaming)
and are shared, with any other engine-wide term its step model prices (llama.cpp: the extra weight passes of
its multi-token GEMM path); bandwidth and compute efficiency belong to each numerics' kernels and are fitted per group.
Sharing is what lets a group measured at one slot count predict another: the cost of batching more
sequences is learnt from every group that measured it. The Jacobian is sparse (a group's points depend on the
shared parameters and its own two), so finite differences cost (shared + 3) simulations of the data per step,
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
# engine-wide parameters: start, lower and upper bound. A start far below where a parameter matters leaves the
# finite differences of a piecewise-constant objective at zero and the parameter where it started (sample_s
# from 10 us stayed at 20 us on llama.cpp, whose per-sequence cost is milliseconds): each starts where it matters.
SHARED = {"overhead_s": (1e-3, 1e-6, 10.0), "sample_s": (1e-3, 1e-8, 1.0), "multi_pass": (0.1, 1e-4, 10.0)}
DEFAULT_SHARED = ("overhead_s", "sample_s")
GROUP_X0, GROUP_LO, GROUP_HI = (0.3, 0.3), (1e-4, 1e-4), (1.0, 1.0)  # bw_eff, compute_eff <= 1: the roofline holds

Point = tuple[RunResult, object]  # a result and the model it is simulated with
Simulate = Callable[[RunResult, object, Efficiencies], LoadSummary]


def _unpack(x: np.ndarray, keys: Sequence[Hashable], params: Sequence[str]) -> dict[Hashable, Efficiencies]:
    v, ns = np.exp(x), len(params)
    common = {p: float(v[j]) for j, p in enumerate(params)}
    return {k: Efficiencies(bw_eff=float(v[ns + 2 * i]), compute_eff=float(v[ns + 1 + 2 * i]), **common)
            for i, k in enumerate(keys)}


def fit_family(groups: dict[Hashable, list[Point]], targets: Sequence[str], simulate: Simulate,
               x0: np.ndarray | None = None, max_nfev: int = 60, shared: np.ndarray | None = None,
               params: Sequence[str] = DEFAULT_SHARED) -> tuple[dict[Hashable, Efficiencies], np.ndarray]:
    """Efficiencies per group (the engine-wide `params`, shared, and each group's own two) and the solution
    vector (a warm start for refits of nearly the same data). `shared`: the shared parameters (log) held fixed,
    only the groups' own fitted (a leave-one-out refit of one group among many: the rest of the family fixes
    them)."""
    unknown = sorted(set(params) - set(SHARED))
    if unknown:
        raise ValueError(f"no shared step parameter {', '.join(unknown)}")
    if shared is not None:
        fixed = np.asarray(shared, dtype=float)
        rest = None if x0 is None else x0[len(params):]
        effs, xg = _fit(groups, targets, simulate, rest, max_nfev, fixed, params)
        return effs, np.concatenate([fixed, xg])
    return _fit(groups, targets, simulate, x0, max_nfev, None, params)


def _fit(groups: dict[Hashable, list[Point]], targets: Sequence[str], simulate: Simulate, x0: np.ndarray | None,
         max_nfev: int, fixed: np.ndarray | None, params: Sequence[str]
         ) -> tuple[dict[Hashable, Efficiencies], np.ndarray]:
    keys = sorted(groups, key=repr)
    lead = 0 if fixed is not None else len(params)  # free shared parameters at the front of x
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
        effs = _unpack(full(x), keys, params)
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
    free = [SHARED[p] for p in params][:lead]
    lo = np.log([*(f[1] for f in free), *GROUP_LO * len(keys)])
    hi = np.log([*(f[2] for f in free), *GROUP_HI * len(keys)])
    start = (np.log([*(f[0] for f in free), *GROUP_X0 * len(keys)]) if x0 is None
             else np.clip(x0, lo + 1e-9, hi - 1e-9))
    # ~1% precision is all a model this coarse can use; tight tolerances only cost simulations
    sol = least_squares(residuals, start, bounds=(lo, hi), diff_step=1e-3, xtol=1e-6, ftol=1e-6,
                        max_nfev=max_nfev, jac_sparsity=sparsity)
    return _unpack(full(sol.x), keys, params), sol.x
