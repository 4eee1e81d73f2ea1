"""vLLM's server knobs (GPU, and vLLM-CPU with the same command line) and the facts about their values."""

from __future__ import annotations

from enum import StrEnum
from typing import Any, ClassVar, Literal

from pydantic import Field

from atlas.engines.knobs_base import EngineKnobs
from atlas.knobs import DTYPE_FACTS, MAX_STREAMS, MAX_TOKENS, Dtype
from atlas.numerics import Numerics


class VllmQuant(StrEnum):
    NONE = "none"  # weights in the activation dtype
    FP8 = "fp8"  # dynamic FP8 from a bf16 checkpoint, or an FP8 checkpoint
    AWQ = "awq"  # int4 AWQ checkpoint
    GPTQ = "gptq"  # int4 GPTQ checkpoint


class VllmKV(StrEnum):
    AUTO = "auto"  # same as the model dtype
    FP8 = "fp8"  # FP8 with the default scale 1.0 (silently breaks Qwen2/2.5)
    # FP8 with calibrated scales: read from a checkpoint that carries them (model.kv_scales, made by
    # `atlas quantize --kv-scales`), or computed at start-up by a vLLM that still has --calculate-kv-scales
    FP8_CALIBRATED = "fp8_calibrated"


# bytes per weight (None: the activation dtype's size); int4 + group-128 scales/zeros for AWQ/GPTQ
BYTES_PER_WEIGHT: dict[VllmQuant, float | None] = {VllmQuant.NONE: None, VllmQuant.FP8: 1.0,
                                                  VllmQuant.AWQ: 0.5 + 0.03, VllmQuant.GPTQ: 0.5 + 0.03}
KV_BYTES: dict[VllmKV, float | None] = {VllmKV.AUTO: None, VllmKV.FP8: 1.0, VllmKV.FP8_CALIBRATED: 1.0}
CHECKPOINT_METHODS = frozenset({VllmQuant.AWQ, VllmQuant.GPTQ})  # need a pre-quantized checkpoint


class VllmKnobs(EngineKnobs):
    engine: Literal["vllm"] = "vllm"
    numerics_fields: ClassVar[tuple[str, ...]] = ("dtype", "quantization", "kv_cache_dtype")
    dtype: Dtype = Dtype.BFLOAT16
    quantization: VllmQuant = VllmQuant.NONE
    kv_cache_dtype: VllmKV = VllmKV.AUTO
    max_num_seqs: int = Field(256, ge=1, le=MAX_STREAMS)
    max_num_batched_tokens: int | None = Field(None, ge=16, le=MAX_TOKENS)
    enable_chunked_prefill: bool | None = None
    enable_prefix_caching: bool = False
    gpu_memory_utilization: float | None = Field(None, gt=0.0, le=1.0)

    def id_form(self) -> dict[str, Any]:
        # The flat layout results were measured under before knobs were per engine (no `engine` key):
        # the run ids of every vLLM result recorded since stay the same.
        out = self.model_dump(mode="json")
        out.pop("engine")
        return out

    def numerics(self) -> Numerics:
        act = DTYPE_FACTS[self.dtype]
        return Numerics(engine="vllm", dtype=self.dtype.value, weights=self.quantization.value,
                        kv=self.kv_cache_dtype.value,
                        bytes_per_weight=BYTES_PER_WEIGHT[self.quantization] or act.bytes_per_elem,
                        kv_bytes_per_elem=KV_BYTES[self.kv_cache_dtype] or act.bytes_per_elem,
                        unquantized=self.quantization == VllmQuant.NONE and self.kv_cache_dtype == VllmKV.AUTO,
                        rank=act.rank)

    def label(self) -> str:
        parts = [self.dtype.value, f"w:{self.quantization.value}", f"kv:{self.kv_cache_dtype.value}",
                 f"seqs:{self.max_num_seqs}"]
        if self.max_num_batched_tokens is not None:
            parts.append(f"mbt:{self.max_num_batched_tokens}")
        if self.enable_chunked_prefill is not None:
            parts.append("chunked" if self.enable_chunked_prefill else "no-chunk")
        if self.enable_prefix_caching:
            parts.append("prefix-cache")
        return " ".join(parts)

    @property
    def slots(self) -> int:
        return self.max_num_seqs

    @property
    def batch_tokens(self) -> int | None:
        return self.max_num_batched_tokens

    @property
    def chunked_prefill(self) -> bool | None:
        return self.enable_chunked_prefill

    @property
    def prefix_caching(self) -> bool:
        return self.enable_prefix_caching

    @property
    def memory_fraction(self) -> float | None:
        return self.gpu_memory_utilization
