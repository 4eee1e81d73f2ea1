"""The external adapter: no model files, no command line, nothing infeasible to Atlas's knowledge (the
deployment is its owner's); the engine checks and fingerprints the endpoint instead of starting it."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from atlas.engines.adapter import EngineAdapter
from atlas.engines.external.knobs import ExternalKnobs
from atlas.engines.fileless import FilelessAdapter, NoModelFiles

if TYPE_CHECKING:
    from atlas.config import SweepSpec
    from atlas.engines.base import Engine
    from atlas.hardware import GpuSpec
    from atlas.plan import RunConfig


class ExternalAdapter(FilelessAdapter):
    kind = "external"
    knobs = ExternalKnobs

    def version(self) -> str | None:
        return "nothing to install (each endpoint's version is read from it)"

    def model_source(self, spec: SweepSpec, note: Any) -> NoModelFiles:
        return NoModelFiles(lambda server: {
            "external": f"served by {server.url}: its weights are its owner's, not read by Atlas"})

    def engine(self, spec: SweepSpec, gpu: GpuSpec, cfg: RunConfig, model_path: str, log_path: Path) -> Engine:
        from atlas.engines.external.engine import ExternalEngine

        s: ExternalKnobs = cfg.server  # type: ignore[assignment]
        return ExternalEngine(s.url, s.served_model, api_key_env=spec.api_key_env,
                              max_model_len=spec.model.max_model_len)


ADAPTER: EngineAdapter = ExternalAdapter()
