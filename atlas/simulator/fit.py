"""Fits step-model efficiencies per engine x hardware x numerics to measured results by least squares on
log-ratios of simulated to measured TPOT, TTFT, E2E and throughput; reports leave-one-config-out error;
saves and loads the artifact as JSON (never pickle)."""

from __future__ import annotations

import datetime as dt
import json
import math
from collections.abc import Callable, Hashable, Mapping
from pathlib import Path

import numpy as np
from pydantic import BaseModel, ConfigDict, ValidationError

from atlas import __version__
from atlas.config import ModelSpec
from atlas.hardware import get_gpu
from atlas.metrics import LoadSummary, summarize_load
from atlas.probe import HardwareProbe, median_probe
from atlas.results import MEASURED, RunResult
from atlas.simulator.features import Efficiencies, SimulatorError, pooled_efficiencies, step_costs
from atlas.simulator.joint import DEFAULT_SHARED, fit_family
from atlas.simulator.queue import mean_lengths, simulate

ARTIFACT_VERSION = 2  # 2: held-out intervals and the machine probe (version 1 loads with neither)
TARGETS = ("tpot_p50_ms", "ttft_p50_ms", "e2e_p50_ms", "output_tok_s")  # fitted
REPORTED = (*TARGETS, "ttft_p90_ms", "ttft_p99_ms", "e2e_p90_ms")  # and judged
LEVELS = ("80", "95")  # the intervals a prediction states
ANY_KV = "*"  # an efficiency key's KV format where the engine's efficiencies do not depend on it
SHARED_REFIT_GROUPS = 3  # above this many numerics, leave-one-out keeps the full fit's engine-wide costs


def interval_half_width(log_errors: list[float], level: float) -> float | None:
    """The split-conformal half-width (in log space) that covers `level` of held-out predictions: the
    ceil((n + 1) x level)-th smallest absolute log error; with too few errors for that rank, the largest
    one (the interval then covers less than it says, and the holdout benchmark reports by how much)."""
    if not log_errors:
        return None
    errs = sorted(abs(e) for e in log_errors)
    rank = math.ceil((len(errs) + 1) * level)
    return errs[min(rank, len(errs)) - 1]


def _intervals(log_errors: dict[str, list[float]]) -> dict[str, dict[str, float]]:
    """Per metric with errors, the log half-width of each stated interval (LEVELS)."""
    return {k: {lvl: w for lvl in LEVELS if (w := interval_half_width(v, int(lvl) / 100)) is not None}
            for k, v in log_errors.items() if v}


class CalibrationGroup(BaseModel):
    model_config = ConfigDict(extra="forbid")
    engine: str
    gpu: str
    numerics: tuple[str, str, str]  # dtype, quantization, kv_cache_dtype
    model: ModelSpec
    overhead_s: float
    bw_eff: float
    compute_eff: float
    sample_s: float = 0.0  # per sequence sampled per step (version 1 artifacts: none)
    multi_pass: float = 0.0  # extra weight passes of a multi-token micro-batch (llama.cpp; artifacts before it: none)
    n_points: int
    n_configs: int
    training_run_ids: list[str]
    fit_mape: dict[str, float | None]
    loco_mape: dict[str, float | None]  # leave-one-out (_held_out_units): each config or point predicted by the rest
    envelope: dict[str, list[float]]  # [min, max] of each knob the fit saw
    # per metric, the held-out log(predicted / measured) of this group's leave-one-config-out predictions, and
    # the log half-widths of the 80% and 95% intervals that all groups' held-out errors give (the same in each
    # group of one engine x GPU)
    loco_log_errors: dict[str, list[float]] = {}
    intervals: dict[str, dict[str, float]] = {}
    probe: HardwareProbe | None = None  # the training machine's (median of its results' probes)
    # the numerics whose points fitted bw_eff/compute_eff with this group's (None: this group's own): an engine
    # whose kernels do not depend on the KV-cache format (llama.cpp) fits them once per weight format
    efficiency_key: tuple[str, str, str] | None = None
    # a numerics never measured is predicted with the other numerics' pooled efficiencies: the held-out error of
    # doing so here (each efficiency key's points predicted from the others', the same in each group of one
    # engine x GPU), and the log half-widths of the 80% and 95% intervals it gives; empty with one key only
    transfer_mape: dict[str, float | None] = {}
    transfer_intervals: dict[str, dict[str, float]] = {}
    assumption: str | None = None  # what the simulator had to assume of this engine (imported, external, mock)

    def efficiencies(self) -> Efficiencies:
        return Efficiencies(self.overhead_s, self.bw_eff, self.compute_eff, self.sample_s, self.multi_pass)


