"""The knobs Atlas sweeps, as enums, and one table of facts about each value."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class EngineKind(StrEnum):
    VLLM = "vllm"


class Dtype(StrEnum):
    BFLOAT16 = "bfloat16"
    FLOAT16 = "float16"
    FLOAT32 = "float32"


class Quantization(StrEnum):
    NONE = "none"  # weights in the activation dtype
    FP8 = "fp8"  # dynamic FP8 from a bf16 checkpoint, or an FP8 checkpoint
    AWQ = "awq"  # int4 AWQ checkpoint
    GPTQ = "gptq"  # int4 GPTQ checkpoint


class KVCacheDtype(StrEnum):
    AUTO = "auto"  # same as the model dtype
    FP8 = "fp8"  # FP8 with the default scale 1.0 (silently breaks Qwen2/2.5)
    FP8_CALIBRATED = "fp8_calibrated"  # FP8 with scales computed at start (--calculate-kv-scales)


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


QUANT_FACTS: dict[Quantization, QuantFacts] = {
    Quantization.NONE: QuantFacts(None, False, False),
    Quantization.FP8: QuantFacts(1.0, False, False),  # on A100 vLLM falls back to weight-only FP8 (Marlin)
    Quantization.AWQ: QuantFacts(0.5 + 0.03, True, False),  # int4 + group-128 scales/zeros
    Quantization.GPTQ: QuantFacts(0.5 + 0.03, True, False),
}

KV_BYTES_PER_ELEM: dict[KVCacheDtype, float | None] = {
    KVCacheDtype.AUTO: None,
    KVCacheDtype.FP8: 1.0,
    KVCacheDtype.FP8_CALIBRATED: 1.0,
}
