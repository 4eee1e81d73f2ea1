"""The external adapter: no model files, no command line, nothing infeasible to Atlas's knowledge (the
deployment is its owner's); the engine checks and fingerprints the endpoint instead of starting it."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from atlas.engines.adapter import Caps, EngineAdapter
from atlas.engines.external.knobs import ExternalKnobs

if TYPE_CHECKING:
    from atlas.config import SweepSpec
    from atlas.engines.base import Engine
    from atlas.hardware import GpuSpec
    from atlas.plan import RunConfig
    from atlas.simulator.scheduler import ChunkedScheduler


class _Deployed:
    def resolve(self, server: Any) -> tuple[str, dict[str, Any]]:
        return "", {"external": f"served by {server.url}: its weights are its owner's, not read by Atlas"}

    def planned(self, server: Any) -> tuple[str, str | None]:
        return "", None


class ExternalAdapter:
    kind = "external"
    knobs = ExternalKnobs
    cpu_spec: str | None = None
    weight_formats: frozenset[str] = frozenset()
    kv_scale_formats: frozenset[str] = frozenset()

    def version(self) -> str | None:
        return "nothing to install (each endpoint's version is read from it)"

    def caps(self) -> Caps:
        return None

    def infeasible(self, spec: SweepSpec, gpu: GpuSpec, server: Any, caps: Caps) -> str | None:
        return None

    def model_source(self, spec: SweepSpec, note: Any) -> _Deployed:
        return _Deployed()

    def engine(self, spec: SweepSpec, gpu: GpuSpec, cfg: RunConfig, model_path: str, log_path: Path) -> Engine:
        from atlas.engines.external.engine import ExternalEngine

        s: ExternalKnobs = cfg.server  # type: ignore[assignment]
        return ExternalEngine(s.url, s.served_model, api_key_env=spec.api_key_env,
                              max_model_len=spec.model.max_model_len)

    def scheduler(self, server: Any, max_model_len: int, kv_capacity_tokens: int | None) -> ChunkedScheduler:
        from atlas.simulator.scheduler import budget_scheduler

        return budget_scheduler(server, max_model_len, kv_capacity_tokens, 2048)  # unknown: vLLM V1's defaults

    def audit(self, result: Any) -> str | None:
        return None


ADAPTER: EngineAdapter = ExternalAdapter()
