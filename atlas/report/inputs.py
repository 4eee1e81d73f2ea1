"""What a report or frontier of one results folder is made from, per sweep: its measured results, its capacity
records, and the spec it was measured under (read from the sweep-spec.yaml beside them) for its SLO, quality
objective and traffic."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from atlas.capacity import CapacityResult
from atlas.config import SpecError, SweepSpec, load_spec
from atlas.frontier import Objective, default_objectives
from atlas.results import ResultError, RunResult, load_capacities, load_results
from atlas.slo import SloSpec


@dataclass
class SweepInputs:
    name: str
    results: list[RunResult]
    capacities: list[CapacityResult] = field(default_factory=list)
    spec: SweepSpec | None = None
    slo: SloSpec | None = None  # the SLO its capacities were searched under (else the spec's)
    objectives: list[Objective] = field(default_factory=default_objectives)
    traffic_rps: float | None = None


def _spec_beside(results_dir: Path, name: str) -> tuple[SweepSpec | None, str | None]:
    for folder in [results_dir / name, *([results_dir] if results_dir.name == name else [])]:
        path = folder / "sweep-spec.yaml"
        if path.is_file():
            try:
                return load_spec(path), None
            except SpecError as e:
                return None, f"{path}: not used ({str(e)[:200]}); default objectives and no SLO"
    return None, None


def _defaults(spec: SweepSpec | None, results: list[RunResult]) -> list[Objective]:
    """The default objectives; without the quality one where the sweep measured no quality at all (a
    `quality: {enabled: false}` spec): cost and latency are then all a frontier can compare."""
    objs = default_objectives(spec.quality.objective if spec else "accuracy")
    if (spec is not None and not spec.quality.enabled) or not any(r.quality is not None for r in results):
        return objs[:2]
    return objs


def sweep_inputs(results_dir: Path, objectives: list[Objective] | None = None,
                 traffic_rps: float | None = None) -> tuple[list[SweepInputs], list[str]]:
    """Per sweep under results_dir, what its report is made from; the load errors (one line each)."""
    results, errors = load_results(results_dir)
    if not results:
        raise ResultError(f"{results_dir}: no readable result files")
    capacities, cap_errors = load_capacities(results_dir)
    errors += cap_errors
    out = []
    by_sweep: dict[str, list[RunResult]] = {}
    for r in results:
        by_sweep.setdefault(r.sweep, []).append(r)
    for name, rs in sorted(by_sweep.items()):
        spec, why = _spec_beside(results_dir, name)
        if why:
            errors.append(why)
        mine = [c for c in capacities if c.sweep == name]
        measured = {c.server_key for c in mine if c.source == "measured"}
        caps = [c for c in mine if c.source == "measured" or c.server_key not in measured]  # measured wins
        slos = {c.slo for c in caps}
        if len(slos) > 1:
            errors.append(f"{name}: capacity records under {len(slos)} different SLOs; those under the spec's "
                          f"SLO are used")
            caps = [c for c in caps if spec is not None and c.slo == spec.slo] or caps
        out.append(SweepInputs(
            name=name, results=rs, capacities=caps, spec=spec,
            slo=caps[0].slo if caps else (spec.slo if spec else None),
            objectives=objectives or _defaults(spec, rs),
            traffic_rps=traffic_rps or (spec.capacity.traffic_rps if spec else None)))
    return out, errors
