"""The imported adapter: nothing to start, prepare or screen; a spec cannot sweep it (`atlas import` writes its
points)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from atlas.engines.adapter import Caps, EngineAdapter
from atlas.engines.base import EngineError
from atlas.engines.fileless import FilelessAdapter, NoModelFiles
from atlas.engines.imported.knobs import ImportedKnobs

if TYPE_CHECKING:
    from atlas.config import SweepSpec
    from atlas.engines.base import Engine
    from atlas.hardware import GpuSpec
    from atlas.plan import RunConfig


class ImportedAdapter(FilelessAdapter):
    kind = "imported"
    knobs = ImportedKnobs

    def version(self) -> str | None:
        return "nothing to install (each file names its tool)"

    def infeasible(self, spec: SweepSpec, gpu: GpuSpec, server: Any, caps: Caps) -> str | None:
        return "imported points are written by `atlas import`; a sweep cannot measure them"

    def model_source(self, spec: SweepSpec, note: Any) -> NoModelFiles:
        return NoModelFiles()

    def engine(self, spec: SweepSpec, gpu: GpuSpec, cfg: RunConfig, model_path: str, log_path: Path) -> Engine:
        raise EngineError("an imported point has no engine Atlas can start", kind="launch")


ADAPTER: EngineAdapter = ImportedAdapter()
