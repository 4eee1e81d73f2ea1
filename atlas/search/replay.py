"""A Measurer that replays a recorded full-grid sweep: search strategies can be compared on real
measurements without measuring again (benchmarks/search_efficiency.py, tests)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from atlas.config import SweepSpec, load_spec
from atlas.engines.registry import ServerKnobs
from atlas.frontier import Objective, hypervolume
from atlas.plan import PlannedRun
from atlas.results import RunResult
from atlas.search import SearchError
from atlas.search.driver import objective_values


class ReplayMeasurer:
    def __init__(self, recorded: list[RunResult]):
        self.by_id = {r.run_id: r for r in recorded if r.source == "measured" and r.status != "skipped"}
        # The recorded sweep's refusals: a failed start with the engine's own reason, shared by its numerics.
        self._refused = {r.config.server.numerics().key for r in self.by_id.values()
                         if r.status == "failed" and any(x.startswith("engine failed to start") for x in r.reasons)}
        self.measured: list[str] = []

    def measure(self, planned: PlannedRun) -> RunResult:
        r = self.by_id.get(planned.run_id)
        if r is None:
            raise SearchError(f"the recording has no result for {planned.config.label()} (run {planned.run_id})")
        self.measured.append(planned.run_id)
        return r

    def refused(self, server: ServerKnobs) -> bool:
        return server.numerics().key in self._refused


def hypervolume_fraction(subset: list[RunResult], full: list[RunResult], objectives: list[Objective]) -> float:
    """Hypervolume of the frontier of `subset` over that of `full` (the whole grid), both over the points the
    frontier admits (status ok, every objective measured), in objectives scaled to [0, 1] by the whole grid's
    range with the reference point at 1.1."""
    sign = np.array([1.0 if o.sense == "min" else -1.0 for o in objectives])

    def matrix(rs: list[RunResult]) -> np.ndarray:
        rows = [v for r in rs if r.status == "ok" and (v := objective_values(r, objectives)) is not None]
        return np.asarray(rows, dtype=float).reshape(-1, len(objectives)) * sign

    whole = matrix(full)
    if not len(whole):
        raise SearchError("the whole grid has no point the frontier admits")
    lo, hi = whole.min(axis=0), whole.max(axis=0)
    span = np.where(hi > lo, hi - lo, 1.0)
    ref = np.full(len(objectives), 1.1)
    part = matrix(subset)
    total = hypervolume((whole - lo) / span, ref)
    return hypervolume((part - lo) / span, ref) / total if len(part) else 0.0


def recording_spec(folder: Path | str, sizes_from: Path | str) -> SweepSpec:
    """The spec a recording was measured under (its sweep-spec.yaml: grid and load as they were), with the model
    sizes of another spec (recordings made before the sizes were in the spec lack them; the simulator needs
    them, and they are not part of run ids)."""
    recorded = load_spec(Path(folder) / "sweep-spec.yaml")
    return recorded.model_copy(update={"model": load_spec(sizes_from).model})
