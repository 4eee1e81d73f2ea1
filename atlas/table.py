"""One flat row per RunResult (pandas), with the metric names that objectives and SLOs refer to."""

from __future__ import annotations

from collections.abc import Callable
from enum import Enum
from typing import Any

import pandas as pd

from atlas.capacity import CapacityResult
from atlas.engines.registry import KNOB_MODELS
from atlas.results import RunResult
from atlas.workloads.spec import describe


def _pct(attr: str, p: int, part: str = "value") -> Callable[[RunResult], float | None]:
    def get(r: RunResult) -> float | None:
        stat = r.metrics.stat(attr, p) if r.metrics else None
        return None if stat is None else getattr(stat, part)
    return get


def _mean(attr: str) -> Callable[[RunResult], float | None]:
    def get(r: RunResult) -> float | None:
        m = getattr(r.metrics, attr) if r.metrics else None
        return m.mean if m is not None else None
    return get


METRICS: dict[str, tuple[str, str, Callable[[RunResult], float | None]]] = {
    # name: (label, unit, getter)
    "usd_per_m_output": ("Cost per 1M output tokens", "$", lambda r: r.cost.usd_per_m_output_tokens if r.cost else None),
    "output_tok_s": ("Output throughput", "tok/s", lambda r: r.metrics.output_tok_s if r.metrics else None),
    "requests_s": ("Request throughput", "req/s", lambda r: r.metrics.requests_s if r.metrics else None),
    "accuracy": ("Task accuracy", "", lambda r: r.quality.accuracy if r.quality else None),
    "perplexity": ("Perplexity", "", lambda r: r.quality.perplexity if r.quality else None),
    "agreement": ("Agreement with baseline", "",
                  lambda r: r.quality.comparison.agreement if r.quality and r.quality.comparison else None),
    "accuracy_lo": ("Task accuracy 95% CI low", "", lambda r: r.quality.ci_low if r.quality else None),
    "accuracy_hi": ("Task accuracy 95% CI high", "", lambda r: r.quality.ci_high if r.quality else None),
    "goodput_rps": ("Goodput", "req/s", lambda r: r.goodput.requests_s if r.goodput else None),
    "goodput_tok_s": ("Goodput", "tok/s", lambda r: r.goodput.output_tok_s if r.goodput else None),
    "slo_attainment": ("Requests within the SLO", "", lambda r: r.goodput.attainment if r.goodput else None),
    "usd_per_m_total": ("Cost per 1M tokens (in + out)", "$",
                        lambda r: r.cost.usd_per_m_total_tokens if r.cost else None),
    "j_per_output_token": ("Energy per output token", "J",
                           lambda r: r.energy.j_per_output_token if r.energy else None),
    "prefix_hit_rate": ("Prefix-cache hit rate", "", lambda r: r.prefix_reuse.hit_rate if r.prefix_reuse else None),
    "structural_reuse": ("Prompt tokens shared with an earlier request", "",
                         lambda r: r.workload.structural_reuse if r.workload else None),
    "ttft_mean_ms": ("Mean TTFT", "ms", _mean("ttft_ms")),
    "tpot_mean_ms": ("Mean TPOT", "ms", _mean("tpot_ms")),
}
for _m, _name in (("ttft_ms", "TTFT"), ("tpot_ms", "TPOT"), ("itl_ms", "ITL"), ("e2e_ms", "E2E")):
    for _p in (50, 90, 95, 99):
        _base = _m.removesuffix("_ms")
        METRICS[f"{_base}_p{_p}_ms"] = (f"p{_p} {_name}", "ms", _pct(_m, _p))
        METRICS[f"{_base}_p{_p}_ms_lo"] = (f"p{_p} {_name} CI low", "ms", _pct(_m, _p, "ci_low"))
        METRICS[f"{_base}_p{_p}_ms_hi"] = (f"p{_p} {_name} CI high", "ms", _pct(_m, _p, "ci_high"))


def metric_label(name: str) -> str:
    label, unit, _ = METRICS[name]
    return f"{label} ({unit})" if unit else label


