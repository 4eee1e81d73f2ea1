"""Measures one load point on a live engine: drives its repeats (again with more requests when the first
drive ran short), reads the engine's /metrics and the GPUs' energy around them, and builds the RunResult with
its verdict (valid, served by the engine Atlas started, quality gate), goodput against the SLO and cost."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from atlas.config import LoadPoint, SweepSpec
from atlas.cost import cost_of
from atlas.energy import EnergyResult, EnergySampler, energy_meter, energy_of
from atlas.engines.base import Engine, reason_from_log
from atlas.goodput import goodput
from atlas.hardware import GpuSpec
from atlas.host_check import HostCheck, check_host, snapshot
from atlas.loadgen import LoadRun, requests_of, run_load, run_sync
from atlas.metrics import LoadSummary, repeat_stat, summarize_load
from atlas.plan import PlannedRun, RunConfig
from atlas.point_checks import (
    REPEAT_METRICS,
    MetricsSampler,
    counter_deltas,
    extension_factor,
    pooled_summary,
    served_check,
    shared_check,
)
from atlas.provenance import now_iso
from atlas.quality import QualityResult
from atlas.results import Extension, Provenance, RunResult
from atlas.reuse import PrefixReuse, prefix_reuse
from atlas.workloads.requests import RequestPlan, WorkloadInfo, plan_info, plan_requests


def prompt_mismatch(plans: list[RequestPlan], runs: list[LoadRun]) -> str | None:
    """A warning when the server counted another prompt length than planned for some requests (not for
    sessions, whose prompts hold the engine's own answers, nor where the engine could not count)."""
    off = n = 0
    for plan, run in zip(plans, runs, strict=False):
        if plan.sessions or not plan.counted or plan.kind == "fixed":  # fixed: LoadSummary checks it
            return None
        for rec in run.records:
            if rec.prompt_tokens is not None and rec.index < len(plan.requests):
                n += 1
                off += rec.prompt_tokens != plan.requests[rec.index].prompt_tokens
    return (f"prompt length: the server counted another length than planned for {off} of {n} requests"
            if off else None)


@dataclass
class _Driven:
    """One drive of a point's load: the runs, their summaries, and what was read around them."""
    runs: list[LoadRun]
    per_repeat: list[LoadSummary]
    before: dict[str, float]
    after: dict[str, float]
    server_metrics: dict[str, float]
    fit_warnings: list[str]
    reset: bool | None
    identity: str | None
    energy: EnergyResult
    workload: WorkloadInfo
    reuse: PrefixReuse
    host: HostCheck | None  # what else ran on the host's CPUs meanwhile (engines Atlas started only)


NOT_HERE = "an external endpoint: its GPU is not on this host, so no energy is measured"


class PointMeasurer:
    """Measures points for one sweep; keeps the prompts fitted to each engine kind's tokenizer and the
    energy meter across points."""

    def __init__(self, spec: SweepSpec, gpu: GpuSpec, provider: str | None, note: Callable[[str], None],
                 client_procs: int | None = None):
        self.spec, self.gpu, self.provider, self.note = spec, gpu, provider, note
        self.client_procs = client_procs
        self._plans: dict[tuple[str, str, int, int], RequestPlan] = {}
        self._energy: tuple[Any, str | None] | None = None

    def measure(self, engine: Engine, planned: PlannedRun, quality: QualityResult | str | None,
                prov: Provenance) -> tuple[RunResult, list[dict[str, Any]]]:
        """The point's result and its raw records (the caller writes both)."""
        cfg = planned.config
        label = cfg.label()
        t0 = time.monotonic()
        d = self._drive(engine, cfg, cfg.load)
        extended = None
        factor = extension_factor(d.per_repeat, cfg.load, self.spec.load.max_extension)
        if factor is not None:  # too short or too few samples: measured again with more requests
            n = math.ceil(cfg.load.num_requests * factor)
            why = "; ".join(dict.fromkeys(r for s in d.per_repeat for r in s.invalid_reasons))
            extended = Extension(from_requests=cfg.load.num_requests, to_requests=n, reason=why)
            self.note(f"extending {label} to {n} requests ({why})")
            d = self._drive(engine, cfg, cfg.load.model_copy(update={"num_requests": n}))
        runs, per_repeat = d.runs, d.per_repeat
        metrics = pooled_summary(runs, per_repeat)
        stats_ = {name: repeat_stat([s.value(name) for s in per_repeat]) for name in REPEAT_METRICS}
        unstable = [n for n, s in stats_.items() if s.unstable]
        warnings = [f"unstable across repeats (CV > 10%): {', '.join(unstable)}"] if unstable else []
        warnings += d.fit_warnings
        if extended:
            warnings.append(f"extended from {extended.from_requests} to {extended.to_requests} requests "
                            f"({extended.reason})")
        if cfg.server.prefix_caching and d.reset is not True:  # cached prompts would make TTFT look better
            warnings.append("the engine's prefix cache could not be reset before this point")
        if warnings:
            metrics = metrics.model_copy(update={"warnings": [*metrics.warnings, *warnings]})
        status, reasons = "ok", []
        if not metrics.valid:
            status, reasons = "invalid", list(metrics.invalid_reasons)
        if d.host is not None and d.host.host_busy:
            status, reasons = "invalid", [*reasons, d.host.host_busy]
        elif d.host is not None and d.host.warning:
            metrics = metrics.model_copy(update={"warnings": [*metrics.warnings, d.host.warning]})
        served, why_not = served_check(engine.served_tokens_metric, d.before, d.after, runs)
        # someone else's endpoint may serve other clients during the point (or be several replicas)
        shared, others = (shared_check(engine.served_tokens_metric, d.before, d.after, runs)
                          if not engine.started_by_atlas else (False, None))
        if shared is None:
            served, why_not = None, None  # its counter is not one server's: it judges nothing (warned below)
        if served is False and why_not:
            status, reasons = "invalid", [why_not, *reasons]
        elif why_not:
            metrics = metrics.model_copy(update={"warnings": [*metrics.warnings, why_not]})
        if shared and others:
            status, reasons = "invalid", [others, *reasons]
        elif others:
            metrics = metrics.model_copy(update={"warnings": [*metrics.warnings, others]})
        qres = quality if isinstance(quality, QualityResult) else None
        if isinstance(quality, str):
            status, reasons = "quality_failed", [quality, *reasons]
        elif qres is not None and not qres.gate_passed:
            status, reasons = "quality_failed", [*qres.gate_reasons, *reasons]
        if not engine.alive():
            reason = reason_from_log(engine.log_tail(200), "engine process exited")
            status, reasons = "failed", [f"engine died during this point: {reason}", *reasons]
        elif d.identity:
            status, reasons = "failed", [f"what answered could not be verified as Atlas's engine after this "
                                         f"point: {d.identity}", *reasons]
        elif metrics.n_ok == 0:
            status = "failed"
            reasons = [f"every request failed ({', '.join(f'{k}={v}' for k, v in metrics.errors.items())})",
                       *reasons]
        records = [{"repeat": k, **rec.to_json()} for k, run in enumerate(runs) for rec in run.records]
        result = RunResult(run_id=planned.run_id, sweep=self.spec.name, status=status, reasons=reasons, label=label,
                           config=cfg, metrics=metrics, repeats=per_repeat, repeat_stats=stats_, quality=qres,
                           cost=cost_of(self.gpu.key, metrics, self.provider), server_metrics=d.server_metrics,
                           provenance=prov.model_copy(update={"finished_at": now_iso()}),
                           wall_s=time.monotonic() - t0, extended=extended, energy=d.energy,
                           goodput=goodput(runs, self.spec.slo) if self.spec.slo else None,
                           workload=d.workload if cfg.load.workload is not None else None, prefix_reuse=d.reuse,
                           host=d.host,
                           log_tail=engine.log_tail(40) if status == "failed" else [])
        return result, records

    def _drive(self, engine: Engine, cfg: RunConfig, load: LoadPoint) -> _Driven:
        """Runs the load's repeats against the engine, with /metrics and energy read around them."""
        plans, fit_warnings = self._plans_for(engine, cfg, load)
        reset = engine.reset_prefix_cache()
        meter, no_energy = self._energy_meter()
        if not engine.started_by_atlas:
            meter, no_energy = None, NOT_HERE
        before = engine.scrape_metrics()
        sampler = MetricsSampler(engine)
        sampler.start()
        joules = EnergySampler(meter.read_j) if meter is not None else None
        if joules is not None:
            joules.start()
        runs: list[LoadRun] = []
        # a server elsewhere is not on this host; one of someone else's here would count as another program
        host0 = snapshot() if engine.started_by_atlas else None
        try:
            for k in range(load.repeats):
                runs.append(run_sync(run_load(engine.base_url, engine.served_model, load, seed_offset=k,
                                              fresh_connections=engine.fresh_connections,
                                              plan=plans[k], procs=self.client_procs,
                                              headers=engine.request_headers)))
        finally:
            host1 = snapshot() if host0 is not None else None
            server_metrics = sampler.result()
            samples = joules.finish() if joules is not None else []
        after = engine.scrape_metrics()
        server_metrics.update(counter_deltas(before, after))
        energy = (energy_of(samples, runs, meter.source, joules.error) if joules is not None and meter is not None
                  else EnergyResult(reason=no_energy))
        reuse = prefix_reuse(server_metrics, runs, plans[0].structural_reuse())
        if mismatch := prompt_mismatch(plans, runs):
            fit_warnings = [*fit_warnings, mismatch]
        return _Driven(runs, [summarize_load(r) for r in runs], before, after, server_metrics, fit_warnings, reset,
                       engine.verify(), energy, plan_info(plans[0]), reuse,
                       check_host(host0, host1) if host0 is not None and host1 is not None else None)

    def _energy_meter(self) -> tuple[Any, str | None]:
        if self._energy is None:
            self._energy = energy_meter(self.gpu.is_cpu)
        return self._energy

    def _plans_for(self, engine: Engine, cfg: RunConfig, load: LoadPoint) -> tuple[list[RequestPlan], list[str]]:
        """Each repeat's request list, planned from the workload with the served tokenizer (kept for the points
        of one engine kind: the same model's tokenizer counts them the same way)."""
        out: list[RequestPlan] = []
        warnings: list[str] = []
        workload = load.workload.model_dump_json() if load.workload is not None else "fixed"
        for k in range(load.repeats):
            n = requests_of(load)
            key = (cfg.engine, f"{workload}|{load.prompt_tokens}|{load.output_tokens}", n, load.prompt_seed + k)
            if key not in self._plans:
                self._plans[key] = plan_requests(load, n, k, cfg.model.max_model_len, engine.count_tokens)
            plan = self._plans[key]
            out.append(plan)
            warnings += [w for w in plan.warnings if w not in warnings]
        return out, warnings
