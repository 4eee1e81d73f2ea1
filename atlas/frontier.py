"""Pareto frontiers: a vectorized n-objective non-dominated set, SLO constraints, hypervolume, and a
dominance that respects confidence intervals. Points that failed, were quality-gated, or lack a metric
are kept out with the reason."""

from __future__ import annotations

from typing import Literal

import numpy as np
import pandas as pd
from pydantic import BaseModel, ConfigDict

from atlas.nondominated import non_dominated_mask
from atlas.table import METRICS


class FrontierError(ValueError):
    pass


class Objective(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    metric: str
    sense: Literal["min", "max"]


class Constraint(BaseModel):
    """An SLO: metric <= max and/or metric >= min."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    metric: str
    max: float | None = None
    min: float | None = None

    def describe(self) -> str:
        parts = []
        if self.max is not None:
            parts.append(f"{self.metric} <= {self.max:g}")
        if self.min is not None:
            parts.append(f"{self.metric} >= {self.min:g}")
        return " and ".join(parts)


# What "better" means when nobody says: cheaper, faster for the slowest tenth of requests, more accurate.
DEFAULT_OBJECTIVES = [Objective(metric="usd_per_m_output", sense="min"),
                      Objective(metric="e2e_p90_ms", sense="min"),
                      Objective(metric="accuracy", sense="max")]


QUALITY_SENSE: dict[str, Literal["min", "max"]] = {"accuracy": "max", "perplexity": "min", "agreement": "max"}


def default_objectives(quality: str = "accuracy") -> list[Objective]:
    """Cost, p90 E2E and the sweep's quality objective (perplexity or agreement where task accuracy is at
    chance, as on the 135M CPU model)."""
    return [*DEFAULT_OBJECTIVES[:2], Objective(metric=quality, sense=QUALITY_SENSE[quality])]


def parse_constraint(text: str) -> Constraint:
    """'ttft_p99_ms<=500' or 'accuracy>=0.6'."""
    for op in ("<=", ">="):
        if op in text:
            name, value = (t.strip() for t in text.split(op, 1))
            if name not in METRICS:
                raise FrontierError(f"SLO {text!r}: unknown metric {name!r}")
            try:
                v = float(value)
            except ValueError:
                raise FrontierError(f"SLO {text!r}: {value!r} is not a number") from None
            return Constraint(metric=name, max=v) if op == "<=" else Constraint(metric=name, min=v)
    raise FrontierError(f"SLO {text!r}: expected METRIC<=VALUE or METRIC>=VALUE")


def parse_objective(text: str) -> Objective:
    """'usd_per_m_output:min'."""
    name, _, sense = text.partition(":")
    if name not in METRICS:
        raise FrontierError(f"objective {text!r}: unknown metric {name!r}; known: {', '.join(sorted(METRICS))}")
    if sense not in ("min", "max"):
        raise FrontierError(f"objective {text!r}: sense must be min or max")
    return Objective(metric=name, sense=sense)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------- numerics
def non_dominated(points: np.ndarray) -> np.ndarray:
    """Boolean mask of the rows of `points` (n x k, every column minimized) that no other row dominates
    (exact copies of a frontier row are all on it). See atlas.nondominated for the algorithm."""
    x = np.asarray(points, dtype=float)
    if x.ndim != 2:
        raise FrontierError("points must be a 2-D array")
    finite = bool(np.isfinite(x).all())
    if not finite and np.isnan(x).any():
        raise FrontierError("points must not be NaN (an unmeasured objective is excluded before the frontier)")
    return non_dominated_mask(x, finite)


def robust_non_dominated(values: np.ndarray, low: np.ndarray, high: np.ndarray) -> np.ndarray:
    """Frontier under uncertainty (all columns minimized): a dominates b only when a is nowhere
    significantly worse (a_k <= b_k, or their intervals overlap) and somewhere significantly better
    (a's interval lies wholly below b's)."""
    v, lo, hi = (np.asarray(a, dtype=float) for a in (values, low, high))
    n = v.shape[0]
    dominated = np.zeros(n, dtype=bool)
    for start in range(0, n, 512):  # blocks keep memory at 512 x n x k
        a_v, a_lo, a_hi = v[start:start + 512, None], lo[start:start + 512, None], hi[start:start + 512, None]
        not_worse = np.all((a_v <= v[None]) | ~(a_lo > hi[None]), axis=2)
        better = np.any(a_hi < lo[None], axis=2)
        dominated |= np.any(not_worse & better, axis=0)
    return ~dominated


def hypervolume(points: np.ndarray, ref: np.ndarray) -> float:
    """Exact volume (all columns minimized) dominated by `points` and bounded by `ref`, by slicing."""
    p = np.asarray(points, dtype=float)
    r = np.asarray(ref, dtype=float)
    if p.size == 0:
        return 0.0
    p = p[np.all(p < r, axis=1)]
    if len(p) == 0:
        return 0.0
    p = p[non_dominated(p)]
    if p.shape[1] == 1:
        return float(r[0] - p[:, 0].min())
    p = p[np.argsort(p[:, -1])]
    vol = 0.0
    for i in range(len(p)):
        top = p[i + 1, -1] if i + 1 < len(p) else r[-1]
        if top > p[i, -1]:
            vol += hypervolume(p[: i + 1, :-1], r[:-1]) * (top - p[i, -1])
    return vol


# ---------------------------------------------------------------------------------------------- tables
def _signed(df: pd.DataFrame, objectives: list[Objective], suffix: str = "") -> np.ndarray:
    cols = []
    for o in objectives:
        col = df[o.metric + suffix] if (o.metric + suffix) in df else df[o.metric]
        cols.append(col.to_numpy(dtype=float) * (1.0 if o.sense == "min" else -1.0))
    return np.column_stack(cols) if cols else np.zeros((len(df), 0))


def compute_frontier(df: pd.DataFrame, objectives: list[Objective], constraints: list[Constraint] | None = None,
                     robust: bool = True) -> pd.DataFrame:
    """Adds columns `eligible`, `excluded_reason` and `on_frontier` to a results frame."""
    if not objectives:
        raise FrontierError("a frontier needs at least one objective")
    for o in objectives:
        if o.metric not in df.columns:
            raise FrontierError(f"no column {o.metric!r} in the results table")
    out = df.copy()
    reasons: list[str | None] = []
    for _, row in out.iterrows():
        reason = None
        if row["status"] != "ok":
            reason = f"{row['status']}: {row['reason']}" if row["reason"] else str(row["status"])
        else:
            missing = [o.metric for o in objectives if pd.isna(row[o.metric])]
            if missing:
                reason = f"not measured: {', '.join(missing)}"
            for c in constraints or []:
                if reason:
                    break
                v = row.get(c.metric)
                if v is None or pd.isna(v):
                    reason = f"SLO {c.describe()}: not measured"
                elif (c.max is not None and v > c.max) or (c.min is not None and v < c.min):
                    reason = f"violates SLO {c.describe()} (got {v:.4g})"
        reasons.append(reason)
    out["excluded_reason"] = reasons
    out["eligible"] = out["excluded_reason"].isna()
    out["on_frontier"] = False
    el = out[out["eligible"]]
    if len(el):
        vals = _signed(el, objectives)
        if robust:
            lo, hi = _signed(el, objectives, "_lo"), _signed(el, objectives, "_hi")
            lo, hi = np.fmin(lo, hi), np.fmax(lo, hi)  # a maximized metric swaps its bounds when negated
            lo, hi = np.where(np.isnan(lo), vals, lo), np.where(np.isnan(hi), vals, hi)
            mask = robust_non_dominated(vals, lo, hi)
        else:
            mask = non_dominated(vals)
        out.loc[el.index, "on_frontier"] = mask
    return out
