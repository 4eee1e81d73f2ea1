"""The knobs of an imported point: which tool measured it, which model it asked for and the run's own label.
The server behind it is whatever that tool was pointed at; nothing about it is Atlas's to know or sweep."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from atlas.engines.knobs_base import EngineKnobs
from atlas.numerics import Numerics


class ImportedKnobs(EngineKnobs):
    engine: Literal["imported"] = "imported"
    numerics_fields: ClassVar[tuple[str, ...]] = ("tool", "served_model", "run_label")
    tool: str = Field("", max_length=64, description="the harness whose result file this point came from")
    served_model: str | None = Field(None, max_length=512)
    run_label: str | None = Field(None, max_length=200, description="the file's own label (its backend, server)")

    def numerics(self) -> Numerics:
        # what the measured server computed with is not in the file: keyed by the run, never a baseline
        return Numerics(engine="imported", dtype=f"{self.tool}:{self.run_label or '-'}/{self.served_model or '*'}",
                        weights="as measured", kv="as measured", bytes_per_weight=2.0, kv_bytes_per_elem=2.0,
                        unquantized=False, rank=0)

    def label(self) -> str:
        return f"imported {self.tool} {self.run_label or ''} {self.served_model or ''}".replace("  ", " ").strip()

    @property
    def slots(self) -> int:
        """Unknown (the measured server's own)."""
        return 16
