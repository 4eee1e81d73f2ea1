"""The engine adapters Atlas knows. Adding an engine is a folder atlas/engines/<name>/ whose package exports
ADAPTER, plus one line here."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Annotated, Union

from pydantic import Field

from atlas.engines.adapter import EngineAdapter
from atlas.engines.knobs_base import EngineKnobs, grid_model

ADAPTER_MODULES = (
    "atlas.engines.vllm",
    "atlas.engines.llamacpp",
    "atlas.engines.mock",
    "atlas.engines.sglang",
    "atlas.engines.external",
    "atlas.engines.imported",
)

DEFAULT_ENGINE = "vllm"  # the engine of a spec (and of its grids) that names none

ADAPTERS: dict[str, EngineAdapter] = {}
for _name in ADAPTER_MODULES:
    _adapter: EngineAdapter = importlib.import_module(_name).ADAPTER
    ADAPTERS[_adapter.kind] = _adapter

KNOB_MODELS = tuple(a.knobs for a in ADAPTERS.values())
GRID_MODELS = tuple(grid_model(k) for k in KNOB_MODELS)

if TYPE_CHECKING:
    ServerKnobs = EngineKnobs
    AnyGrid = object
else:
    ServerKnobs = Annotated[Union[KNOB_MODELS], Field(discriminator="engine")]  # noqa: UP007
    AnyGrid = Annotated[Union[GRID_MODELS], Field(discriminator="engine")]  # noqa: UP007


class UnknownEngine(ValueError):
    pass


def adapter(kind: str) -> EngineAdapter:
    try:
        return ADAPTERS[kind]
    except KeyError:
        raise UnknownEngine(f"unknown engine {kind!r}; known: {', '.join(ADAPTERS)}") from None


def engine_kinds() -> list[str]:
    return list(ADAPTERS)
