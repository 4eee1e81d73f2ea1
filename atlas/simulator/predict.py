"""Predictions for the points of a spec that were not measured: each one a RunResult with
source="simulated", an interval from the calibration's held-out error, and an `extrapolated` flag with the
reasons whenever it leaves the calibrated envelope (another GPU, other numerics, knobs outside the range)."""

from __future__ import annotations

import math

from atlas.config import SweepSpec
from atlas.cost import cost_of
from atlas.hardware import GpuSpec, get_gpu
from atlas.metrics import LoadSummary, MetricSummary, PercentileStat, summarize_load
from atlas.plan import PlannedRun, RunConfig, expand
from atlas.probe import HardwareProbe, drift, drift_reasons, drift_tolerance
from atlas.results import RunResult, SimulationInfo
from atlas.simulator.features import (
    Efficiencies,
    SimulatorError,
    kv_capacity_tokens,
    pooled_efficiencies,
    step_costs,
)
from atlas.simulator.fit import CalibrationArtifact, CalibrationGroup, efficiency_key_of
from atlas.simulator.queue import mean_lengths, simulate

# A prediction from other numerics, another GPU or another machine (what leave-one-out never does) has an interval
# this many times the held-out error. Knobs outside the calibrated range do not widen it: the held-out errors
# already come from such extrapolations (a config's other slot count, a load predicted from the other loads), and
# widening them too made 80% intervals hold 97% of held-out values on the llama.cpp grid (85% without).
EXTRAPOLATION_WIDENING = 2.0


def _choose(artifact: CalibrationArtifact, cfg: RunConfig) -> tuple[Efficiencies, CalibrationGroup, list[str], str]:
    """The efficiencies to use, the group they come from, why they extrapolate, and how far they travel:
    "exact" (this numerics on this GPU), "kv" (its weights' efficiencies, another KV format measured), "numerics"
    (other numerics of this GPU, pooled), "device" (another GPU) or "cpu-gpu" (between a CPU and a GPU)."""
    s = cfg.server
    numerics = s.numerics().as_tuple()
    same_engine = [g for g in artifact.groups if g.engine == cfg.engine]
    if not same_engine:
        raise SimulatorError(f"calibration {artifact.name!r} has no fit for engine {cfg.engine!r}")
    exact = [g for g in same_engine if g.gpu == cfg.gpu and g.numerics == numerics]
    if exact:
        return exact[0].efficiencies(), exact[0], [], "exact"
    key = efficiency_key_of(cfg.engine)(numerics)
    kin = [g for g in same_engine if g.gpu == cfg.gpu and g.efficiency_key == key]
    if kin:  # the same kernels measured with another KV-cache format: their efficiencies, this format's bytes
        best = max(kin, key=lambda g: g.n_points)
        return best.efficiencies(), best, [
            f"numerics {'/'.join(numerics)} not measured on {cfg.gpu}: efficiencies of the same weights with kv "
            f"{', '.join(sorted({g.numerics[2] for g in kin}))}, its own KV bytes"], "kv"
    pool = [g for g in same_engine if g.gpu == cfg.gpu]
    if pool:
        kind = "numerics"
        reasons = [f"numerics {'/'.join(numerics)} not measured on {cfg.gpu}: bytes model with its other fits"]
    else:
        pool = [g for g in same_engine if g.numerics == numerics] or same_engine
        kinds = sorted({g.gpu for g in pool})
        reasons = [f"{cfg.gpu} not measured: efficiencies transferred from {', '.join(kinds)}"]
        kind = "device"
        if any(get_gpu(k).is_cpu != get_gpu(cfg.gpu).is_cpu for k in kinds):
            kind = "cpu-gpu"
            reasons.append("transfer between a CPU and a GPU: efficiencies are not comparable")
    eff = pooled_efficiencies((g.efficiencies(), g.n_points) for g in pool)
    return eff, max(pool, key=lambda g: g.n_points), reasons, kind


def _envelope_reasons(group: CalibrationGroup, cfg: RunConfig) -> list[str]:
    out = []
    prompt, output = mean_lengths(cfg)
    checks = {"max_num_seqs": cfg.server.slots, "prompt_tokens": prompt,
              "output_tokens": output, "concurrency": cfg.load.concurrency,
              "rate_rps": cfg.load.rate_rps}
    for k, v in checks.items():
        if v is None:
            continue
        bounds = group.envelope.get(k)
        if bounds is None:
            out.append(f"{k}={v:g}: the calibration measured no {k}")
            continue
        lo, hi = bounds
        if not lo <= v <= hi:
            out.append(f"{k}={v:g} outside the calibrated range {lo:g}-{hi:g}")
    return out


