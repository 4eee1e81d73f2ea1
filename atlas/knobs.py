"""The knobs Atlas sweeps, as enums, and one table of facts about each value."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class EngineKind(StrEnum):
    VLLM = "vllm"
    LLAMACPP = "llamacpp"


class Dtype(StrEnum):
    BFLOAT16 = "bfloat16"
    FLOAT16 = "float16"
    FLOAT32 = "float32"


class Quantization(StrEnum):
    NONE = "none"  # weights in the activation dtype
    FP8 = "fp8"  # dynamic FP8 from a bf16 checkpoint, or an FP8 checkpoint
    AWQ = "awq"  # int4 AWQ checkpoint
    GPTQ = "gptq"  # int4 GPTQ checkpoint
    # llama.cpp GGUF weight types, produced by Atlas from an F16 export with llama.cpp's quantize function
    F16 = "f16"
    Q8_0 = "q8_0"
    Q6_K = "q6_k"
    Q4_K_M = "q4_k_m"
    Q4_0 = "q4_0"
    Q3_K_M = "q3_k_m"
    Q2_K = "q2_k"


class KVCacheDtype(StrEnum):
    AUTO = "auto"  # same as the model dtype
    FP8 = "fp8"  # FP8 with the default scale 1.0 (silently breaks Qwen2/2.5)
    # FP8 with calibrated scales: read from a checkpoint that carries them (model.kv_scales, made by
    # `atlas quantize --kv-scales`), or computed at start-up by a vLLM that still has --calculate-kv-scales
    FP8_CALIBRATED = "fp8_calibrated"
    # llama.cpp cache types (K and V alike; quantized V needs flash attention, which Atlas always turns on)
    F16 = "f16"
    Q8_0 = "q8_0"
    Q4_0 = "q4_0"


class LoadMode(StrEnum):
    CLOSED = "closed"  # N concurrent streams, each sends its next request when the previous one ends
    POISSON = "poisson"  # open loop, exponential inter-arrival times
    GAMMA = "gamma"  # open loop, gamma inter-arrival times (burstiness < 1 is burstier than Poisson)


@dataclass(frozen=True)
class DtypeFacts:
    bytes_per_elem: float
    rank: int  # higher is more precise; the quality baseline is the most precise unquantized config


DTYPE_FACTS: dict[Dtype, DtypeFacts] = {
    Dtype.FLOAT32: DtypeFacts(4.0, 3),
    Dtype.BFLOAT16: DtypeFacts(2.0, 2),
    Dtype.FLOAT16: DtypeFacts(2.0, 2),
}


@dataclass(frozen=True)
class QuantFacts:
    bytes_per_weight: float | None  # None: the activation dtype's size
    needs_checkpoint: bool  # a pre-quantized checkpoint must be given
    needs_fp8_compute: bool  # runs as W8A8 only where FP8 tensor cores exist
    engine: EngineKind = EngineKind.VLLM
    reference: bool = False  # the unquantized weights a quality baseline is measured on


# GGUF sizes: Q8_0, Q6_K and Q4_0 from their block layouts in ggml-common.h (34 bytes per 32 weights,
# 210 / 256, 18 / 32); the mixes Q4_K_M, Q3_K_M and Q2_K (which keep some tensors at higher precision) from
# the file sizes llama.cpp's quantize tool lists for Llama-3-8B (4.58, 3.74, 2.96 GiB over 8.03e9 weights).
QUANT_FACTS: dict[Quantization, QuantFacts] = {
    Quantization.NONE: QuantFacts(None, False, False, reference=True),
    Quantization.FP8: QuantFacts(1.0, False, False),  # on A100 vLLM falls back to weight-only FP8 (Marlin)
    Quantization.AWQ: QuantFacts(0.5 + 0.03, True, False),  # int4 + group-128 scales/zeros
    Quantization.GPTQ: QuantFacts(0.5 + 0.03, True, False),
    Quantization.F16: QuantFacts(2.0, False, False, EngineKind.LLAMACPP, reference=True),
    Quantization.Q8_0: QuantFacts(34 / 32, False, False, EngineKind.LLAMACPP),
    Quantization.Q6_K: QuantFacts(210 / 256, False, False, EngineKind.LLAMACPP),
    Quantization.Q4_K_M: QuantFacts(4.90 / 8, False, False, EngineKind.LLAMACPP),
    Quantization.Q4_0: QuantFacts(18 / 32, False, False, EngineKind.LLAMACPP),
    Quantization.Q3_K_M: QuantFacts(4.00 / 8, False, False, EngineKind.LLAMACPP),
    Quantization.Q2_K: QuantFacts(3.17 / 8, False, False, EngineKind.LLAMACPP),
}

KV_BYTES_PER_ELEM: dict[KVCacheDtype, float | None] = {
    KVCacheDtype.AUTO: None,
    KVCacheDtype.FP8: 1.0,
    KVCacheDtype.FP8_CALIBRATED: 1.0,
    KVCacheDtype.F16: 2.0,
    KVCacheDtype.Q8_0: 34 / 32,
    KVCacheDtype.Q4_0: 18 / 32,
}

# Which values each engine understands; "auto" on llama.cpp is its default f16 cache.
ENGINE_QUANTS: dict[EngineKind, frozenset[Quantization]] = {
    e: frozenset(q for q, f in QUANT_FACTS.items() if f.engine == e) for e in EngineKind
}
ENGINE_KV: dict[EngineKind, frozenset[KVCacheDtype]] = {
    EngineKind.VLLM: frozenset({KVCacheDtype.AUTO, KVCacheDtype.FP8, KVCacheDtype.FP8_CALIBRATED}),
    EngineKind.LLAMACPP: frozenset({KVCacheDtype.AUTO, KVCacheDtype.F16, KVCacheDtype.Q8_0, KVCacheDtype.Q4_0}),
}
REFERENCE_KV = frozenset({KVCacheDtype.AUTO, KVCacheDtype.F16})
