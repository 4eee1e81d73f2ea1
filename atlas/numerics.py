"""What decides the numbers a model computes: the engine, the activation dtype (where the engine has one), the
weight format and the KV-cache format. One value object, with the one baseline rule that the sweep, the
search, the simulator and the report use: an engine's quality baseline is its most precise numerics whose
weights and KV cache are both unquantized."""

from __future__ import annotations

from dataclasses import dataclass, field

NumericsKey = tuple[str, str, str, str]  # engine, dtype ("-" where the weight format decides it), weights, kv


@dataclass(frozen=True)
class Numerics:
    engine: str
    dtype: str | None
    weights: str
    kv: str
    bytes_per_weight: float = field(compare=False)
    kv_bytes_per_elem: float = field(compare=False)
    unquantized: bool = field(compare=False)  # weights and KV cache at full precision
    rank: int = field(compare=False)  # precision among the engine's unquantized numerics; higher is more precise

    @property
    def key(self) -> NumericsKey:
        return (self.engine, self.dtype or "-", self.weights, self.kv)

    @property
    def is_baseline_candidate(self) -> bool:
        """Whether these numerics can be the engine's quality baseline (the most precise of them is)."""
        return self.unquantized

    def label(self) -> str:
        return " · ".join([*([self.dtype] if self.dtype else []), f"w:{self.weights}", f"kv:{self.kv}"])

    def as_tuple(self) -> tuple[str, str, str]:
        """(dtype, weights, kv): how the simulator's calibration groups name numerics."""
        return (self.dtype or "-", self.weights, self.kv)


def baseline_of(candidates: list[Numerics]) -> Numerics | None:
    """The quality baseline among one engine's numerics: the most precise unquantized one (first on ties)."""
    refs = [n for n in candidates if n.is_baseline_candidate]
    return max(refs, key=lambda n: n.rank) if refs else None


def baselines(numerics: list[Numerics]) -> dict[str, Numerics]:
    """Each engine's quality baseline among these numerics."""
    out = {}
    for engine in dict.fromkeys(n.engine for n in numerics):
        b = baseline_of([n for n in numerics if n.engine == engine])
        if b is not None:
            out[engine] = b
    return out