_BASE_METRIC = {"ttft_ms": "ttft_p50_ms", "tpot_ms": "tpot_p50_ms", "itl_ms": "tpot_p50_ms", "e2e_ms": "e2e_p50_ms"}


def _widen(m: MetricSummary | None, name: str, widths: dict[str, dict[str, float]], fallback: float) -> MetricSummary | None:
    """Each percentile's 95% interval: [v / e^w, v x e^w] with w the held-out log half-width of that metric
    (or of its p50 where the percentile had no held-out points); `fallback` (a relative error) where none."""
    if m is None:
        return None

    def w(q: int, p: PercentileStat) -> PercentileStat:
        if p.value is None:
            return p
        metric = f"{name.removesuffix('_ms')}_p{q}_ms"
        half = (widths.get(metric) or widths.get(_BASE_METRIC[name]) or {}).get("95")
        if half is None:
            lo, hi = p.value * (1 - fallback), p.value * (1 + fallback)
            why = "simulated: interval from held-out mean error (too few held-out points for a 95% interval)"
        else:
            lo, hi = p.value / math.exp(half), p.value * math.exp(half)
            why = "simulated: 95% interval from held-out errors"
        return PercentileStat(value=p.value, ci_low=lo, ci_high=hi, reason=why)
    return m.model_copy(update={f"p{q}": w(q, m.pct(q)) for q in (50, 90, 95, 99)})


def _on_this_machine(eff: Efficiencies, group: CalibrationGroup, probe: HardwareProbe | None,
                     gpu: GpuSpec) -> tuple[Efficiencies, list[str], dict[str, float] | None]:
    """The efficiencies moved from the calibration's machine to the one `probe` describes: achieved bandwidth
    and matrix rate scale with what each machine probed (a CPU's fixed step overhead with its matrix rate),
    never past the roofline; and why the prediction extrapolates when the machines differ beyond tolerance."""
    ratios = drift(group.probe, probe)
    if ratios is None:
        if probe is None:
            return eff, [], None
        why = ("was not probed" if group.probe is None else
               f"was probed another way ({group.probe.device}, {group.probe.method})")
        return eff, [f"the calibration's machine {why}: whether it is like this one is unknown"], None
    host = 1 / ratios["matmul"] if gpu.is_cpu else 1.0  # a CPU's per-step work runs as fast as its matrix rate
    moved = Efficiencies(eff.overhead_s * host, min(1.0, eff.bw_eff * ratios["bandwidth"]),
                         min(1.0, eff.compute_eff * ratios["matmul"]), eff.sample_s * host, eff.multi_pass)
    reasons = drift_reasons(ratios, drift_tolerance(group.probe, probe))
    if reasons:
        reasons.append("efficiencies scaled by the probes")
    return moved, reasons, ratios


