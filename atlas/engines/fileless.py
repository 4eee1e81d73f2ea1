"""The defaults of an adapter whose engine serves no model files Atlas prepares and has no command line to read
(the mock server, an external endpoint, imported points): nothing to screen, no calibrated KV scales, vLLM V1's
batching as the simulator's guess. An adapter subclasses it and overrides what it has."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from atlas.engines.adapter import Caps

if TYPE_CHECKING:
    from atlas.config import SweepSpec
    from atlas.hardware import GpuSpec
    from atlas.simulator.scheduler import ChunkedScheduler


class NoModelFiles:
    """The model source of an engine that serves no files Atlas prepares: `about(server)` is what provenance
    records instead of files."""

    def __init__(self, about: Callable[[Any], dict[str, Any]] = lambda server: {}):
        self.about = about

    def resolve(self, server: Any) -> tuple[str, dict[str, Any]]:
        return "", self.about(server)

    def planned(self, server: Any) -> tuple[str, str | None]:
        return "", None


class FilelessAdapter:
    # what the simulator assumes of a server whose batching Atlas does not know (a fit says so; see scheduler())
    scheduler_guess: str | None = ("its server's own batching is not known to Atlas: simulated as vLLM V1's (a "
                                   "2048-token budget per step), so the fitted efficiencies absorb any difference")
    cpu_spec: str | None = None
    weight_formats: frozenset[str] = frozenset()
    kv_scale_formats: frozenset[str] = frozenset()

    def caps(self) -> Caps:
        return None

    def infeasible(self, spec: SweepSpec, gpu: GpuSpec, server: Any, caps: Caps) -> str | None:
        return None

    def scheduler(self, server: Any, max_model_len: int, kv_capacity_tokens: int | None) -> ChunkedScheduler:
        from atlas.simulator.scheduler import budget_scheduler

        return budget_scheduler(server, max_model_len, kv_capacity_tokens, 2048)  # V1's default token budget

    def audit(self, result: Any) -> str | None:
        return None
