"""What a server config is served from and the engine that serves it, asked of the config's engine adapter:
one model source per engine for a whole sweep (so preparations such as the embedded model's conversion or a
GGUF variant are made once)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from atlas.config import SweepSpec
from atlas.engines.adapter import ModelSource
from atlas.engines.base import Engine
from atlas.engines.registry import ServerKnobs, adapter
from atlas.hardware import GpuSpec
from atlas.plan import RunConfig


def default_engine(spec: SweepSpec, gpu: GpuSpec, cfg: RunConfig, model_path: str, log_path: Path) -> Engine:
    """The engine (not started) that serves this config from `model_path`."""
    return adapter(cfg.engine).engine(spec, gpu, cfg, model_path, log_path)


class ModelResolver:
    """Resolves each server config's model through its engine's model source; `note` hears what is being
    prepared. Raises ModelUnavailable with the reason."""

    def __init__(self, spec: SweepSpec, note: Callable[[str], None]):
        self.spec, self.note = spec, note
        self._sources: dict[str, ModelSource] = {}

    def resolve(self, server: ServerKnobs) -> tuple[str, dict[str, Any]]:
        if server.engine not in self._sources:
            self._sources[server.engine] = adapter(server.engine).model_source(self.spec, self.note)
        return self._sources[server.engine].resolve(server)
