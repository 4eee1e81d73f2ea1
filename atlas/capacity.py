"""Capacity under an SLO: for one server config, the highest open-loop arrival rate at which the SLO holds and
the point is valid. The search is a pure function of the rates tried and their verdicts (bracket from a first
guess by a constant factor, then geometric bisection), so the same measurements always lead to the same next
rate: `--resume` replays it from the stored points and continues where it stopped. Each rate tried is a
normal load point (its own run id, raw records, intervals, verdict)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict

from atlas.config import CapacitySpec, LoadPoint, SweepSpec
from atlas.energy import EnergyResult
from atlas.goodput import Goodput
from atlas.knobs import LoadMode
from atlas.metrics import LoadSummary
from atlas.plan import RunConfig
from atlas.slo import SloSpec

if TYPE_CHECKING:
    from atlas.results import RunResult

CAPACITY_SCHEMA = 1
UNLOADED = 0.5  # a rate whose requests in flight average below this (rate x p50 E2E) is "no load at all"


class _M(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Trial(_M):
    """One rate the search measured, and what it concluded from it."""

    rate_rps: float
    run_id: str
    status: str  # the point's status
    passed: bool  # SLO met and the point valid (not oversaturated, long enough, engine verified)
    why: list[str] = []  # why it did not pass
    in_flight: float | None = None  # rate x p50 E2E: requests in the system on average (Little's law)


class CapacityResult(_M):
    schema_version: int = CAPACITY_SCHEMA
    kind: Literal["capacity"] = "capacity"
    sweep: str
    server_key: str
    label: str  # the server config's label
    engine: str
    gpu: str
    config: RunConfig  # the server config (its load: the first rate tried, or a ladder point when none was)
    source: Literal["measured", "simulated"] = "measured"
    status: Literal["ok", "no_capacity", "not_searched", "failed"]
    reasons: list[str] = []
    slo: SloSpec
    settings: CapacitySpec  # the search's settings (--resume searches again when they change)
    mode: str  # arrival model of the rates tried
    capacity_rps: float | None = None  # highest rate that met the SLO with a valid point
    upper_rps: float | None = None  # lowest rate above it that did not (None: none found)
    achieved_precision: float | None = None  # (upper - capacity) / upper
    guess_rps: float | None = None
    guess_from: str | None = None
    trials: list[Trial] = []
    point_run_id: str | None = None  # the measured point at capacity
    goodput: Goodput | None = None
    requests_s: float | None = None
    output_tok_s: float | None = None
    latency_ms: dict[str, float | None] = {}  # percentiles at capacity
    usd_per_hour: float | None = None
    usd_per_m_output_tokens: float | None = None
    usd_per_m_total_tokens: float | None = None
    energy: EnergyResult | None = None
    interval_rps: tuple[float, float] | None = None  # simulated: capacity's interval from the held-out error
    simulation: str | None = None  # simulated: how it was predicted

    @property
    def precision(self) -> float:
        """The precision the search was asked for."""
        return self.settings.precision

    def replicas_for(self, traffic_rps: float) -> int | None:
        """GPUs (replicas of this config) needed to serve `traffic_rps` within the SLO."""
        if not self.capacity_rps:
            return None
        return max(1, math.ceil(traffic_rps / self.capacity_rps - 1e-9))


def cost_at_capacity(capacity_rps: float, summary: LoadSummary, usd_per_hour: float | None) -> dict[str, float | None]:
    """$ per million output and total tokens when serving at the capacity rate: capacity x the point's mean
    output (and prompt) tokens per request. Not the point's window throughput: over a 10-second Poisson window that
    swings +-20% with the arrivals drawn, and a config with the higher capacity came out dearer."""
    def per_million(tok_s: float | None) -> float | None:
        return None if not usd_per_hour or not tok_s else usd_per_hour / (tok_s * 3600.0) * 1e6

    out = capacity_rps * summary.mean_output_tokens if summary.mean_output_tokens else None
    prompt = summary.mean_prompt_tokens
    return {"usd_per_hour": usd_per_hour, "usd_per_m_output_tokens": per_million(out),
            "usd_per_m_total_tokens": per_million(None if out is None or prompt is None else out + capacity_rps * prompt)}


LATENCIES_AT_CAPACITY = ("ttft_p50_ms", "ttft_p90_ms", "ttft_p99_ms", "tpot_p50_ms", "tpot_p90_ms", "tpot_p99_ms",
                         "itl_p99_ms", "e2e_p50_ms", "e2e_p90_ms", "e2e_p99_ms")


def at_capacity(capacity_rps: float, point: RunResult) -> dict[str, Any]:
    """A capacity record's fields from the (measured or simulated) point at capacity: throughput, latency
    percentiles, goodput, energy and the cost of serving at that rate."""
    m = point.metrics
    assert m is not None
    return {"requests_s": m.requests_s, "output_tok_s": m.output_tok_s, "goodput": point.goodput,
            "energy": point.energy, "latency_ms": {n: m.value(n) for n in LATENCIES_AT_CAPACITY},
            **cost_at_capacity(capacity_rps, m, point.cost.usd_per_hour if point.cost else None)}


def round_rate(r: float) -> float:
    """Three significant digits: the rates a search tries are stable numbers (they are part of run ids)."""
    if r <= 0:
        raise ValueError(f"rate must be > 0, got {r}")
    return float(f"{r:.3g}")


class CapacitySearch:
    """The next rate to measure, from the trials so far (pure and deterministic)."""

    def __init__(self, spec: CapacitySpec, guess_rps: float, step: float = 2.0):
        self.spec = spec
        self.guess = round_rate(min(max(guess_rps, spec.min_rps), spec.max_rps))
        self.step = step

    def bracket(self, trials: list[Trial]) -> tuple[float | None, float | None]:
        """(highest passing rate, lowest failing rate above it). A failure below a pass (noise near capacity)
        does not move the bracket; it stays in the record."""
        lo = max((t.rate_rps for t in trials if t.passed), default=None)
        above = [t.rate_rps for t in trials if not t.passed and (lo is None or t.rate_rps > lo)]
        return lo, min(above, default=None)

    def next_rate(self, trials: list[Trial]) -> float | None:
        if len(trials) >= self.spec.max_measurements:
            return None
        if not trials:
            return self.guess
        tried = {t.rate_rps for t in trials}
        lo, hi = self.bracket(trials)
        if lo is None:  # nothing passed yet: go down
            lowest = min(trials, key=lambda t: t.rate_rps)
            if lowest.in_flight is not None and lowest.in_flight < UNLOADED:
                return None  # it fails with the engine all but idle: a lower rate cannot help
            nxt = round_rate(lowest.rate_rps / self.step)
            return nxt if nxt >= self.spec.min_rps and nxt not in tried else None
        if hi is None:  # nothing failed above the best pass: go up
            nxt = round_rate(lo * self.step)
            return nxt if nxt <= self.spec.max_rps and nxt not in tried else None
        if (hi - lo) / hi <= self.spec.precision:
            return None
        nxt = round_rate(math.sqrt(lo * hi))
        return nxt if lo < nxt < hi and nxt not in tried else None


def rate_point(spec: SweepSpec, rate_rps: float) -> LoadPoint:
    """The open-loop load point that measures one rate: the spec's load shape with the spec's arrival model
    (Poisson when the spec's ladder is closed-loop), enough arrivals for `duration_s` after `warmup_s` and for
    the SLO's highest percentile."""
    from atlas.workloads.requests import pinned

    cap, slo = spec.capacity, spec.slo
    load = spec.load.shape()
    shape = load.model_copy(update={"workload": pinned(load.workload)}).model_dump()
    mode = spec.load.mode if spec.load.mode != LoadMode.CLOSED else LoadMode.POISSON
    # arrivals that may fall in the warm-up: the first is at 0, the rest Poisson (mean + 3 standard deviations)
    mean = rate_rps * cap.warmup_s
    warm = 1 + math.ceil(mean + 3 * math.sqrt(mean))
    need = max(cap.min_requests, slo.samples_needed() if slo else 1)
    n = min(warm + max(math.ceil(rate_rps * cap.duration_s), need), cap.max_requests)
    shape.update(mode=mode, num_requests=n, warmup_s=cap.warmup_s, cooldown_s=0.0,
                 min_requests=min(need, max(1, n - warm)), warmup_requests=0)
    return LoadPoint(**shape, rate_rps=rate_rps)
