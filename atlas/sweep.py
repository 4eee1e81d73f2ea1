"""Runs a planned sweep: one engine server per distinct server config, reused across its load points;
quality once per numerics (dtype x weights x KV cache); every point written as it finishes."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from atlas.capacity import CapacityResult
from atlas.capacity_run import Guess, not_searched, quality_blocks, search_capacity
from atlas.config import SweepSpec
from atlas.engines.adapter import Caps, ModelUnavailable
from atlas.engines.base import Engine, EngineError, reason_from_log
from atlas.engines.process import stop_stale_launches
from atlas.engines.registry import ServerKnobs, adapter
from atlas.evaluate import generate
from atlas.hardware import GpuSpec, check_gpu_present
from atlas.lm_eval_adapter import is_lm_eval, run_task
from atlas.measure import PointMeasurer
from atlas.numerics import NumericsKey, baselines
from atlas.plan import PlannedRun, RunConfig, SkippedRun, expand
from atlas.preflight import preflight
from atlas.probe import HardwareProbe
from atlas.probe import measure as measure_probe
from atlas.provenance import base_provenance, endpoint_provenance, git_sha, now_iso
from atlas.quality import (
    QualityError,
    QualityResult,
    apply_gate,
    build_result,
    compare,
    load_set,
    passage,
    score_outputs,
)
from atlas.results import Provenance, ResultError, ResultStore, RunResult, skipped_result
from atlas.serving import ModelResolver, default_engine


@dataclass
class SweepEvent:
    kind: str  # planned | server | point | quality | note | capacity_step | capacity
    done: int
    total: int
    message: str
    status: str | None = None


@dataclass
class SweepReport:
    results_dir: Path
    results: list[RunResult] = field(default_factory=list)
    capacities: list[CapacityResult] = field(default_factory=list)
    wall_s: float = 0.0

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for r in self.results:
            out[r.status] = out.get(r.status, 0) + 1
        return out


EngineFactory = Callable[[SweepSpec, GpuSpec, RunConfig, str, Path], Engine]


def order_groups(groups: dict[str, list[PlannedRun]]) -> list[list[PlannedRun]]:
    """Each engine's baseline numerics first (unquantized, KV auto, most precise dtype), then the other
    numerics in spec order; within one numerics key the server with the most sequences first, since it runs
    that key's quality eval fastest."""
    firsts = [(k, g[0].config.server) for k, g in groups.items()]
    keys: list[NumericsKey] = [b.key for b in baselines([srv.numerics() for _, srv in firsts]).values()]
    keys += [srv.numerics().key for _, srv in firsts if srv.numerics().key not in keys]
    ordered = sorted(enumerate(firsts), key=lambda e: (keys.index(e[1][1].numerics().key), -e[1][1].slots, e[0]))
    return [groups[k] for _, (k, _) in ordered]


@dataclass
class _Live:
    """A started engine, kept for the points of its server config."""
    key: str
    engine: Engine
    prov: Provenance
    quality: QualityResult | str | None


@dataclass
class _Refusal:
    """Why a server config could not be started (its points are recorded as failed)."""
    reason: str
    tail: list[str]
    prov: Provenance


