"""The typed protocol every engine adapter implements, and the protocol of the model sources they return.
Generic code (plan, sweep, search, CLI) asks the registry for an adapter and talks to it only through this."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from atlas.engines.knobs_base import EngineKnobs

if TYPE_CHECKING:
    from atlas.config import SweepSpec
    from atlas.engines.base import Engine
    from atlas.hardware import GpuSpec
    from atlas.plan import RunConfig
    from atlas.simulator.scheduler import ChunkedScheduler

Caps = dict[str, Any] | None  # what the installed engine accepts (JSON, so a search study can record it)


class ModelSource(Protocol):
    """Resolves what each server config is served from, once per sweep (preparations are cached)."""

    def resolve(self, server: Any) -> tuple[str, dict[str, Any]]:
        """The model file, folder or hub id this config serves, and what to record about it (provenance).
        Raises ModelUnavailable (with the reason) when it cannot be had."""
        ...

    def planned(self, server: Any) -> tuple[str, str | None]:
        """What `resolve` would serve, found without preparing anything (for `atlas sweep --dry-run`), and what
        would have to be made first (None: nothing). Raises ModelUnavailable like `resolve`."""
        ...


class EngineAdapter(Protocol):
    # (read-only properties, so an adapter may declare them as plain class attributes of narrower types)
    @property
    def kind(self) -> str: ...  # the spec's `engine:` value
    @property
    def knobs(self) -> type[EngineKnobs]: ...  # the server-knob model (engine: Literal[kind])
    @property
    def cpu_spec(self) -> str | None: ...  # the default spec (configs/) of `atlas sweep --gpu cpu --engine KIND`
    @property
    def weight_formats(self) -> frozenset[str]: ...  # the keys model.checkpoints may have for this engine
    @property
    def kv_scale_formats(self) -> frozenset[str]: ...  # the keys model.kv_scales may have (calibrated KV scales)

    def version(self) -> str | None:
        """The installed engine's name and version ("vllm==0.32.0"), None where it is not installed."""
        ...

    def caps(self) -> Caps:
        """What the installed engine's command line accepts (read without starting it), None if unknown."""
        ...

    def infeasible(self, spec: SweepSpec, gpu: GpuSpec, server: Any, caps: Caps) -> str | None:
        """Why this server config cannot run on this GPU with this engine version, or None (only what is known
        to be impossible; what the engine refuses at start-up is recorded from the engine)."""
        ...

    def model_source(self, spec: SweepSpec, note: Any) -> ModelSource:
        """The model source of this engine for one sweep; `note(text)` hears what is being prepared."""
        ...

    def engine(self, spec: SweepSpec, gpu: GpuSpec, cfg: RunConfig, model_path: str, log_path: Path) -> Engine:
        """The engine (not started) that serves this config from `model_path`."""
        ...

    def scheduler(self, server: Any, max_model_len: int, kv_capacity_tokens: int | None) -> ChunkedScheduler:
        """The simulator's model of how this engine batches one server config's steps (and prices them)."""
        ...

    def audit(self, result: Any) -> str | None:
        """Why a stored measured result of this engine cannot stand for its config (measured by an Atlas that
        started the engine differently from what the config says), or None. Such a result loads as invalid
        with the reason and a resumed sweep measures it again."""
        ...


class ModelUnavailable(ValueError):
    """The weights a server config needs cannot be had (a missing file, a checkpoint without KV scales)."""
