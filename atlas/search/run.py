"""Entry points of a search: `atlas sweep --strategy ... --budget N` (one process, or the first worker of a
database study), `atlas worker` (another worker of that study, on any host) and `atlas collect` (every
worker's results from the study into one results folder, so one atlas holds them all)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from atlas.config import SweepSpec
from atlas.engines.adapter import Caps
from atlas.hardware import GpuSpec, get_gpu
from atlas.numerics import NumericsKey
from atlas.plan import PlannedRun, SkippedRun, expand
from atlas.quality import QualityResult
from atlas.results import ResultStore, RunResult, skipped_result
from atlas.search.driver import Snapshot, Worker, baseline_keys, read_snapshot
from atlas.search.settings import SearchSettings
from atlas.search.space import SearchSpace
from atlas.search.study import StudyHandle, create_study, join_study, quality_attr, quality_keys
from atlas.sweep import EngineFactory, Sweeper, SweepEvent


@dataclass
class SearchReport:
    results_dir: Path
    study: str
    stopped: str
    measured_here: list[RunResult] = field(default_factory=list)
    planned: int = 0
    skipped: int = 0
    excluded: int = 0
    wall_s: float = 0.0


class SweepMeasurer:
    """Measures with a Sweeper (its engine kept up between points of one server config) and shares quality
    results through the study: a worker adopts the baselines and numerics that others evaluated."""

    def __init__(self, sweeper: Sweeper, handle: StudyHandle, baselines: dict[str, NumericsKey]):
        self.sweeper, self.h, self.baselines = sweeper, handle, baselines
        sweeper.on_quality = self._publish

    def _publish(self, key: NumericsKey, label: str, result: QualityResult) -> None:
        self.h.study.set_user_attr(quality_attr(key), {"label": label, "result": result.model_dump(mode="json")})

    def _adopt(self) -> None:
        attrs = self.h.study.user_attrs
        for name, key in quality_keys(attrs).items():
            if key not in self.sweeper.quality_by_key:
                self.sweeper.adopt_quality(key, attrs[name]["label"],  # type: ignore[arg-type]
                                           QualityResult.model_validate(attrs[name]["result"]),
                                           baseline=self.baselines.get(key[0]) == key)

    def measure(self, planned: PlannedRun) -> RunResult:
        self._adopt()
        return self.sweeper.measure(planned)

    def refused(self, server: Any) -> bool:
        return self.sweeper.refused(server)


def _unmeasured_excluded(space: SearchSpace, snap: Snapshot, sweep: str) -> list[RunResult]:
    """Points never measured because their numerics were refused or failed the quality gate elsewhere."""
    out = []
    for i, p in enumerate(space.points):
        reason = snap.dead.get(space.numerics[i])
        if reason and i not in snap.measured:
            out.append(RunResult(run_id=p.run_id, sweep=sweep, status="skipped", label=p.config.label(),
                                 config=p.config, reasons=[f"not measured: its numerics {reason}"]))
    return out


def _work(handle: StudyHandle, gpu: GpuSpec, results_root: Path | str, engine_factory: EngineFactory | None,
          progress: Callable[[str], None], check_hardware: bool, price_provider: str | None) -> SearchReport:
    t0 = time.monotonic()

    def on_event(e: SweepEvent) -> None:
        if e.kind in ("server", "quality") or (e.kind == "point" and e.status not in ("ok", None)):
            progress(f"{e.status} {e.message}" if e.kind == "point" else e.message)

    sweeper = Sweeper(handle.spec, gpu, results_root, progress=on_event, price_provider=price_provider,
                      engine_factory=engine_factory, check_hardware=check_hardware, caps=handle.caps)
    items = sweeper.prepare()
    skipped = [sweeper.write_skipped(i) for i in items if isinstance(i, SkippedRun)]
    space = SearchSpace([i for i in items if isinstance(i, PlannedRun)])
    worker = Worker(handle, space, SweepMeasurer(sweeper, handle, baseline_keys(space)), progress)
    try:
        stopped = worker.run()
    finally:
        sweeper.close()
    snap = worker.snapshot()
    excluded = _unmeasured_excluded(space, snap, handle.spec.name)
    for r in excluded:
        sweeper.store.write(r)
    return SearchReport(results_dir=sweeper.store.dir, study=handle.study.study_name, stopped=stopped,
                        measured_here=worker.measured_here, planned=len(space),
                        skipped=len(skipped), excluded=len(excluded), wall_s=time.monotonic() - t0)


def run_search(spec: SweepSpec, gpu: GpuSpec, results_root: Path | str, settings: SearchSettings,
               storage_url: str | None = None, study_name: str | None = None,
               engine_factory: EngineFactory | None = None, progress: Callable[[str], None] | None = None,
               check_hardware: bool = True, price_provider: str | None = None,
               caps: dict[str, Caps] | None = None) -> SearchReport:
    """Creates (or rejoins) the study of this spec and works in it until its budget is spent. `caps`: what the
    creating host's engines accept; every worker plans with them, so all see the same points."""
    handle = create_study(spec, gpu.key, settings, storage_url, study_name, caps=caps)
    return _work(handle, gpu, results_root, engine_factory, progress or (lambda m: None), check_hardware,
                 price_provider)


def run_worker(storage_url: str, study_name: str, results_root: Path | str,
               engine_factory: EngineFactory | None = None, progress: Callable[[str], None] | None = None,
               check_hardware: bool = True, price_provider: str | None = None) -> SearchReport:
    """Joins a database study made by `atlas sweep --storage ...` and measures its points with the others."""
    handle = join_study(storage_url, study_name)
    return _work(handle, get_gpu(handle.gpu), results_root, engine_factory, progress or (lambda m: None),
                 check_hardware, price_provider)


def collect(storage_url: str, study_name: str, results_root: Path | str) -> tuple[Path, int]:
    """Writes every result of the study (all workers') into RESULTS/<sweep>/, with the skipped and excluded
    points, so `atlas frontier` builds one atlas. Raw per-request records stay on the host that measured;
    a result whose records are not here says so."""
    handle = join_study(storage_url, study_name)
    gpu = get_gpu(handle.gpu)
    store = ResultStore(results_root, handle.spec.name)
    items = expand(handle.spec, gpu, handle.caps)
    space = SearchSpace([i for i in items if isinstance(i, PlannedRun)])
    n = 0
    for t in handle.study.get_trials(deepcopy=False):
        if "result" not in t.user_attrs:
            continue
        r = RunResult.model_validate_json(t.user_attrs["result"])
        if r.records_file and not (store.dir / r.records_file).exists():
            r = r.model_copy(update={"records_file": None})
        store.write(r)
        n += 1
    for item in items:
        if isinstance(item, SkippedRun):
            store.write(skipped_result(item, handle.spec.name))
    for r in _unmeasured_excluded(space, read_snapshot(handle, space, {}), handle.spec.name):
        store.write(r)
    return store.dir, n
