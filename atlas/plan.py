"""Pure, deterministic expansion of a sweep spec into planned and skipped runs."""

from __future__ import annotations

import hashlib
import itertools
import json
from typing import Literal

from pydantic import BaseModel, ConfigDict

from atlas.config import Grid, LoadPoint, ModelSpec, ServerKnobs, SweepSpec
from atlas.engines.vllm_caps import KV_SCALES_REMOVED, VllmCaps
from atlas.hardware import GpuSpec
from atlas.knobs import (
    DTYPE_FACTS,
    KV_BYTES_PER_ELEM,
    QUANT_FACTS,
    Dtype,
    EngineKind,
    KVCacheDtype,
    LoadMode,
    Quantization,
)

DESCRIPTIVE_MODEL_FIELDS = ("params_b", "num_layers", "num_kv_heads", "head_dim")


class RunConfig(BaseModel):
    """Everything that determines a measurement; its hash is the run id."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    engine: str
    gpu: str
    model: ModelSpec
    server: ServerKnobs
    load: LoadPoint

    def server_key(self) -> str:
        model = self.model.model_dump(mode="json", exclude=set(DESCRIPTIVE_MODEL_FIELDS))
        return _digest({"engine": self.engine, "gpu": self.gpu, "model": model,
                        "server": self.server.model_dump(mode="json")})

    def label(self) -> str:
        return f"{self.server.label()} | {self.load.label()}"

    def run_id(self) -> str:
        # The model's size fields only describe it (for screening and the simulator); they are left out so
        # that adding them to a spec does not orphan what was already measured.
        return _digest(self.model_dump(mode="json", exclude={"model": set(DESCRIPTIVE_MODEL_FIELDS)}))


class PlannedRun(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    kind: Literal["planned"] = "planned"
    run_id: str
    config: RunConfig


class SkippedRun(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    kind: Literal["skipped"] = "skipped"
    run_id: str
    config: RunConfig
    reason: str


def _digest(obj: object) -> str:
    canon = json.dumps(obj, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canon.encode()).hexdigest()[:16]


def grid_servers(g: Grid) -> list[ServerKnobs]:
    combos = itertools.product(g.dtype, g.quantization, g.kv_cache_dtype, g.max_num_seqs,
                               g.max_num_batched_tokens, g.enable_chunked_prefill, g.enable_prefix_caching,
                               g.gpu_memory_utilization, g.n_ubatch)
    return [ServerKnobs(dtype=d, quantization=q, kv_cache_dtype=kv, max_num_seqs=s, max_num_batched_tokens=b,
                        enable_chunked_prefill=c, enable_prefix_caching=p, gpu_memory_utilization=u, n_ubatch=ub)
            for d, q, kv, s, b, c, p, u, ub in combos]


def server_grid(spec: SweepSpec) -> list[tuple[EngineKind, ServerKnobs]]:
    """Every (engine, server config) of the spec's grids, in order, without repeats."""
    out: dict[tuple[EngineKind, ServerKnobs], None] = {}
    for engine, g in spec.grids():
        for s in grid_servers(g):
            out[(engine, s)] = None
    return list(out)


def load_points(spec: SweepSpec) -> list[LoadPoint]:
    shape = spec.load.shape().model_dump()
    if spec.load.mode == LoadMode.CLOSED:
        return [LoadPoint(**shape, concurrency=c) for c in spec.load.concurrency]
    return [LoadPoint(**shape, rate_rps=r) for r in spec.load.rate_rps]


