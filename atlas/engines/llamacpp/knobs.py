"""llama.cpp's server knobs (llama-server): a GGUF weight type, a KV-cache type, slots and batch sizes."""

from __future__ import annotations

from enum import StrEnum
from typing import Any, ClassVar, Literal

from pydantic import Field

from atlas.engines.knobs_base import EngineKnobs
from atlas.knobs import MAX_STREAMS, MAX_TOKENS
from atlas.numerics import Numerics


class GgufType(StrEnum):
    """GGUF weight types, made by Atlas from an F16 export with llama.cpp's quantize function."""
    F16 = "f16"
    Q8_0 = "q8_0"
    Q6_K = "q6_k"
    Q4_K_M = "q4_k_m"
    Q4_0 = "q4_0"
    Q3_K_M = "q3_k_m"
    Q2_K = "q2_k"


class LlamaKV(StrEnum):
    """Cache types (K and V alike; a quantized V needs flash attention, which Atlas always turns on)."""
    AUTO = "auto"  # llama.cpp's default f16 cache
    F16 = "f16"
    Q8_0 = "q8_0"
    Q4_0 = "q4_0"


# Q8_0, Q6_K and Q4_0 from their block layouts in ggml-common.h (34 bytes per 32 weights, 210 / 256, 18 / 32);
# the mixes Q4_K_M, Q3_K_M and Q2_K (which keep some tensors at higher precision) from the file sizes
# llama.cpp's quantize tool lists for Llama-3-8B (4.58, 3.74, 2.96 GiB over 8.03e9 weights). A model whose rows
# are no multiple of a K-quant block (256 weights) gets fallback types instead: SmolLM2-135M's rows are 576 wide,
# so its files hold per weight f16 2.01, q8_0 1.07, q6_k 1.03, q4_k_m 0.78, q4_0 0.68, q3_k_m 0.69 and q2_k 0.65
# bytes (the files' sizes; mostly Q8_0, Q5_0 and Q4_0 tensors, and a Q8_0 embedding shared with the output layer).
# The simulator fits each measured weight type's bandwidth efficiency, which absorbs the difference; pricing each
# point at its file's size instead was tried (2026-12-07) and not landed (README, Simulator).
BYTES_PER_WEIGHT: dict[GgufType, float] = {
    GgufType.F16: 2.0, GgufType.Q8_0: 34 / 32, GgufType.Q6_K: 210 / 256, GgufType.Q4_K_M: 4.90 / 8,
    GgufType.Q4_0: 18 / 32, GgufType.Q3_K_M: 4.00 / 8, GgufType.Q2_K: 3.17 / 8,
}
KV_BYTES: dict[LlamaKV, float] = {LlamaKV.AUTO: 2.0, LlamaKV.F16: 2.0, LlamaKV.Q8_0: 34 / 32, LlamaKV.Q4_0: 18 / 32}


def cache_type(kv: LlamaKV) -> str:
    return "f16" if kv in (LlamaKV.AUTO, LlamaKV.F16) else kv.value


class LlamaCppKnobs(EngineKnobs):
    engine: Literal["llamacpp"] = "llamacpp"
    numerics_fields: ClassVar[tuple[str, ...]] = ("quantization", "kv_cache_dtype")
    quantization: GgufType = GgufType.F16
    kv_cache_dtype: LlamaKV = LlamaKV.AUTO
    max_num_seqs: int = Field(256, ge=1, le=MAX_STREAMS, description="slots (--parallel)")
    max_num_batched_tokens: int | None = Field(None, ge=16, le=MAX_TOKENS, description="n_batch (--batch-size)")
    n_ubatch: int | None = Field(None, ge=1, le=MAX_TOKENS, description="physical batch (--ubatch-size)")
    # llama-server reuses prompts by default twice over: a slot keeps its last prompt's KV (--cache-prompt) and
    # finished prompts are kept in host memory (--cache-ram, 8 GiB) and loaded back for a request repeating one.
    # Off here means both off (--no-cache-prompt --cache-ram 0): every prompt is prefilled, as the knob says.
    # On means the slots' reuse only (the host-memory cache stays off), emptied before each point.
    enable_prefix_caching: bool = Field(False, description="llama-server's prompt cache (--cache-prompt, --cache-ram)")

    def id_form(self) -> dict[str, Any]:
        # The flat layout llama.cpp results were measured under (vLLM's knobs at their defaults beside the
        # llama.cpp ones, n_ubatch only when set): the run ids recorded since stay the same.
        out = {"dtype": "bfloat16", "quantization": self.quantization.value,
               "kv_cache_dtype": self.kv_cache_dtype.value, "max_num_seqs": self.max_num_seqs,
               "max_num_batched_tokens": self.max_num_batched_tokens, "enable_chunked_prefill": None,
               "enable_prefix_caching": self.enable_prefix_caching, "gpu_memory_utilization": None}
        if self.n_ubatch is not None:
            out["n_ubatch"] = self.n_ubatch
        return out

    def numerics(self) -> Numerics:
        return Numerics(engine="llamacpp", dtype=None, weights=self.quantization.value, kv=self.kv_cache_dtype.value,
                        bytes_per_weight=BYTES_PER_WEIGHT[self.quantization], kv_bytes_per_elem=KV_BYTES[self.kv_cache_dtype],
                        unquantized=self.quantization == GgufType.F16 and cache_type(self.kv_cache_dtype) == "f16",
                        rank=1)

    def label(self) -> str:
        # the GGUF type is the weights' whole numerics
        parts = [f"llama.cpp w:{self.quantization.value}", f"kv:{self.kv_cache_dtype.value}", f"slots:{self.max_num_seqs}"]
        if self.max_num_batched_tokens is not None:
            parts.append(f"batch:{self.max_num_batched_tokens}")
        if self.n_ubatch is not None:
            parts.append(f"ubatch:{self.n_ubatch}")
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
    def prefix_caching(self) -> bool:
        return self.enable_prefix_caching
