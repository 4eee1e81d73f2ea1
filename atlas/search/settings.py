"""How a search chooses what to measure; stored in the study so every worker chooses alike."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from atlas.frontier import DEFAULT_OBJECTIVES, Objective


class SearchSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    strategy: Literal["grid", "random", "optuna"] = "grid"
    budget: int | None = Field(None, ge=1, description="points to measure (all workers together); None: every point")
    sampler: Literal["tpe", "nsga2"] = Field("tpe", description="optuna: the multi-objective sampler")
    seed: int = 0
    objectives: list[Objective] = Field(default_factory=lambda: list(DEFAULT_OBJECTIVES))
    simulator: bool = Field(True, description="optuna: refit the simulator to what was measured and measure "
                                              "the point it predicts adds most to the frontier first")
    seed_fraction: float = Field(1.0, ge=0.0, le=1.0, description="optuna: at most this share of the budget goes "
                                                                   "to simulator seeds; the sampler proposes the rest, and "
                                                                   "whenever the simulator promises nothing")
    poll_s: float = Field(2.0, gt=0.0, description="how often a worker with nothing to do looks again")
