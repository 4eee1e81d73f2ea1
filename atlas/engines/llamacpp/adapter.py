"""The llama.cpp adapter: llama-server (CPU build) serving GGUF weight types with its own KV-cache types."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from atlas.engines.adapter import Caps, EngineAdapter
from atlas.engines.llamacpp.knobs import GgufType, LlamaCppKnobs

if TYPE_CHECKING:
    from atlas.config import SweepSpec
    from atlas.engines.base import Engine
    from atlas.engines.llamacpp.source import GgufSource
    from atlas.hardware import GpuSpec
    from atlas.plan import RunConfig
    from atlas.simulator.scheduler import ChunkedScheduler


class LlamaCppAdapter:
    kind = "llamacpp"
    knobs = LlamaCppKnobs
    cpu_spec: str | None = "cpu-smollm2-llamacpp.yaml"
    weight_formats = frozenset(t.value for t in GgufType)
    kv_scale_formats: frozenset[str] = frozenset()
    # what the simulator fits engine-wide (atlas.simulator.joint): its step model also prices the GEMM path's
    # extra weight passes (atlas.engines.llamacpp.simulation)
    shared_step_params = ("overhead_s", "sample_s", "multi_pass")
    # the weight type chooses the kernels that dominate a step (the matrix products); the KV-cache type changes
    # attention, priced by the bytes it reads: the simulator fits efficiencies once per weight type over every KV
    # type measured with it (held out on the recorded grid: TPOT 14.5% -> 12.5%; README)
    efficiency_per_kv = False

    def version(self) -> str | None:
        from atlas.engines.llamacpp.gguf import llama_cpp_version

        return llama_cpp_version()

    def caps(self) -> Caps:
        return None

    def infeasible(self, spec: SweepSpec, gpu: GpuSpec, server: Any, caps: Caps) -> str | None:
        s: LlamaCppKnobs = server
        if not gpu.is_cpu:
            return f"the llama.cpp engine Atlas builds is CPU-only (no {gpu.key} backend compiled in)"
        if s.n_ubatch is not None and s.max_num_batched_tokens is not None and s.n_ubatch > s.max_num_batched_tokens:
            return (f"n_ubatch={s.n_ubatch} > n_batch (max_num_batched_tokens)={s.max_num_batched_tokens}: "
                    "llama.cpp's physical batch cannot exceed its logical batch")
        return None

    def model_source(self, spec: SweepSpec, note: Any) -> GgufSource:
        from atlas.engines.llamacpp.source import GgufSource

        return GgufSource(spec, note)

    def engine(self, spec: SweepSpec, gpu: GpuSpec, cfg: RunConfig, model_path: str,
               log_path: Path) -> Engine:
        from atlas.engines.llamacpp.engine import LlamaCppEngine
        from atlas.engines.process import launch_name

        return LlamaCppEngine(cfg.server, model_path, served_name=launch_name(spec.model.id),  # type: ignore[arg-type]
                              host=spec.host, port=spec.port, max_model_len=spec.model.max_model_len,
                              log_path=log_path, startup_timeout_s=spec.startup_timeout_s, env=spec.engine_env,
                              extra_args=spec.extra_engine_args)

    def scheduler(self, server: Any, max_model_len: int, kv_capacity_tokens: int | None) -> ChunkedScheduler:
        from atlas.engines.llamacpp.simulation import SlotScheduler

        return SlotScheduler.of(server)

    def audit(self, result: Any) -> str | None:
        from atlas.engines.llamacpp.engine import audit

        return audit(result)


ADAPTER: EngineAdapter = LlamaCppAdapter()
