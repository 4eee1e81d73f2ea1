"""A sweep's planned points as a search space: categorical Optuna parameters for the knobs that vary, the
lookup from a proposal back to its planned point, and the nearest planned point to a proposal that is none."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from enum import Enum
from typing import Any

from optuna.distributions import BaseDistribution, CategoricalDistribution

from atlas.engines.registry import KNOB_MODELS
from atlas.numerics import Numerics, NumericsKey
from atlas.plan import PlannedRun, RunConfig
from atlas.search import SearchError

# every engine's knobs (from its knob model), then the load level
KNOBS = ("engine", *dict.fromkeys(n for k in KNOB_MODELS for n in k.knob_names()), "load")


def _text(v: Any) -> str:
    if v is None:
        return "none"
    if isinstance(v, Enum):
        return str(v.value)
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


def point_params(cfg: RunConfig) -> dict[str, str]:
    """Every knob of a point as text (Optuna's categorical choices must be plain values)."""
    out = {"engine": cfg.engine, "load": cfg.load.label()}
    values = cfg.server.knob_values()
    for k in KNOBS[1:-1]:
        out[k] = _text(values.get(k))  # a knob this engine does not have is "none"
    return out


class SearchSpace:
    def __init__(self, planned: Sequence[PlannedRun]):
        if not planned:
            raise SearchError("nothing to search: every point of the spec is skipped")
        self.points = list(planned)
        every = [point_params(p.config) for p in self.points]
        self.knobs = [k for k in KNOBS if len({p[k] for p in every}) > 1] or ["load"]
        self.distributions: dict[str, BaseDistribution] = {k: CategoricalDistribution(list(dict.fromkeys(p[k] for p in every)))
                              for k in self.knobs}
        self._params = [{k: p[k] for k in self.knobs} for p in every]
        self._index = {self._key(p): i for i, p in enumerate(self._params)}
        self.numerics: list[NumericsKey] = [p.config.server.numerics().key for p in self.points]
        self.numerics_of: dict[NumericsKey, Numerics] = {p.config.server.numerics().key: p.config.server.numerics()
                                                         for p in self.points}
        self._by_run = {p.run_id: i for i, p in enumerate(self.points)}

    def __len__(self) -> int:
        return len(self.points)

    def _key(self, params: Mapping[str, Any]) -> tuple[Any, ...]:
        return tuple(params.get(k) for k in self.knobs)

    def params(self, i: int) -> dict[str, str]:
        return dict(self._params[i])

    def index_of(self, params: Mapping[str, Any]) -> int | None:
        """The planned point a proposal names, or None when the combination is not in the grid."""
        return self._index.get(self._key(params))

    def index_of_run(self, run_id: str) -> int:
        return self._by_run[run_id]

    def nearest(self, params: Mapping[str, Any], candidates: Iterable[int]) -> int | None:
        """The candidate differing from `params` in the fewest knobs; among equals, the fewest steps along
        each knob's list of values, then plan order."""
        def distance(i: int) -> float:
            d = 0.0
            for k in self.knobs:
                a, b = params.get(k), self._params[i][k]
                if a != b:
                    choices = list(self.distributions[k].choices)  # type: ignore[attr-defined]
                    d += 1 + (abs(choices.index(a) - choices.index(b)) / len(choices) if a in choices else 1)
            return d
        return min(candidates, key=lambda i: (distance(i), i), default=None)