class Sweeper:
    def __init__(self, spec: SweepSpec, gpu: GpuSpec, results_root: Path | str, *, resume: bool = False,
                 progress: Callable[[SweepEvent], None] | None = None, price_provider: str | None = None,
                 engine_factory: EngineFactory | None = None, check_hardware: bool = True,
                 caps: dict[str, Caps] | None = None, capacity_guess: Callable[[RunConfig, HardwareProbe | None], Guess | None] | None = None,
                 client_procs: int | None = None):
        """`caps`: per engine, what the installed engine accepts (plan.expand skips what it cannot run);
        `capacity_guess`: a first guess of a server config's capacity (the calibrated simulator), given this
        machine's probe; `client_procs`: load client processes per point (None: chosen per point from its
        offered load and the cores here, atlas.loadgen_procs)."""
        self.spec, self.gpu, self.caps = spec, gpu, caps
        self.store = ResultStore(results_root, spec.name)
        self.resume = resume
        self.settings = spec.measurement_settings()  # --resume keeps only what was measured under these
        self.progress = progress or (lambda e: None)
        self.provider = price_provider or spec.price_provider
        self.engine_factory = engine_factory or default_engine
        self.check_hardware = check_hardware
        self.quality_by_key: dict[NumericsKey, QualityResult] = {}
        self.refused_keys: dict[NumericsKey, tuple[str, str, list[str]]] = {}
        self._live: _Live | None = None
        self.on_quality: Callable[[NumericsKey, str, QualityResult], None] | None = None
        self.baselines: dict[str, tuple[str, QualityResult]] = {}  # per engine: its own reference
        self.done = 0
        self.total = 0
        self.models = ModelResolver(spec, lambda message: self._emit("note", message))
        self._sha = git_sha()
        self.probe: HardwareProbe | None = None  # this machine's, taken before any engine starts
        self.capacity_guess = capacity_guess
        self.capacities: list[CapacityResult] = []
        self.points = PointMeasurer(spec, gpu, self.provider, lambda message: self._emit("note", message),
                                    client_procs=client_procs)

    # ---------------------------------------------------------------------------------------------------
    def prepare(self) -> list[PlannedRun | SkippedRun]:
        """Checks the hardware, expands the spec and writes the spec beside the results; no engine starts."""
        if self.check_hardware and self.spec.engines() != ["external"]:  # an endpoint's GPU is not here
            check_gpu_present(self.gpu)
            self.probe = measure_probe(self.gpu)
            if self.probe is not None:
                self._emit("note", f"hardware probe: {self.probe.bandwidth_gb_s:.1f} GB/s copy, "
                                   f"{self.probe.matmul_gflop_s:.0f} GFLOP/s matmul ({self.probe.seconds:.1f} s)")
        preflight(self.spec, self.gpu, self.provider, model_files=self.engine_factory is default_engine)
        items = expand(self.spec, self.gpu, self.caps)
        self.total = len(items)
        self.store.check_writable()
        for stale in stop_stale_launches(self.store.dir / "logs"):
            self._emit("note", f"stopped an engine an earlier run left behind: {stale}")
        spec = self.spec.model_dump(mode="json")
        spec.update({k: self.settings[k] for k in ("engine_env", "extra_engine_args")})  # secrets masked
        try:
            (self.store.dir / "sweep-spec.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
        except OSError as e:
            raise ResultError(f"{self.store.dir / 'sweep-spec.yaml'}: cannot write: {e.strerror or e}") from None
        return items

    def run(self) -> SweepReport:
        t0 = time.monotonic()
        items = self.prepare()
        report = SweepReport(results_dir=self.store.dir)
        self._emit("planned", f"{self.total} points planned ({sum(isinstance(i, SkippedRun) for i in items)} skipped)")
        groups: dict[str, list[PlannedRun]] = {}
        for item in items:
            if isinstance(item, SkippedRun):
                report.results.append(self.write_skipped(item))
            else:
                groups.setdefault(item.config.server_key(), []).append(item)
        if self.spec.capacity_on():
            self.total += len(groups) * self.spec.capacity.max_measurements  # at most; unused ones counted done
        for group in order_groups(groups):
            report.results += self._run_group(group)
        report.capacities = self.capacities
        report.wall_s = time.monotonic() - t0
        return report

    def write_skipped(self, item: SkippedRun) -> RunResult:
        return self._write(skipped_result(item, self.spec.name))

    def measure(self, planned: PlannedRun) -> RunResult:
        """One point (a search's unit of work). Its engine stays up for the next point with the same server
        config; call close() when done."""
        live = self._live
        if live is None or live.key != planned.config.server_key():
            self.close()
            opened = self._open(planned.config)
            if isinstance(opened, _Refusal):
                return self._fail(planned, opened.reason, opened.tail, opened.prov)
            live = self._live = opened
        result = self._measure_on(live, [planned])[0]
        if not live.engine.alive():
            self.close()
        return result

    def close(self) -> None:
        """Stops the engine kept up by measure()."""
        if self._live is not None:
            live, self._live = self._live, None
            live.engine.stop()

    def adopt_quality(self, key: NumericsKey, label: str, result: QualityResult, baseline: bool) -> None:
        """A quality result measured elsewhere (another worker of a search) for these numerics; with
        `baseline`, it is what this engine's other numerics are compared with."""
        self.quality_by_key.setdefault(key, result)
        if baseline:
            self.baselines.setdefault(key[0], (label, result))

    def refused(self, server: ServerKnobs) -> bool:
        """Whether the engine refused this server's numerics at start-up (every config sharing them fails)."""
        return server.numerics().key in self.refused_keys

    def _emit(self, kind: str, message: str, status: str | None = None) -> None:
        self.progress(SweepEvent(kind=kind, done=self.done, total=self.total, message=message, status=status))

    def _write(self, result: RunResult, records: list[dict] | None = None) -> RunResult:  # type: ignore[type-arg]
        stored = self.store.write(result, records)
        self.done += 1
        if stored.status != result.status:  # the store kept what an earlier run measured of this point
            why = "; ".join(result.reasons)[:120]
            self._emit("point", f"kept the earlier measurement of {stored.label} (this run: {result.status}: {why})",
                       stored.status)
        else:
            self._emit("point", stored.label, stored.status)
        return stored

    # ---------------------------------------------------------------------------------------------------
    def _run_group(self, group: list[PlannedRun]) -> list[RunResult]:
        server = group[0].config.server
        key = server.numerics().key
        done = self._finished_capacity(group)
        if self.resume and all(self.store.is_complete(p.run_id, p.config, self.settings) for p in group) and done is not False:
            kept = [r for r in (self.store.get(p.run_id) for p in group) if r is not None]
            if kept and kept[0].quality and key not in self.quality_by_key:
                self.quality_by_key[key] = kept[0].quality
                if server.engine not in self.baselines and server.numerics().is_baseline_candidate:
                    self.baselines[server.engine] = (server.label(), kept[0].quality)
            self.done += len(kept) + (self.spec.capacity.max_measurements if self.spec.capacity_on() else 0)
            if done is not True:  # its capacity record (True: the spec searches no capacity)
                self.capacities.append(done)
            self._emit("server", f"resume: kept {len(kept)} points of {server.label()}")
            return kept
        opened = self._open(group[0].config)
        if isinstance(opened, _Refusal):
            out = [self._fail(p, opened.reason, opened.tail, opened.prov) for p in group]
            if self.spec.capacity_on():
                self._record_capacity(not_searched(self.spec, group[0].config, opened.reason, "failed"), 0)
            return out
        self._live = opened
        try:
            out = self._measure_on(opened, group)
            if self.spec.capacity_on():
                out += self._capacity(opened, group, out)
            return out
        finally:
            self.close()

    def _finished_capacity(self, group: list[PlannedRun]) -> CapacityResult | bool:
        """--resume: this server's capacity record when its search finished under the same SLO and settings,
        False when it did not, True when the spec searches no capacity."""
        if not self.spec.capacity_on():
            return True
        if not self.resume:  # a new run searches again: nothing to read
            return False
        r = self.store.get_capacity(group[0].config.server_key())
        done = (r is not None and r.status in ("ok", "no_capacity", "not_searched") and r.slo == self.spec.slo
                and r.settings == self.spec.capacity)
        return r if done and r is not None else False

    def _capacity(self, live: _Live, group: list[PlannedRun], ladder: list[RunResult]) -> list[RunResult]:
        """The capacity search of this server config on its live engine; its points."""
        cfg = group[0].config
        if why := quality_blocks(self.spec, live.quality):
            self._record_capacity(not_searched(self.spec, cfg, why), 0)
            return []
        if not live.engine.alive():
            self._record_capacity(not_searched(self.spec, cfg, "engine died before the capacity search", "failed"), 0)
            return []
        self._emit("server", f"capacity search: {cfg.server.label()} under {self.spec.slo.describe()}")  # type: ignore[union-attr]
        guess = self.capacity_guess(cfg, self.probe) if self.capacity_guess is not None else None
        record, points = search_capacity(self.spec, cfg, ladder,
                                         lambda p: self._measure(live.engine, p, live.quality, live.prov),
                                         lambda m: self._emit("capacity_step", m), guess)
        self._record_capacity(record, len(points))
        return points

    def _record_capacity(self, record: CapacityResult, measured: int) -> None:
        stored = self.store.write_capacity(record)
        self.capacities.append(stored)
        self.done += max(0, self.spec.capacity.max_measurements - measured)
        what = (f"{stored.capacity_rps:g} rps" if stored.capacity_rps is not None
                else "; ".join(stored.reasons)[:160])
        self._emit("capacity", f"capacity of {stored.label}: {what}", stored.status)

    def _open(self, cfg: RunConfig) -> _Live | _Refusal:
        """Starts the engine of this server config and evaluates its numerics' quality (once per numerics)."""
        server = cfg.server
        key = server.numerics().key
        engine_version = adapter(server.engine).version()
        try:
            model_path, model_files = self.models.resolve(server)
        except ModelUnavailable as e:
            prov = base_provenance(self.spec.model.id, "", {}, engine_version, self._sha, self.probe, self.settings)
            return _Refusal(f"model weights not available: {e}", [], prov)
        prov = base_provenance(self.spec.model.id, model_path, model_files, engine_version, self._sha,
                               self.probe if server.engine != "external" else None, self.settings)
        if key in self.refused_keys:
            label, reason, tail = self.refused_keys[key]
            return _Refusal(f"{reason} (refused at start-up for {label}; same dtype/weights/KV cache)", tail, prov)
        self._emit("server", f"{'checking endpoint' if server.engine == 'external' else 'starting engine'}: "
                             f"{server.label()}")
        log_path = self.store.dir / "logs" / f"{cfg.server_key()}.log"
        try:
            engine = self.engine_factory(self.spec, self.gpu, cfg, model_path, log_path)
            engine.start()
        except EngineError as e:
            if e.kind == "refused":  # a configuration the engine rejects; OOM or a hung start may be transient
                self.refused_keys[key] = (server.label(), e.reason, e.log_tail)
            return _Refusal(f"engine failed to start: {e.reason}", e.log_tail, prov)
        try:
            prov.engine = engine.provenance()
            if not engine.started_by_atlas:
                prov = endpoint_provenance(prov, self.gpu)
            quality = self._quality(engine, server, model_path)
        except BaseException:
            engine.stop()
            raise
        return _Live(cfg.server_key(), engine, prov, quality)

    def _measure_on(self, live: _Live, group: list[PlannedRun]) -> list[RunResult]:
        out: list[RunResult] = []
        for i, planned in enumerate(group):
            if not live.engine.alive():
                tail = live.engine.log_tail(60)
                reason = reason_from_log(tail, "engine process died")
                out += [self._fail(p, f"engine died during the sweep: {reason}", tail, live.prov) for p in group[i:]]
                break
            out.append(self._measure(live.engine, planned, live.quality, live.prov))
        return out

    def _fail(self, planned: PlannedRun, reason: str, tail: list[str], prov: Provenance) -> RunResult:
        return self._write(RunResult(run_id=planned.run_id, sweep=self.spec.name, status="failed", reasons=[reason],
                                     label=planned.config.label(),
                                     config=planned.config, log_tail=tail[-60:],
                                     provenance=prov.model_copy(update={"finished_at": now_iso()})))

    def _quality(self, engine: Engine, server: ServerKnobs, model_path: str) -> QualityResult | str | None:
        """The gated quality result for this server's numerics, or a reason it could not be measured."""
        q = self.spec.quality
        if not q.enabled:
            return None
        key = server.numerics().key
        if key in self.quality_by_key:
            return self.quality_by_key[key]
        self._emit("quality", f"quality eval: {server.label()}")
        try:
            names = [*q.sets, *q.jsonl]
            sets = {n: load_set(n)[: q.max_items_per_set] for n in names if not is_lm_eval(n)}
            outputs = generate(engine.base_url, engine.served_model, sets, q.max_tokens,
                               concurrency=min(server.slots, 16), headers=engine.request_headers)
            outcomes, scores = score_outputs(sets, outputs)
            for n in filter(is_lm_eval, names):
                scores[n] = run_task(n, engine.base_url, engine.served_model, model_path or None,
                                     q.max_items_per_set, q.max_tokens)
            ppl = engine.perplexity(passage()) if q.perplexity else None  # None: the engine cannot say
        except QualityError as e:
            return f"quality could not be measured: {e}"
        result = build_result(outcomes, scores, ppl, server.label())
        base = None
        known = self.baselines.get(server.engine)
        if known is None and server.numerics().is_baseline_candidate:
            self.baselines[server.engine] = (server.label(), result)
        elif known is not None:
            base = known[1]
            result = result.model_copy(update={"comparison": compare(result, base, known[0])})
        result = apply_gate(result, q.gate, base)
        self.quality_by_key[key] = result
        if self.on_quality is not None:
            self.on_quality(key, server.label(), result)
        return result

    def _measure(self, engine: Engine, planned: PlannedRun, quality: QualityResult | str | None,
                 prov: Provenance) -> RunResult:
        cfg = planned.config
        label = cfg.label()
        if self.resume and self.store.is_complete(planned.run_id, cfg, self.settings):
            kept = self.store.get(planned.run_id)
            assert kept is not None
            self.done += 1
            self._emit("point", f"resume: kept {label}", kept.status)
            return kept
        if why := engine.verify():
            return self._fail(planned, f"not measured: {why}", engine.log_tail(40), prov)
        self._emit("note", f"measuring {label}")
        result, records = self.points.measure(engine, planned, quality, prov)
        return self._write(result, records)