class CalibrationArtifact(BaseModel):
    model_config = ConfigDict(extra="forbid")
    schema_version: int = ARTIFACT_VERSION
    name: str
    created: str
    atlas_version: str
    groups: list[CalibrationGroup]


def _model_of(r: RunResult, spec_model: ModelSpec | None) -> ModelSpec:
    return with_facts(r.config.model, spec_model)


def with_facts(m: ModelSpec, spec_model: ModelSpec | None) -> ModelSpec:
    """`m` with the simulator's facts (parameters, layers, KV heads) from `spec_model` where it has none."""
    if m.params_b is None and spec_model is not None and spec_model.id == m.id:
        return m.model_copy(update={k: getattr(spec_model, k)
                                    for k in ("params_b", "num_layers", "num_kv_heads", "head_dim")})
    return m


def _prompt_tokens(r: RunResult) -> int | None:
    s = r.metrics
    if s and s.input_tok_s and s.requests_s:
        return max(1, round(s.input_tok_s / s.requests_s))
    return None


def measured_reuse(r: RunResult) -> float:
    """The share of its workload's shareable prompt tokens the engine really found cached on this point (1.0
    where it was not measured: the workload's structure is all there is)."""
    hit = r.prefix_reuse.hit_rate if r.prefix_reuse else None
    shared = r.workload.structural_reuse if r.workload else None
    if hit is None or not shared:
        return 1.0
    return max(0.0, min(1.0, hit / shared))


def simulate_result(r: RunResult, model: ModelSpec, eff: Efficiencies) -> LoadSummary:
    cfg = r.config
    costs = step_costs(model, cfg.server, get_gpu(cfg.gpu))
    kv_cap = r.provenance.engine.get("kv_cache_tokens") if r.provenance else None
    run = simulate(costs, eff, cfg.server, cfg.load, max_model_len=model.max_model_len,
                   prompt_tokens=_prompt_tokens(r), kv_capacity_tokens=kv_cap, reuse=measured_reuse(r))
    return summarize_load(run, intervals=False)


def _log_errors(points: list[tuple[RunResult, ModelSpec]], eff: Efficiencies) -> dict[str, list[float]]:
    """Per reported metric, log(predicted / measured) over the points that have both."""
    errs: dict[str, list[float]] = {k: [] for k in REPORTED}
    for r, model in points:
        pred = simulate_result(r, model, eff)
        assert r.metrics is not None
        for name in REPORTED:
            m, p = r.metrics.value(name), pred.value(name)
            if m and p and m > 0 and p > 0:
                errs[name].append(math.log(p / m))
    return errs


def mape_of(log_errors: dict[str, list[float]]) -> dict[str, float | None]:
    return {k: (float(np.mean([abs(math.expm1(e)) for e in v])) if v else None) for k, v in log_errors.items()}


def _mape(points: list[tuple[RunResult, ModelSpec]], eff: Efficiencies) -> dict[str, float | None]:
    return mape_of(_log_errors(points, eff))


def _envelope(rs: list[RunResult]) -> dict[str, list[float]]:
    vals: dict[str, list[float]] = {"max_num_seqs": [], "prompt_tokens": [], "output_tokens": [], "concurrency": [],
                                    "rate_rps": []}
    for r in rs:
        vals["max_num_seqs"].append(r.config.server.slots)
        prompt, output = mean_lengths(r.config)
        vals["prompt_tokens"].append(prompt)
        vals["output_tokens"].append(output)
        if r.config.load.concurrency is not None:
            vals["concurrency"].append(r.config.load.concurrency)
        if r.config.load.rate_rps is not None:
            vals["rate_rps"].append(r.config.load.rate_rps)
    return {k: [float(min(v)), float(max(v))] for k, v in vals.items() if v}


def numerics_of(r: RunResult) -> tuple[str, str, str]:
    return r.config.server.numerics().as_tuple()


