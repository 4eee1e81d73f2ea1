"""The vLLM adapter: its knobs, what the installed vLLM accepts, which configs cannot run where, what each is
served from, and the engine that serves it."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from atlas.engines.adapter import Caps, EngineAdapter
from atlas.engines.vllm.knobs import CHECKPOINT_METHODS, VllmKnobs, VllmKV, VllmQuant
from atlas.knobs import Dtype

if TYPE_CHECKING:
    from atlas.config import SweepSpec
    from atlas.engines.base import Engine
    from atlas.engines.vllm.source import VllmModelSource
    from atlas.hardware import GpuSpec
    from atlas.plan import RunConfig
    from atlas.simulator.scheduler import ChunkedScheduler


# vLLM V1's engine core (vllm/v1/engine/core.py, EngineCoreProc.run_busy_loop and _process_input_queue; 0.32),
# idle, blocks on its input queue: the first request wakes it, it takes what is queued at that instant and steps.
# The other requests of a closed loop, sent a millisecond later and still in the API server (parsed, tokenized,
# sent over ZMQ), join the next step; a closed loop's next request, sent on its predecessor's last token, reaches
# the core during the step the core started at once for the streams still decoding, and waits for the one after.
# Recorded (benchmarks/data/cpu-smollm2, every point with two or more streams): the first request's prompt is
# processed alone (bfloat16, 4 seqs, 4 streams: first tokens at 1.79 s, then 6.87 s for the other three), and
# the streams stay a step apart, so every later prompt lands inside some running request's TPOT. Held out over
# three folds (2026-12-08), modelling it took that recording's TPOT p50 error from 15.4% to 11.8% and the shared-
# prefix workload's TTFT p50 from 22.1% to 10.2% (at a14c919, 2026-12-04, the first arrivals' gap alone, judged on
# one split, had fitted worse, and vLLM kept none).
ARRIVAL_GAP_S = 1e-4


class VllmAdapter:
    kind = "vllm"
    knobs = VllmKnobs
    cpu_spec: str | None = "cpu-smollm2.yaml"
    weight_formats = frozenset(q.value for q in VllmQuant)
    kv_scale_formats = frozenset(q.value for q in VllmQuant)

    def version(self) -> str | None:
        from atlas.engines.vllm.engine import vllm_version

        return vllm_version()

    def caps(self) -> Caps:
        from atlas.engines.vllm.caps import installed_vllm_caps

        caps = installed_vllm_caps()
        return caps.to_json() if caps else None

    def infeasible(self, spec: SweepSpec, gpu: GpuSpec, server: Any, caps: Caps) -> str | None:
        from atlas.engines.vllm.caps import KV_SCALES_REMOVED, VllmCaps
        from atlas.engines.vllm.source import scales_checkpoint
        from atlas.plan import memory_reason

        s: VllmKnobs = server
        q = s.quantization
        scales = scales_checkpoint(spec, s)
        if q in CHECKPOINT_METHODS and q.value not in spec.model.checkpoints and not scales:
            return f"no {q.value.upper()} checkpoint given (model.checkpoints.{q.value}: a pre-quantized folder or hub id)"
        vllm = VllmCaps(**caps) if caps else None
        if s.kv_cache_dtype == VllmKV.FP8_CALIBRATED and not scales and vllm and not vllm.calculate_kv_scales:
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
            # vLLM-CPU (0.32, vllm/platforms/cpu.py) sizes its KV cache from VLLM_CPU_KVCACHE_SPACE when set, else
            # as gpu_memory_utilization x host memory (0.92 by default), which must be free when it starts
            if s.gpu_memory_utilization is not None and spec.engine_env.get("VLLM_CPU_KVCACHE_SPACE"):
                return ("gpu_memory_utilization has no effect on the CPU engine while engine_env sets "
                        "VLLM_CPU_KVCACHE_SPACE (the KV cache is that many GiB)")
            return None
        if s.dtype == Dtype.FLOAT32 and q != VllmQuant.NONE:
            return f"{q.value} weights need a 16-bit activation dtype, not float32"
        fit = memory_reason(spec, gpu, s.numerics(), s.gpu_memory_utilization)
        if fit:
            return fit
        if s.kv_cache_dtype != VllmKV.AUTO and s.dtype == Dtype.FLOAT32:
            return "fp8 KV cache with a float32 model is not supported by vLLM's GPU attention backends"
        return None

    def model_source(self, spec: SweepSpec, note: Any) -> VllmModelSource:
        from atlas.engines.vllm.source import VllmModelSource

        return VllmModelSource(spec, note)

    def engine(self, spec: SweepSpec, gpu: GpuSpec, cfg: RunConfig, model_path: str, log_path: Path) -> Engine:
        from atlas.engines.process import launch_name
        from atlas.engines.vllm.engine import VllmEngine
        from atlas.engines.vllm.source import scales_checkpoint
        from atlas.quantize import has_kv_scales

        s: VllmKnobs = cfg.server  # type: ignore[assignment]
        scales = scales_checkpoint(spec, s)
        # fp8_calibrated without a checkpoint that carries scales: only a vLLM that still computes them at
        # start-up gets here (the plan skips the point on a newer one)
        calc = s.kv_cache_dtype == VllmKV.FP8_CALIBRATED and not scales
        checkpoint = bool(scales or spec.model.checkpoints.get(s.quantization.value))
        # a checkpoint with KV scales makes vLLM store an `auto` KV cache in FP8 unless the 16-bit dtype is named
        pin_kv = s.kv_cache_dtype == VllmKV.AUTO and checkpoint and has_kv_scales(model_path)
        return VllmEngine(s, model_path, served_name=launch_name(spec.model.id), host=spec.host, port=spec.port,
                          max_model_len=spec.model.max_model_len, on_cpu=gpu.is_cpu, log_path=log_path,
                          startup_timeout_s=spec.startup_timeout_s, calculate_kv_scales=calc,
                          checkpoint=checkpoint, pin_16bit_kv=pin_kv, env=spec.engine_env,
                          extra_args=spec.extra_engine_args)

    def scheduler(self, server: Any, max_model_len: int, kv_capacity_tokens: int | None) -> ChunkedScheduler:
        from atlas.simulator.scheduler import budget_scheduler

        # V1's default token budget
        return budget_scheduler(server, max_model_len, kv_capacity_tokens, 2048, arrival_gap_s=ARRIVAL_GAP_S)

    def audit(self, result: Any) -> str | None:
        return None


ADAPTER: EngineAdapter = VllmAdapter()
