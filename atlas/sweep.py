"""Runs a planned sweep: one engine server per distinct server config, reused across its load points;
quality once per numerics (dtype x weights x KV cache); every point written as it finishes."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from atlas.config import SweepSpec
from atlas.cost import cost_of
from atlas.engines.adapter import Caps, ModelUnavailable
from atlas.engines.base import Engine, EngineError, reason_from_log
from atlas.engines.process import stop_stale_launches
from atlas.engines.registry import ServerKnobs, adapter
from atlas.evaluate import generate
from atlas.hardware import GpuSpec, check_gpu_present
from atlas.lm_eval_adapter import is_lm_eval, run_task
from atlas.loadgen import LoadRun, requests_of, run_load, run_sync
from atlas.metrics import repeat_stat, summarize_load
from atlas.numerics import NumericsKey, baselines
from atlas.plan import PlannedRun, RunConfig, SkippedRun, expand
from atlas.point_checks import REPEAT_METRICS, MetricsSampler, counter_deltas, pooled_summary, served_check
from atlas.preflight import preflight
from atlas.prompt_fit import exact_prompts
from atlas.provenance import base_provenance, git_sha, now_iso
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
from atlas.redact import redact_argv, redact_env
from atlas.results import Provenance, ResultError, ResultStore, RunResult, skipped_result
from atlas.serving import ModelResolver, default_engine


@dataclass
class SweepEvent:
    kind: str  # planned | server | point | quality | note
    done: int
    total: int
    message: str
    status: str | None = None


@dataclass
class SweepReport:
    results_dir: Path
    results: list[RunResult] = field(default_factory=list)
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
                 caps: dict[str, Caps] | None = None):
        """`caps`: per engine, what the installed engine accepts (plan.expand skips what it cannot run)."""
        self.spec, self.gpu, self.caps = spec, gpu, caps
        self.store = ResultStore(results_root, spec.name)
        self.resume = resume
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
        self._prompt_cache: dict[tuple[str, int, int, int], Any] = {}
        self._sha = git_sha()

    # ---------------------------------------------------------------------------------------------------
    def prepare(self) -> list[PlannedRun | SkippedRun]:
        """Checks the hardware, expands the spec and writes the spec beside the results; no engine starts."""
        if self.check_hardware:
            check_gpu_present(self.gpu)
        preflight(self.spec, self.gpu, self.provider, model_files=self.engine_factory is default_engine)
        items = expand(self.spec, self.gpu, self.caps)
        self.total = len(items)
        self.store.check_writable()
        for stale in stop_stale_launches(self.store.dir / "logs"):
            self._emit("note", f"stopped an engine an earlier run left behind: {stale}")
        spec = self.spec.model_dump(mode="json")
        spec.update(engine_env=redact_env(self.spec.engine_env), extra_engine_args=redact_argv(self.spec.extra_engine_args))
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
        for group in order_groups(groups):
            report.results += self._run_group(group)
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
        result = self.store.write(result, records)
        self.done += 1
        self._emit("point", result.label, result.status)
        return result

    # ---------------------------------------------------------------------------------------------------
    def _run_group(self, group: list[PlannedRun]) -> list[RunResult]:
        server = group[0].config.server
        key = server.numerics().key
        if self.resume and all(self.store.is_complete(p.run_id, p.config) for p in group):
            kept = [r for r in (self.store.get(p.run_id) for p in group) if r is not None]
            if kept and kept[0].quality and key not in self.quality_by_key:
                self.quality_by_key[key] = kept[0].quality
                if server.engine not in self.baselines and server.numerics().is_baseline_candidate:
                    self.baselines[server.engine] = (server.label(), kept[0].quality)
            self.done += len(kept)
            self._emit("server", f"resume: kept {len(kept)} points of {server.label()}")
            return kept
        opened = self._open(group[0].config)
        if isinstance(opened, _Refusal):
            return [self._fail(p, opened.reason, opened.tail, opened.prov) for p in group]
        self._live = opened
        try:
            return self._measure_on(opened, group)
        finally:
            self.close()

    def _open(self, cfg: RunConfig) -> _Live | _Refusal:
        """Starts the engine of this server config and evaluates its numerics' quality (once per numerics)."""
        server = cfg.server
        key = server.numerics().key
        engine_version = adapter(server.engine).version()
        try:
            model_path, model_files = self.models.resolve(server)
        except ModelUnavailable as e:
            prov = base_provenance(self.spec.model.id, "", {}, engine_version, self._sha)
            return _Refusal(f"model weights not available: {e}", [], prov)
        prov = base_provenance(self.spec.model.id, model_path, model_files, engine_version, self._sha)
        if key in self.refused_keys:
            label, reason, tail = self.refused_keys[key]
            return _Refusal(f"{reason} (refused at start-up for {label}; same dtype/weights/KV cache)", tail, prov)
        self._emit("server", f"starting engine: {server.label()}")
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
        kept = self.store.measured(planned.run_id)
        if kept is not None:  # a failure of this run never replaces what an earlier run measured
            self.done += 1
            self._emit("point", f"kept the earlier measurement of {kept.label} (this run: {reason[:120]})",
                       kept.status)
            return kept
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
                               concurrency=min(server.slots, 16))
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
        if self.resume and self.store.is_complete(planned.run_id, cfg):
            kept = self.store.get(planned.run_id)
            assert kept is not None
            self.done += 1
            self._emit("point", f"resume: kept {label}", kept.status)
            return kept
        if why := engine.verify():
            return self._fail(planned, f"not measured: {why}", engine.log_tail(40), prov)
        self._emit("note", f"measuring {label}")
        prompts, fit_warnings = self._prompts(engine, cfg)
        reset = engine.reset_prefix_cache()
        t0 = time.monotonic()
        before = engine.scrape_metrics()
        sampler = MetricsSampler(engine)
        sampler.start()
        runs: list[LoadRun] = []
        try:
            for k in range(cfg.load.repeats):
                runs.append(run_sync(run_load(engine.base_url, engine.served_model, cfg.load, seed_offset=k,
                                              fresh_connections=engine.fresh_connections,
                                              prompts=prompts[k])))
        finally:
            server_metrics = sampler.result()
        after = engine.scrape_metrics()
        server_metrics.update(counter_deltas(before, after))
        identity = engine.verify()
        per_repeat = [summarize_load(r) for r in runs]
        metrics = pooled_summary(runs, per_repeat)
        stats_ = {name: repeat_stat([s.value(name) for s in per_repeat]) for name in REPEAT_METRICS}
        unstable = [n for n, s in stats_.items() if s.unstable]
        warnings = [f"unstable across repeats (CV > 10%): {', '.join(unstable)}"] if unstable else []
        warnings += fit_warnings
        if cfg.server.prefix_caching and reset is not True:  # cached prompts would make TTFT look better
            warnings.append("the engine's prefix cache could not be reset before this point")
        if warnings:
            metrics = metrics.model_copy(update={"warnings": [*metrics.warnings, *warnings]})
        status, reasons = "ok", []
        if not metrics.valid:
            status, reasons = "invalid", list(metrics.invalid_reasons)
        served, why_not = served_check(engine.served_tokens_metric, before, after, runs)
        if served is False and why_not:
            status, reasons = "invalid", [why_not, *reasons]
        elif why_not:
            metrics = metrics.model_copy(update={"warnings": [*metrics.warnings, why_not]})
        qres = quality if isinstance(quality, QualityResult) else None
        if isinstance(quality, str):
            status, reasons = "quality_failed", [quality, *reasons]
        elif qres is not None and not qres.gate_passed:
            status, reasons = "quality_failed", [*qres.gate_reasons, *reasons]
        if not engine.alive():
            reason = reason_from_log(engine.log_tail(200), "engine process exited")
            status, reasons = "failed", [f"engine died during this point: {reason}", *reasons]
        elif identity:
            status, reasons = "failed", [f"what answered could not be verified as Atlas's engine after this "
                                         f"point: {identity}", *reasons]
        elif metrics.n_ok == 0:
            status = "failed"
            reasons = [f"every request failed ({', '.join(f'{k}={v}' for k, v in metrics.errors.items())})",
                       *reasons]
        records = [{"repeat": k, **rec.to_json()} for k, run in enumerate(runs) for rec in run.records]
        result = RunResult(run_id=planned.run_id, sweep=self.spec.name, status=status, reasons=reasons, label=label,
                           config=cfg, metrics=metrics, repeats=per_repeat, repeat_stats=stats_, quality=qres,
                           cost=cost_of(self.gpu.key, metrics, self.provider), server_metrics=server_metrics,
                           provenance=prov.model_copy(update={"finished_at": now_iso()}),
                           wall_s=time.monotonic() - t0,
                           log_tail=engine.log_tail(40) if status == "failed" else [])
        return self._write(result, records)


    def _prompts(self, engine: Engine, cfg: RunConfig) -> tuple[list[list[str]], list[str]]:
        """Each repeat's prompts, fitted to the served tokenizer (kept for the points of one engine kind and
        prompt seed: the same model's tokenizer counts them the same way)."""
        load, out, warnings = cfg.load, [], []
        for k in range(load.repeats):
            key = (cfg.engine, requests_of(load), load.prompt_tokens, load.prompt_seed + k)
            if key not in self._prompt_cache:
                self._prompt_cache[key] = exact_prompts(key[1], key[2], key[3], engine.count_tokens)
            prompts, fit = self._prompt_cache[key]
            out.append(prompts)
            if (w := fit.warning()) and w not in warnings:
                warnings.append(w)
        return out, warnings