def fit(results: list[RunResult], name: str, spec_model: ModelSpec | None = None,
        progress: Callable[[str], None] | None = None, cross_validate: bool = True) -> CalibrationArtifact:
    """One calibration group per engine x GPU x numerics, fitted together per engine x GPU (atlas.simulator.joint:
    shared step overhead and per-sequence cost). `cross_validate=False` skips the leave-one-config-out error (a
    refit without each server config: from the full fit's own start where the family has few numerics, else
    the numerics' efficiencies alone, warm-started, beside the full fit's engine-wide costs): a search refitting
    as it measures needs the efficiencies, not the audit."""
    # a quality-gated point measured its latency as well as any: only its numerics answer badly
    usable = [r for r in results
              if r.source in MEASURED and r.status in ("ok", "quality_failed") and r.metrics is not None]
    if not usable:
        raise SimulatorError("no measured results with status ok to fit")
    families: dict[tuple[str, str], dict[tuple[str, str, str], list[tuple[RunResult, ModelSpec]]]] = {}
    for r in usable:
        families.setdefault((r.config.engine, r.config.gpu), {}).setdefault(numerics_of(r), []).append(
            (r, _model_of(r, spec_model)))
    out = []
    for (engine, gpu), groups in sorted(families.items()):
        if progress:
            progress(f"fitting {engine} on {gpu}: {len(groups)} numerics, {sum(map(len, groups.values()))} points")
        params = shared_params(engine)
        key_of = efficiency_key_of(engine)
        pooled: dict[tuple[str, str, str], list[tuple[RunResult, ModelSpec]]] = {}
        for numerics, points in sorted(groups.items()):
            pooled.setdefault(key_of(numerics), []).extend(points)
        effs, x = fit_family(pooled, TARGETS, simulate_result, params=params)  # type: ignore[arg-type]
        log_errs: dict[tuple[str, str, str], dict[str, list[float]]] = {g: {k: [] for k in REPORTED} for g in groups}
        units = _held_out_units(pooled) if cross_validate else []
        for g, held in units:
            train = [p for p in pooled[g] if p[0].run_id not in held]
            test = [p for p in pooled[g] if p[0].run_id in held]
            if len(pooled) > SHARED_REFIT_GROUPS:
                # one unit of one group among many barely moves the engine-wide costs: keep the full fit's and
                # refit only this group's efficiencies (every group refitted would cost minutes per fit)
                refit, _ = fit_family({g: train}, TARGETS, simulate_result,  # type: ignore[arg-type, dict-item]
                                      x0=_warm(x, pooled, {g: train}, len(params)), max_nfev=30,
                                      shared=x[:len(params)], params=params)
            else:
                # the fit the other configs alone give, from the full fit's start: started at the full fit's
                # solution, which has seen the held-out config, a refit on a flat objective stays near it and the
                # errors (and so the intervals) read small (held out, 2026-12-08: 95% intervals covered 72% on
                # `-p99`, 88% from this start)
                part = {k: (train if k == g else pts) for k, pts in pooled.items()}
                refit, _ = fit_family(part, TARGETS, simulate_result, params=params)  # type: ignore[arg-type]
            for p in test:
                for k, v in _log_errors([p], refit[g]).items():
                    log_errs[numerics_of(p[0])][k] += v
        # intervals from the whole family's held-out errors: a group holds too few for a 95% quantile
        all_errs = {k: [e for g in log_errs.values() for e in g[k]] for k in REPORTED}
        intervals = _intervals(all_errs)
        transfer = _transfer_errors(pooled, effs)
        transfer_intervals = _intervals(transfer)
        for numerics, points in sorted(groups.items()):
            rs = [p[0] for p in points]
            errs = {k: v for k, v in log_errs[numerics].items() if v}
            probes = [r.provenance.hardware_probe for r in rs if r.provenance and r.provenance.hardware_probe]
            key = key_of(numerics)
            eff = effs[key]
            out.append(CalibrationGroup(
                engine=engine, gpu=gpu, numerics=numerics, model=points[0][1], overhead_s=eff.overhead_s,
                bw_eff=eff.bw_eff, compute_eff=eff.compute_eff, sample_s=eff.sample_s, multi_pass=eff.multi_pass,
                n_points=len(rs),
                n_configs=len({r.config.server_key() for r in rs}), training_run_ids=sorted(r.run_id for r in rs),
                fit_mape=_mape(points, eff), loco_mape={k: mape_of(errs).get(k) for k in REPORTED},
                envelope=_envelope(rs), loco_log_errors={k: [round(e, 5) for e in v] for k, v in errs.items()},
                intervals=intervals, probe=median_probe(probes), assumption=_assumption(engine),
                efficiency_key=None if key == numerics else key,
                transfer_mape=mape_of(transfer) if any(transfer.values()) else {},
                transfer_intervals=transfer_intervals))
    return CalibrationArtifact(name=name, created=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
                               atlas_version=__version__, groups=out)


