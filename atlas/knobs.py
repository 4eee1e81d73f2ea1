"""Engine-independent knob types: activation dtypes and their facts, load modes, and the bounds on what one
machine can be asked for. Each engine's own knobs live with its adapter (atlas/engines/<name>/knobs.py)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

# Upper bounds on what one machine's load generator and one engine can be asked for: a larger value is a
# typo (concurrency 1e20 ended in a MemoryError), refused with the field's name before anything starts.
MAX_STREAMS = 16_384
MAX_REQUESTS = 1_000_000
MAX_TOKENS = 1 << 20
MAX_SECONDS = 86_400.0


class Dtype(StrEnum):
    BFLOAT16 = "bfloat16"
    FLOAT16 = "float16"
    FLOAT32 = "float32"


class LoadMode(StrEnum):
    CLOSED = "closed"  # N concurrent streams, each sends its next request when the previous one ends
    POISSON = "poisson"  # open loop, exponential inter-arrival times
    GAMMA = "gamma"  # open loop, gamma inter-arrival times (burstiness < 1 is burstier than Poisson)
    CONSTANT = "constant"  # open loop, evenly spaced arrivals (GuideLLM's and AIPerf's constant rate)
    TRACE = "trace"  # open loop, arrivals replayed from the workload's trace file


@dataclass(frozen=True)
class DtypeFacts:
    bytes_per_elem: float
    rank: int  # higher is more precise; the quality baseline is the most precise unquantized config


DTYPE_FACTS: dict[Dtype, DtypeFacts] = {
    Dtype.FLOAT32: DtypeFacts(4.0, 3),
    Dtype.BFLOAT16: DtypeFacts(2.0, 2),
    Dtype.FLOAT16: DtypeFacts(2.0, 2),
}
