"""SGLang's server knobs (`python -m sglang.launch_server`, GPU only) and the facts about their values."""

from __future__ import annotations

from enum import StrEnum
from typing import ClassVar, Literal

from pydantic import Field

from atlas.engines.knobs_base import EngineKnobs
from atlas.knobs import DTYPE_FACTS, MAX_STREAMS, MAX_TOKENS, Dtype
from atlas.numerics import Numerics


class SglangQuant(StrEnum):
    NONE = "none"
    FP8 = "fp8"  # dynamic FP8 from 16-bit weights, or an FP8 checkpoint
    AWQ = "awq"  # int4 checkpoints: SGLang reads the method from the checkpoint's config
    GPTQ = "gptq"


class SglangKV(StrEnum):
    AUTO = "auto"
    FP8_E4M3 = "fp8_e4m3"  # scales from the checkpoint where it has them, else 1.0
    FP8_E5M2 = "fp8_e5m2"


BYTES_PER_WEIGHT: dict[SglangQuant, float | None] = {SglangQuant.NONE: None, SglangQuant.FP8: 1.0,
                                                    SglangQuant.AWQ: 0.53, SglangQuant.GPTQ: 0.53}
CHECKPOINT_METHODS = frozenset({SglangQuant.AWQ, SglangQuant.GPTQ})


class SglangKnobs(EngineKnobs):
    engine: Literal["sglang"] = "sglang"
    numerics_fields: ClassVar[tuple[str, ...]] = ("dtype", "quantization", "kv_cache_dtype")
    dtype: Dtype = Dtype.BFLOAT16
    quantization: SglangQuant = SglangQuant.NONE
    kv_cache_dtype: SglangKV = SglangKV.AUTO
    max_running_requests: int = Field(256, ge=1, le=MAX_STREAMS)
    chunked_prefill_size: int | None = Field(None, ge=16, le=MAX_TOKENS, description="-1 or unset: SGLang's default")
    radix_cache: bool = Field(True, description="RadixAttention prefix reuse (SGLang's default on)")
    mem_fraction_static: float | None = Field(None, gt=0.0, le=1.0)

    def numerics(self) -> Numerics:
        act = DTYPE_FACTS[self.dtype]
        return Numerics(engine="sglang", dtype=self.dtype.value, weights=self.quantization.value,
                        kv=self.kv_cache_dtype.value,
                        bytes_per_weight=BYTES_PER_WEIGHT[self.quantization] or act.bytes_per_elem,
                        kv_bytes_per_elem=act.bytes_per_elem if self.kv_cache_dtype == SglangKV.AUTO else 1.0,
                        unquantized=self.quantization == SglangQuant.NONE and self.kv_cache_dtype == SglangKV.AUTO,
                        rank=act.rank)

    def label(self) -> str:
        parts = [f"sglang {self.dtype.value}", f"w:{self.quantization.value}", f"kv:{self.kv_cache_dtype.value}",
                 f"reqs:{self.max_running_requests}"]
        if self.chunked_prefill_size is not None:
            parts.append(f"chunk:{self.chunked_prefill_size}")
        if not self.radix_cache:
            parts.append("no-radix")
        return " ".join(parts)

    @property
    def slots(self) -> int:
        return self.max_running_requests

    @property
    def batch_tokens(self) -> int | None:
        return self.chunked_prefill_size

    @property
    def chunked_prefill(self) -> bool | None:
        return None if self.chunked_prefill_size is None else True

    @property
    def prefix_caching(self) -> bool:
        return self.radix_cache

    @property
    def memory_fraction(self) -> float | None:
        return self.mem_fraction_static