def shared_params(engine: str) -> tuple[str, ...]:
    """The engine-wide step parameters this engine's step model prices (its adapter's `shared_step_params`)."""
    from atlas.engines.registry import adapter

    return tuple(getattr(adapter(engine), "shared_step_params", DEFAULT_SHARED))


def efficiency_key_of(engine: str) -> Callable[[tuple[str, str, str]], tuple[str, str, str]]:
    """Which part of a numerics sets this engine's kernel efficiencies: all of it, or (an adapter with
    `efficiency_per_kv = False`: llama.cpp) its dtype and weight format, the KV-cache format then priced by its
    bytes alone and the efficiencies fitted on every KV format's points of those weights."""
    from atlas.engines.registry import adapter

    if getattr(adapter(engine), "efficiency_per_kv", True):
        return lambda n: n
    return lambda n: (n[0], n[1], ANY_KV)


def _assumption(engine: str) -> str | None:
    from atlas.engines.registry import adapter

    return getattr(adapter(engine), "scheduler_guess", None)


def _transfer_errors(pooled: dict[tuple[str, str, str], list[tuple[RunResult, ModelSpec]]],
                     effs: Mapping[Hashable, Efficiencies]) -> dict[str, list[float]]:
    """Per reported metric, log(predicted / measured) of each efficiency key's points predicted as numerics never
    measured are: with the point-weighted efficiencies of the family's other keys (predict._choose). Empty with
    a single key: nothing to predict it from."""
    out: dict[str, list[float]] = {k: [] for k in REPORTED}
    if len(pooled) < 2:
        return out
    for key, points in pooled.items():
        others = pooled_efficiencies((effs[k], len(pts)) for k, pts in pooled.items() if k != key)
        for k, v in _log_errors(points, others).items():
            out[k] += v
    return out


def _held_out_units(groups: dict[tuple[str, str, str], list[tuple[RunResult, ModelSpec]]]
                    ) -> list[tuple[tuple[str, str, str], set[str]]]:
    """What leave-one-out holds out in turn: each server config of a numerics measured with others (its
    efficiencies are still fitted without it), else each point of a numerics' only config (predicted from the
    same server at its other loads); a numerics with one point is never held out (it would be an extrapolation)."""
    units: list[tuple[tuple[str, str, str], set[str]]] = []
    for g, pts in groups.items():
        by_config: dict[str, set[str]] = {}
        for r, _ in pts:
            by_config.setdefault(r.config.server_key(), set()).add(r.run_id)
        if len(by_config) > 1:
            units += [(g, ids) for ids in by_config.values()]
        elif len(pts) > 1:
            units += [(g, {r.run_id}) for r, _ in pts]
    return units


def _warm(x: np.ndarray, full: dict, part: dict, ns: int) -> np.ndarray:  # type: ignore[type-arg]
    """The full fit's solution (`ns` shared parameters first) restricted to the groups a refit keeps (its warm
    start)."""
    keys = sorted(full, key=repr)
    keep = [i for i, k in enumerate(keys) if k in part]
    return np.concatenate([x[:ns], *[x[ns + 2 * i:ns + 2 + 2 * i] for i in keep]])


def save(artifact: CalibrationArtifact, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(artifact.model_dump_json(indent=1))
    return path


def load(path: Path) -> CalibrationArtifact:
    try:
        data = json.loads(Path(path).read_text())
    except OSError as e:
        raise SimulatorError(f"{path}: cannot read calibration artifact: {e.strerror}") from None
    except ValueError as e:
        raise SimulatorError(f"{path}: corrupted calibration artifact: {e}") from None
    if not isinstance(data, dict) or data.get("schema_version") not in (1, ARTIFACT_VERSION):
        raise SimulatorError(f"{path}: unsupported calibration artifact version")
    data["schema_version"] = ARTIFACT_VERSION  # a version 1 artifact: no intervals, no probe (both optional)
    try:
        return CalibrationArtifact.model_validate(data)
    except ValidationError as e:
        raise SimulatorError(f"{path}: invalid calibration artifact: {str(e).splitlines()[0]}") from None
