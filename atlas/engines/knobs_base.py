"""The base of every engine's server-knob model, and the grid model derived from it.

An engine's knobs are a pydantic model with `engine: Literal[<kind>]` as the discriminator, so one spec can
mix engines and an impossible knob for an engine is a validation error naming the field. Everything generic
code needs from a server config comes through this base: its numerics, label, scheduling limits, the knob
values the table and the search show, and the form its run id is computed from."""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator
from typing import Annotated, Any, ClassVar

from pydantic import Field, create_model, field_validator

from atlas.models import Frozen, LateFields
from atlas.numerics import Numerics

# The knobs of the flat layout results were recorded under before knobs were per engine, at their defaults:
# a field an engine lacks that holds its flat default is dropped when such a result or spec is read.
FLAT_DEFAULTS: dict[str, Any] = {"dtype": "bfloat16", "quantization": "none", "kv_cache_dtype": "auto",
                                 "max_num_seqs": 256, "max_num_batched_tokens": None, "enable_chunked_prefill": None,
                                 "enable_prefix_caching": False, "gpu_memory_utilization": None, "n_ubatch": None}


def drop_flat_defaults(engine_knobs: list[str], data: dict[str, Any], as_list: bool = False) -> dict[str, Any]:
    """`data` (knobs, or with `as_list` a grid's knob lists) without the flat-layout fields this engine lacks
    where they hold their defaults; anything else stays, so a real misuse is still a validation error."""
    def default(k: str) -> Any:
        v = FLAT_DEFAULTS.get(k, ...)
        return [v] if as_list and v is not ... else v

    return {k: v for k, v in data.items() if k == "engine" or k in engine_knobs or default(k) != v}


class EngineKnobs(LateFields):
    """Everything that needs a new engine server when it changes."""

    engine: str
    numerics_fields: ClassVar[tuple[str, ...]] = ()  # the knobs that decide the numerics; the rest schedule

    @classmethod
    def knob_names(cls) -> list[str]:
        """The knobs, in order, that the grid, the table and the search show (the fields but `engine`)."""
        return [n for n in cls.model_fields if n != "engine"]

    def knob_values(self) -> dict[str, Any]:
        return {n: getattr(self, n) for n in self.knob_names()}

    def scheduling(self) -> str:
        """The knobs that do not change the numbers computed, as one text (configs that differ only in their
        numerics have the same scheduling)."""
        return " ".join(f"{k}={v}" for k, v in self.knob_values().items() if k not in self.numerics_fields)

    def numerics(self) -> Numerics:
        raise NotImplementedError

    def label(self) -> str:
        raise NotImplementedError

    def id_form(self) -> dict[str, Any]:
        """What this server config's part of a run id is computed from. Engines whose results existed before
        knobs were per engine keep the flat layout of that time (see their override), so old run ids hold."""
        return self.model_dump(mode="json")

    # scheduling, as the generic code and the simulator's queue model read it
    @property
    def slots(self) -> int:
        """Sequences served at once (vLLM max_num_seqs, llama.cpp slots)."""
        raise NotImplementedError

    @property
    def batch_tokens(self) -> int | None:
        """Tokens one engine step may take (None: the engine's default)."""
        return None

    @property
    def chunked_prefill(self) -> bool | None:
        return None

    @property
    def prefix_caching(self) -> bool:
        return False

    @property
    def memory_fraction(self) -> float | None:
        """The share of the GPU's memory the engine may take (None: its default)."""
        return None


@classmethod  # type: ignore[misc]
def _non_empty_unique(cls: type, v: list) -> list:  # type: ignore[type-arg]
    if not v:
        raise ValueError("list must not be empty")
    if len(set(v)) != len(v):
        raise ValueError(f"list has repeated values: {v}")
    return v


def grid_model(knobs: type[EngineKnobs]) -> type[Frozen]:
    """The grid of an engine's knobs: for each knob a list of values (default: the knob's default alone),
    whose cross product is swept; `engine` is the discriminator."""
    fields: dict[str, Any] = {"engine": (knobs.model_fields["engine"].annotation, ...)}
    for name in knobs.knob_names():
        f = knobs.model_fields[name]
        item = Annotated[(f.annotation, *f.metadata)] if f.metadata else f.annotation  # keep ge/le bounds
        fields[name] = (list[item], Field([f.default], description=f.description))  # type: ignore[valid-type]
    validators: dict[str, Any] = {"_lists": field_validator(*knobs.knob_names())(_non_empty_unique)}
    return create_model(f"{knobs.__name__.removesuffix('Knobs')}Grid", __base__=Frozen,  # type: ignore[call-overload, no-any-return]
                        __validators__=validators, **fields)


def grid_combos(knobs: type[EngineKnobs], grid: Any, first_only: bool = False) -> Iterator[dict[str, Any]]:
    """The knob values of each server config of a grid (the cross product of its lists, in field order);
    `first_only`: just the first one."""
    names = knobs.knob_names()
    lists = [getattr(grid, n) for n in names]
    combos = [[v[0] for v in lists]] if first_only else itertools.product(*lists)
    for combo in combos:
        yield dict(zip(names, combo, strict=True))


def grid_size(knobs: type[EngineKnobs], grid: Any) -> int:
    return math.prod(len(getattr(grid, n)) for n in knobs.knob_names())
