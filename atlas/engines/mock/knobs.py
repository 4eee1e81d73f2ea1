"""The mock engine's server knobs: its numerics (what its answers and speed imitate) and an injected service
curve, so a whole sweep, search or report can run for real against a known truth on any machine."""

from __future__ import annotations

from enum import StrEnum
from typing import ClassVar, Literal

from pydantic import Field

from atlas.engines.knobs_base import EngineKnobs
from atlas.knobs import MAX_STREAMS
from atlas.numerics import Numerics


class MockWeights(StrEnum):
    NONE = "none"
    INT4 = "int4"  # answers a fraction of eval items wrongly (`degrade`), a bit faster


class MockKV(StrEnum):
    AUTO = "auto"
    FP8 = "fp8"  # the naive FP8 KV cache: fast garbage, as it is for Qwen2/2.5


class MockKnobs(EngineKnobs):
    engine: Literal["mock"] = "mock"
    numerics_fields: ClassVar[tuple[str, ...]] = ("quantization", "kv_cache_dtype")
    quantization: MockWeights = MockWeights.NONE
    kv_cache_dtype: MockKV = MockKV.AUTO
    max_num_seqs: int = Field(64, ge=1, le=MAX_STREAMS)
    ttft_ms: float = Field(20.0, ge=0.0, le=60_000.0, description="injected time to first token")
    itl_ms: float = Field(10.0, ge=0.0, le=60_000.0, description="injected gap between tokens")
    itl_per_running_ms: float | None = Field(None, ge=0.0, le=60_000.0, description=(
        "added to every gap for each other request in flight: latency that grows with load"))
    enable_prefix_caching: bool | None = Field(None, description="a vLLM-like prefix cache (blocks of 16 words)")
    prefill_ms_per_token: float | None = Field(None, ge=0.0, le=60_000.0, description=(
        "added to the TTFT for each prompt token not found in the prefix cache"))
    _late_fields: ClassVar[tuple[str, ...]] = ("itl_per_running_ms", "enable_prefix_caching", "prefill_ms_per_token")

    @property
    def prefix_caching(self) -> bool:
        return bool(self.enable_prefix_caching)

    def numerics(self) -> Numerics:
        return Numerics(engine="mock", dtype=None, weights=self.quantization.value, kv=self.kv_cache_dtype.value,
                        bytes_per_weight=2.0 if self.quantization == MockWeights.NONE else 0.53,
                        kv_bytes_per_elem=2.0 if self.kv_cache_dtype == MockKV.AUTO else 1.0,
                        unquantized=self.quantization == MockWeights.NONE and self.kv_cache_dtype == MockKV.AUTO,
                        rank=1)

    def label(self) -> str:
        load = f" +{self.itl_per_running_ms:g}/running" if self.itl_per_running_ms else ""
        load += f" prefill:{self.prefill_ms_per_token:g}/tok" if self.prefill_ms_per_token else ""
        load += " prefix-cache" if self.enable_prefix_caching else ""
        return (f"mock w:{self.quantization.value} kv:{self.kv_cache_dtype.value} seqs:{self.max_num_seqs} "
                f"ttft:{self.ttft_ms:g} itl:{self.itl_ms:g}{load}")

    @property
    def slots(self) -> int:
        return self.max_num_seqs
