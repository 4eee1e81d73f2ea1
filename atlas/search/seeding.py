"""Simulator seeds for an Optuna search: refit the simulator to the points measured so far, predict every
free point, and pick the one whose predicted objectives add most hypervolume to the measured frontier.

The simulator predicts speed and cost, not quality; quality belongs to the numerics (every scheduling config
of one dtype x weights x KV cache shares it), so a free point takes its numerics' measured quality, or, for
numerics not measured yet, that of the measured numerics nearest in bytes per weight and per KV element.
(Borrowing the best quality measured instead, an optimism that makes every numerics worth one look, spent
the whole budget exploring numerics on the llama.cpp recording: hypervolume 0.84 against 0.97.)"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from atlas.frontier import hypervolume
from atlas.results import RunResult
from atlas.search.space import SearchSpace
from atlas.search.study import StudyHandle
from atlas.simulator.features import SimulatorError
from atlas.simulator.fit import CalibrationArtifact, fit
from atlas.simulator.predict import predict_config
from atlas.table import METRICS

if TYPE_CHECKING:
    from atlas.search.driver import Snapshot

NUMERICS_METRICS = frozenset({"accuracy", "perplexity", "agreement"})  # quality: one value per numerics


class Seeder:
    def __init__(self, space: SearchSpace, handle: StudyHandle):
        self.space, self.h = space, handle
        self.objectives = handle.settings.objectives
        self.sign = np.array([1.0 if o.sense == "min" else -1.0 for o in self.objectives])
        self._fitted_on: frozenset[str] | None = None
        self._artifact: CalibrationArtifact | None = None
        self._predicted: dict[int, RunResult | None] = {}
        self.failure: str | None = None

    def _refit(self, ok: list[RunResult], say: Callable[[str], None]) -> bool:
        key = frozenset(r.run_id for r in ok)
        if key == self._fitted_on:
            return self._artifact is not None
        self._fitted_on, self._predicted = key, {}
        try:
            self._artifact = fit(ok, "search", self.h.spec.model, cross_validate=False)
        except SimulatorError as e:
            if self.failure is None:
                say(f"simulator seeding off: {e}")
            self.failure, self._artifact = str(e), None
        return self._artifact is not None

    def _prediction(self, i: int) -> RunResult | None:
        if i not in self._predicted:
            p = self.space.points[i]
            assert self._artifact is not None
            try:
                self._predicted[i] = predict_config(self._artifact, p.config, p.run_id, self.h.spec.name,
                                                    self.h.spec.price_provider)
            except SimulatorError:
                self._predicted[i] = None
        return self._predicted[i]

    def _vector(self, r: RunResult, quality: dict[str, float | None]) -> np.ndarray | None:
        vals = []
        for o in self.objectives:
            v = quality.get(o.metric) if o.metric in NUMERICS_METRICS else METRICS[o.metric][2](r)
            if v is None or v != v:
                return None
            vals.append(float(v))
        return np.array(vals) * self.sign

    def best(self, snap: Snapshot, allowed: list[int], say: Callable[[str], None]) -> int | None:
        """The free point predicted to add most to the frontier, or None (nothing predicted to help, or the
        simulator cannot be fitted)."""
        ok = [r for r in snap.measured.values() if r.status == "ok" and r.metrics is not None]
        if not ok or not self._refit(ok, say):
            return None
        known: dict[tuple[str, ...], dict[str, float | None]] = {}
        for r in snap.measured.values():
            if r.quality is not None:
                known.setdefault(self._key(r), {
                    o.metric: METRICS[o.metric][2](r) for o in self.objectives if o.metric in NUMERICS_METRICS})
        front = [v for r in ok if (v := self._vector(r, known.get(self._key(r), {}))) is not None]
        cands: dict[int, np.ndarray] = {}
        errors: dict[int, float] = {}
        for i in allowed:
            pred = self._prediction(i)
            if pred is None or pred.simulation is None:
                continue
            key = self.space.numerics[i]
            v = self._vector(pred, known.get(key) or self._nearest(known, key))
            if v is not None:
                cands[i] = v
                errors[i] = min(0.5, max(0.05, max(pred.simulation.relative_error.values(), default=0.25)))
        if not cands:
            return None
        every = np.vstack([*front, *cands.values()])
        lo, hi = every.min(axis=0), every.max(axis=0)
        span = np.where(hi > lo, hi - lo, 1.0)
        ref = np.full(len(self.objectives), 1.1)
        base_front = (np.vstack(front) - lo) / span if front else np.zeros((0, len(self.objectives)))
        base = hypervolume(base_front, ref) if len(base_front) else 0.0
        speed = np.array([o.metric not in NUMERICS_METRICS for o in self.objectives], dtype=float)
        # First by the predictions themselves; when they promise nothing, by the best each could be within
        # the simulator's error (speed and cost only: quality is measured or borrowed, not predicted).
        for optimism in (0.0, 1.0):
            gains = {i: hypervolume(np.vstack([base_front, ((v - optimism * errors[i] * speed * np.abs(v) - lo)
                                                            / span)[None]]), ref) - base
                     for i, v in cands.items()}
            pick = max(gains, key=lambda i: (gains[i], -i))
            if gains[pick] > 1e-12:
                return pick
        return None

    def _key(self, r: RunResult) -> tuple[str, ...]:
        return self.space.numerics[self.space.index_of_run(r.run_id)]

    def _nearest(self, known: dict[tuple[str, ...], dict[str, float | None]], key: tuple[str, ...]) -> dict[str, float | None]:
        """The quality of the measured numerics closest in bytes per weight and per KV element."""
        def size(k: tuple[str, ...]) -> tuple[float, float]:
            n = self.space.numerics_of[k]  # type: ignore[index]
            return (n.bytes_per_weight, n.kv_bytes_per_elem)
        same = [k for k in known if k[0] == key[0]]
        if not same:
            return {}
        w, kv = size(key)
        best = min(same, key=lambda k: (abs(size(k)[0] - w) / w + abs(size(k)[1] - kv) / kv, k))
        return known[best]
