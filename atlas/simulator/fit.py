"""Fits step-model efficiencies per engine x hardware x numerics to measured results by least squares on
log-ratios of simulated to measured TPOT, TTFT, E2E and throughput; reports leave-one-config-out error;
saves and loads the artifact as JSON (never pickle)."""

from __future__ import annotations

import datetime as dt
import json
import math
from collections.abc import Callable
from pathlib import Path

import numpy as np
from pydantic import BaseModel, ConfigDict, ValidationError
from scipy.optimize import least_squares

from atlas import __version__
from atlas.config import ModelSpec
from atlas.hardware import get_gpu
from atlas.metrics import LoadSummary, summarize_load
from atlas.results import RunResult
from atlas.simulator.features import Efficiencies, SimulatorError, step_costs
from atlas.simulator.queue import mean_lengths, simulate

ARTIFACT_VERSION = 1
TARGETS = ("tpot_p50_ms", "ttft_p50_ms", "e2e_p50_ms", "output_tok_s")  # fitted
REPORTED = (*TARGETS, "ttft_p99_ms")  # and judged


class CalibrationGroup(BaseModel):
    model_config = ConfigDict(extra="forbid")
    engine: str
    gpu: str
    numerics: tuple[str, str, str]  # dtype, quantization, kv_cache_dtype
    model: ModelSpec
    overhead_s: float
    bw_eff: float
    compute_eff: float
    n_points: int
    n_configs: int
    training_run_ids: list[str]
    fit_mape: dict[str, float | None]
    loco_mape: dict[str, float | None]  # leave-one-config-out: each server config predicted by the others
    envelope: dict[str, list[float]]  # [min, max] of each knob the fit saw

    def efficiencies(self) -> Efficiencies:
        return Efficiencies(self.overhead_s, self.bw_eff, self.compute_eff)


class CalibrationArtifact(BaseModel):
    model_config = ConfigDict(extra="forbid")
    schema_version: int = ARTIFACT_VERSION
    name: str
    created: str
    atlas_version: str
    groups: list[CalibrationGroup]


def _model_of(r: RunResult, spec_model: ModelSpec | None) -> ModelSpec:
    m = r.config.model
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


def _residuals(points: list[tuple[RunResult, ModelSpec]], eff: Efficiencies) -> np.ndarray:
    res = []
    for r, model in points:
        pred = simulate_result(r, model, eff)
        assert r.metrics is not None
        for name in TARGETS:
            m, p = r.metrics.value(name), pred.value(name)
            if m and p and m > 0 and p > 0:
                res.append(math.log(p / m))
    return np.asarray(res)


def fit_efficiencies(points: list[tuple[RunResult, ModelSpec]]) -> Efficiencies:
    def unpack(x: np.ndarray) -> Efficiencies:
        return Efficiencies(float(np.exp(x[0])), float(np.exp(x[1])), float(np.exp(x[2])))

    x0 = np.log([1e-3, 0.3, 0.3])
    lo, hi = np.log([1e-6, 1e-4, 1e-4]), np.log([10.0, 1.0, 1.0])  # efficiencies <= 1: never beat the roofline
    # ~1% precision is all a model this coarse can use; tight tolerances only cost simulations
    sol = least_squares(lambda x: _residuals(points, unpack(x)), x0, bounds=(lo, hi), diff_step=1e-3,
                        xtol=1e-6, ftol=1e-6, max_nfev=80)
    return unpack(sol.x)


def _mape(points: list[tuple[RunResult, ModelSpec]], eff: Efficiencies) -> dict[str, float | None]:
    errs: dict[str, list[float]] = {k: [] for k in REPORTED}
    for r, model in points:
        pred = simulate_result(r, model, eff)
        assert r.metrics is not None
        for name in REPORTED:
            m, p = r.metrics.value(name), pred.value(name)
            if m and p is not None and m > 0:
                errs[name].append(abs(p - m) / m)
    return {k: (float(np.mean(v)) if v else None) for k, v in errs.items()}


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
    """One calibration group per engine x GPU x numerics. `cross_validate=False` skips the leave-one-config-out error
    (one fit per held-out config): a search refitting as it measures needs the efficiencies, not the audit."""
    usable = [r for r in results if r.source == "measured" and r.status == "ok" and r.metrics is not None]
    if not usable:
        raise SimulatorError("no measured results with status ok to fit")
    groups: dict[tuple[str, str, tuple[str, str, str]], list[RunResult]] = {}
    for r in usable:
        groups.setdefault((r.config.engine, r.config.gpu, numerics_of(r)), []).append(r)
    out = []
    for (engine, gpu, numerics), rs in sorted(groups.items()):
        points = [(r, _model_of(r, spec_model)) for r in rs]
        if progress:
            progress(f"fitting {engine} on {gpu}, {'/'.join(numerics)}: {len(rs)} points")
        eff = fit_efficiencies(points)
        configs = sorted({r.config.server_key() for r in rs})
        loco: dict[str, float | None] = {k: None for k in REPORTED}
        if cross_validate and len(configs) > 1:
            errs: dict[str, list[float]] = {k: [] for k in REPORTED}
            for held in configs:
                train = [p for p in points if p[0].config.server_key() != held]
                test = [p for p in points if p[0].config.server_key() == held]
                m = _mape(test, fit_efficiencies(train))
                for k, v in m.items():
                    if v is not None:
                        errs[k].append(v)
            loco = {k: (float(np.mean(v)) if v else None) for k, v in errs.items()}
        out.append(CalibrationGroup(engine=engine, gpu=gpu, numerics=numerics, model=points[0][1],
                                    overhead_s=eff.overhead_s, bw_eff=eff.bw_eff, compute_eff=eff.compute_eff,
                                    n_points=len(rs), n_configs=len(configs),
                                    training_run_ids=sorted(r.run_id for r in rs), fit_mape=_mape(points, eff),
                                    loco_mape=loco, envelope=_envelope(rs)))
    return CalibrationArtifact(name=name, created=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
                               atlas_version=__version__, groups=out)


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
    if not isinstance(data, dict) or data.get("schema_version") != ARTIFACT_VERSION:
        raise SimulatorError(f"{path}: unsupported calibration artifact version")
    try:
        return CalibrationArtifact.model_validate(data)
    except ValidationError as e:
        raise SimulatorError(f"{path}: invalid calibration artifact: {str(e).splitlines()[0]}") from None