def infeasible_reason(spec: SweepSpec, gpu: GpuSpec, s: ServerKnobs, vllm: VllmCaps | None = None) -> str | None:
    """Why this server config cannot run on this GPU (and, when `vllm` is given, on that vLLM), or None. Only
    combinations known to be impossible are refused here; what the engine itself refuses is recorded from the
    engine as a failed run."""
    if s.engine == EngineKind.LLAMACPP:
        return _llamacpp_reason(s, gpu)
    q = s.quantization
    scales = spec.model.kv_scales_checkpoint(q, s.kv_cache_dtype)
    if q in (Quantization.AWQ, Quantization.GPTQ) and q not in spec.model.checkpoints and not scales:
        return f"no {q.value.upper()} checkpoint given (model.checkpoints.{q.value}: a pre-quantized folder or hub id)"
    if s.kv_cache_dtype == KVCacheDtype.FP8_CALIBRATED and not scales and vllm and not vllm.calculate_kv_scales:
        return (f"fp8_calibrated needs calibrated KV scales: {vllm.label()} computes none at start-up "
                f"({KV_SCALES_REMOVED}) and without them runs FP8 with scale 1.0; give model.kv_scales.{q.value} "
                "(a checkpoint with calibrated scales: atlas quantize --kv-scales)")
    if s.max_num_batched_tokens is not None:
        if s.max_num_batched_tokens < s.max_num_seqs:
            return (f"max_num_batched_tokens={s.max_num_batched_tokens} < max_num_seqs={s.max_num_seqs} "
                    "(vLLM requires at least one token per sequence per step)")
        if s.enable_chunked_prefill is False and s.max_num_batched_tokens < spec.model.max_model_len:
            return (f"chunked prefill off needs max_num_batched_tokens >= max_model_len "
                    f"({s.max_num_batched_tokens} < {spec.model.max_model_len})")
    if gpu.is_cpu:
        if s.gpu_memory_utilization is not None:
            return "gpu_memory_utilization has no meaning on the CPU engine"
        return None
    if s.dtype == Dtype.FLOAT32 and q != Quantization.NONE:
        return f"{q.value} weights need a 16-bit activation dtype, not float32"
    fit = _memory_reason(spec, gpu, s)
    if fit:
        return fit
    if s.kv_cache_dtype != KVCacheDtype.AUTO and s.dtype == Dtype.FLOAT32:
        return "fp8 KV cache with a float32 model is not supported by vLLM's GPU attention backends"
    return None


def _llamacpp_reason(s: ServerKnobs, gpu: GpuSpec) -> str | None:
    if not gpu.is_cpu:
        return f"the llama.cpp engine Atlas builds is CPU-only (no {gpu.key} backend compiled in)"
    if s.n_ubatch is not None and s.max_num_batched_tokens is not None and s.n_ubatch > s.max_num_batched_tokens:
        return (f"n_ubatch={s.n_ubatch} > n_batch (max_num_batched_tokens)={s.max_num_batched_tokens}: "
                "llama.cpp's physical batch cannot exceed its logical batch")
    return None


def _memory_reason(spec: SweepSpec, gpu: GpuSpec, s: ServerKnobs) -> str | None:
    """Weights plus one max-length sequence's KV cache must fit in the memory vLLM may use."""
    m = spec.model
    if m.params_b is None:
        return None
    dtype_bytes = DTYPE_FACTS[s.dtype].bytes_per_elem
    per_weight = QUANT_FACTS[s.quantization].bytes_per_weight or dtype_bytes
    weights_gib = m.params_b * 1e9 * per_weight / 2**30
    kv_gib = 0.0
    if m.num_layers and m.num_kv_heads and m.head_dim:
        kv_elem = KV_BYTES_PER_ELEM[s.kv_cache_dtype] or dtype_bytes
        kv_gib = 2 * m.num_layers * m.num_kv_heads * m.head_dim * kv_elem * m.max_model_len / 2**30
    budget = gpu.memory_gib * (s.gpu_memory_utilization or 0.9)
    if weights_gib + kv_gib > budget:
        return (f"does not fit: {weights_gib:.1f} GiB of weights + {kv_gib:.2f} GiB KV for one "
                f"{m.max_model_len}-token sequence > {budget:.1f} GiB usable on {gpu.key}")
    return None


def expand(spec: SweepSpec, gpu: GpuSpec, vllm: VllmCaps | None = None) -> list[PlannedRun | SkippedRun]:
    """Every (server config x load point) of the spec, in a stable order; same inputs, same list. `vllm`: what
    the vLLM that will run the sweep accepts (None: assume any version)."""
    out: list[PlannedRun | SkippedRun] = []
    points = load_points(spec)
    for engine, server in server_grid(spec):
        reason = infeasible_reason(spec, gpu, server, vllm)
        for lp in points:
            cfg = RunConfig(engine=engine.value, gpu=gpu.key, model=spec.model, server=server, load=lp)
            if reason:
                out.append(SkippedRun(run_id=cfg.run_id(), config=cfg, reason=reason))
            else:
                out.append(PlannedRun(run_id=cfg.run_id(), config=cfg))
    return out