def predict_config(artifact: CalibrationArtifact, cfg: RunConfig, run_id: str, sweep: str,
                   price_provider: str | None = None, probe: HardwareProbe | None = None) -> RunResult:
    """`probe`: the machine the prediction is for (a sweep's own, or this one's), when it differs from the
    calibration's."""
    eff, group, reasons, travel = _choose(artifact, cfg)
    cross_device = travel == "cpu-gpu"
    outside = _envelope_reasons(group, cfg)
    model = cfg.model if cfg.model.params_b is not None else group.model.model_copy(update={"id": cfg.model.id})
    gpu = get_gpu(cfg.gpu)
    eff, drifted, ratios = _on_this_machine(eff, group, probe, gpu)
    widen = EXTRAPOLATION_WIDENING if reasons or drifted else 1.0  # outside the knob range alone: see above
    reasons += outside + drifted
    costs = step_costs(model, cfg.server, gpu)
    capacity = kv_capacity_tokens(costs, gpu, cfg.server)
    prompt, output = mean_lengths(cfg)
    per_request = round(prompt + output)
    if capacity is not None and capacity < per_request:
        raise SimulatorError(f"{cfg.server.label()} on {cfg.gpu}: KV cache for {capacity} tokens cannot hold one "
                             f"{per_request}-token request")
    summary: LoadSummary = summarize_load(simulate(costs, eff, cfg.server, cfg.load,
                                                   max_model_len=cfg.model.max_model_len,
                                                   kv_capacity_tokens=capacity))
    mape, intervals = (group.loco_mape if any(v is not None for v in group.loco_mape.values())
                       else group.fit_mape), group.intervals
    if travel == "numerics":
        if group.transfer_intervals:  # what predicting each measured numerics from the others erred here
            mape, intervals = group.transfer_mape, group.transfer_intervals
            widen = EXTRAPOLATION_WIDENING if drifted else 1.0
        else:
            reasons.append("its interval is a guess: the calibration fitted one set of efficiencies, so how far "
                           "they carry to other numerics was never checked")
    errors = {k: min(0.95, (v if v is not None else 0.25) * widen) for k, v in mape.items()}
    if cross_device:
        errors = {k: max(v, 0.5) for k, v in errors.items()}  # a CPU fit says little about a GPU
    widths = {k: {lvl: min(3.0, w * widen) for lvl, w in v.items()} for k, v in intervals.items()}
    if cross_device:
        widths = {k: {lvl: max(w, math.log(2)) for lvl, w in v.items()} for k, v in widths.items()}
    lat = errors.get("tpot_p50_ms", 0.25)
    summary = summary.model_copy(update={n: _widen(getattr(summary, n), n, widths, lat)
                                         for n in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms")})
    if group.assumption:
        summary = summary.model_copy(update={"warnings": [*summary.warnings, f"calibration: {group.assumption}"]})
    batch = min(cfg.server.slots, cfg.load.concurrency or cfg.server.slots)
    bound_ms = costs.roofline_s(batch, round(batch * (prompt + output / 2))) * 1e3
    tpot = summary.tpot_ms.p50.value if summary.tpot_ms else None
    if tpot is not None and tpot < bound_ms * 0.999:
        raise SimulatorError(f"prediction {tpot:.3g} ms beats the roofline bound {bound_ms:.3g} ms (a bug)")
    info = SimulationInfo(artifact=artifact.name, calibrated_on=f"{group.engine}/{group.gpu}/{'/'.join(group.numerics)}",
                          extrapolated=bool(reasons), extrapolation_reasons=reasons, relative_error=errors,
                          intervals=widths, probe_ratios=ratios,
                          roofline_tpot_ms=bound_ms, kv_cache_tokens=capacity,
                          max_concurrency=None if capacity is None else capacity / per_request)
    return RunResult(run_id=run_id, sweep=sweep, source="simulated", status="ok",
                     reasons=[f"simulated ({'extrapolated: ' + '; '.join(reasons) if reasons else 'calibrated'})"],
                     label=cfg.label(), config=cfg, metrics=summary, cost=cost_of(cfg.gpu, summary, price_provider),
                     simulation=info)


def predict_spec(artifact: CalibrationArtifact, spec: SweepSpec, gpu: GpuSpec, measured: list[RunResult],
                 price_provider: str | None = None, probe: HardwareProbe | None = None) -> list[RunResult]:
    """Every planned point of `spec` on `gpu` that has no measured result; quality (a property of numerics,
    not of batching) is carried over from a measured point with the same GPU and numerics when there is one."""
    done = {r.run_id for r in measured if r.source == "measured" and r.status != "skipped"}
    quality = quality_sources(measured)
    out = []
    for item in expand(spec, gpu):
        if not isinstance(item, PlannedRun) or item.run_id in done:
            continue
        out.append(with_quality(predict_config(artifact, item.config, item.run_id, spec.name, price_provider, probe),
                                quality))
    return out


def quality_sources(measured: list[RunResult]) -> dict[tuple[object, ...], RunResult]:
    """Per (GPU, numerics), a measured point whose quality a prediction may carry (quality belongs to the
    numerics, not to batching or load)."""
    out: dict[tuple[object, ...], RunResult] = {}
    for r in measured:
        if r.quality is not None and r.status in ("ok", "quality_failed"):
            out.setdefault((r.config.gpu, r.config.server.numerics().key), r)
    return out


def with_quality(res: RunResult, sources: dict[tuple[object, ...], RunResult]) -> RunResult:
    src = sources.get((res.config.gpu, res.config.server.numerics().key))
    if src is None or src.quality is None:
        return res
    assert res.simulation is not None
    return res.model_copy(update={
        "quality": src.quality, "status": "ok" if src.quality.gate_passed else "quality_failed",
        "simulation": res.simulation.model_copy(update={"quality_from": src.label})})