# every engine's knobs, in registry order (a knob an engine does not have is empty in its rows)
KNOB_COLUMNS = list(dict.fromkeys(n for k in KNOB_MODELS for n in k.knob_names()))


def _plain(v: object) -> object:
    return v.value if isinstance(v, Enum) else v


def result_row(r: RunResult) -> dict[str, Any]:
    """One result as a flat row: identity, knobs, numerics, load and every metric by its name."""
    s, lp = r.config.server, r.config.load
    n = s.numerics()
    knobs = s.knob_values()
    row = {"run_id": r.run_id, "sweep": r.sweep, "source": r.source, "status": r.status,
           "reason": "; ".join(r.reasons), "label": r.label, "gpu": r.config.gpu, "engine": r.config.engine,
           "model": r.config.model.id, **{k: _plain(knobs.get(k)) for k in KNOB_COLUMNS},
           "numerics": n.label(), "baseline_candidate": n.is_baseline_candidate, "numerics_rank": n.rank,
           "scheduling": s.scheduling(), "slots": s.slots,
           "load": lp.label(), "concurrency": lp.concurrency, "rate_rps": lp.rate_rps, "server": s.label(),
           "workload": describe(lp.workload), "prefix_caching": s.prefix_caching,
           "warnings": "; ".join(r.metrics.warnings) if r.metrics else "",
           "extrapolated": bool(r.simulation.extrapolated) if r.simulation else None}
    for name, (_, _, get) in METRICS.items():
        row[name] = get(r)
    return row


def results_frame(results: list[RunResult]) -> pd.DataFrame:
    return pd.DataFrame([result_row(r) for r in results])


# Columns of a capacity row beyond the point's own (metrics at capacity): name -> (label, unit)
CAPACITY_COLUMNS = {"capacity_rps": ("Capacity under the SLO", "req/s"),
                    "upper_rps": ("Lowest rate over the SLO", "req/s"),
                    "replicas": ("GPUs for the traffic", ""),
                    "usd_per_hour_total": ("Cost of the traffic", "$/h")}
for _k, _v in CAPACITY_COLUMNS.items():
    METRICS[_k] = (*_v, lambda r: None)  # filled in by capacity_frame; named here for --objective and labels


def capacity_frame(capacities: list[CapacityResult], results: list[RunResult],
                   traffic_rps: float | None = None) -> pd.DataFrame:
    """One row per server config at its capacity under the SLO: the measured point at capacity (every metric,
    its quality) with the capacity, and for `traffic_rps` the replicas and $/h that traffic needs. A config
    with no capacity is a row with its status and reason (kept out of every frontier)."""
    by_id = {r.run_id: r for r in results}
    rows = []
    for c in capacities:
        point = by_id.get(c.point_run_id or "")
        base = point if point is not None else RunResult(run_id=c.server_key, sweep=c.sweep, status="skipped",
                                                         label=c.label, config=c.config, source=c.source)
        row = result_row(base)
        status = c.status if c.status != "ok" else (point.status if point is not None else "failed")
        reasons = [*c.reasons, *(point.reasons if point is not None and point.status != "ok" else [])]
        if c.status == "ok" and point is None:
            reasons.append(f"the point at capacity ({c.point_run_id}) is not among the results")
        replicas = c.replicas_for(traffic_rps) if traffic_rps else None
        row.update(usd_per_m_output=c.usd_per_m_output_tokens, usd_per_m_total=c.usd_per_m_total_tokens)  # at capacity
        row.update(status=status, reason="; ".join(reasons), label=c.label, source=c.source,
                   server_key=c.server_key, load=f"capacity {c.capacity_rps:g} rps" if c.capacity_rps else "—",
                   capacity_rps=c.capacity_rps, upper_rps=c.upper_rps, measurements=len(c.trials),
                   point_run_id=c.point_run_id, replicas=replicas,
                   usd_per_hour_total=replicas * c.usd_per_hour if replicas and c.usd_per_hour else None,
                   run_id=c.point_run_id or c.server_key)
        if c.source == "simulated" and c.interval_rps:
            row.update(capacity_rps_lo=c.interval_rps[0], capacity_rps_hi=c.interval_rps[1])
        rows.append(row)
    return pd.DataFrame(rows)
