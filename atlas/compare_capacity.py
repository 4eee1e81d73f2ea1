"""Capacity under the SLO, compared: per server config (matched by its recomputed server key, the SLO, the
arrival model and the workload), the capacity and the cost at capacity, and how the frontier at capacity moved.
A capacity search brackets the true capacity between the highest rate that met the SLO and the lowest that did
not; two brackets that do not overlap are a change the search itself resolved."""

from __future__ import annotations

import math
from pathlib import Path

from atlas.capacity import CapacityResult
from atlas.compare import CapacityComparison, MetricChange
from atlas.results import ResultError, RunResult, load_capacities
from atlas.workloads.spec import describe


def capacity_key(c: CapacityResult) -> str:
    return f"{c.config.server_key()}|{c.slo.describe()}|{c.mode}|{describe(c.config.load.workload)}"


def _bracket(c: CapacityResult) -> tuple[float, float]:
    assert c.capacity_rps is not None
    return c.capacity_rps, (c.upper_rps if c.upper_rps is not None else math.inf)


def _change(metric: str, a: float, b: float, lower_better: bool, old: CapacityResult, new: CapacityResult,
            threshold: float) -> MetricChange:
    (a_lo, a_hi), (b_lo, b_hi) = _bracket(old), _bracket(new)
    apart = a_hi <= b_lo or b_hi <= a_lo
    test = (f"capacity brackets {'do not overlap' if apart else 'overlap'} ([{a_lo:g}, {a_hi:g}) vs "
            f"[{b_lo:g}, {b_hi:g}) req/s)")
    if metric != "capacity_rps":
        test += "; cost at capacity follows the capacity"
    rel = (b - a) / abs(a) if a else None
    worse = (b > a) if lower_better else (b < a)
    big = rel is not None and abs(rel) > threshold
    verdict = "unchanged" if not big else ("within noise" if not apart else ("regression" if worse else "improvement"))
    return MetricChange(metric=metric, old=a, new=b, change=b - a, relative=rel, worse=worse, significant=apart,
                        test=test, verdict=verdict)  # type: ignore[arg-type]


def measured_capacities(folder: Path) -> list[CapacityResult]:
    """The folder's measured capacity records; an unreadable one stops the comparison with its name, as an
    unreadable point does (a comparison that silently lost a record would misreport what moved)."""
    records, errors = load_capacities(folder)
    if errors:
        raise ResultError(f"{folder}: {errors[0]}")
    return [c for c in records if c.source == "measured"]


def compare_capacities(a_list: list[CapacityResult], b_list: list[CapacityResult],
                       threshold: float) -> list[CapacityComparison]:
    """Matched configs' capacity records; empty where either side has none."""
    a = {capacity_key(c): c for c in a_list}
    b = {capacity_key(c): c for c in b_list}
    out = []
    for k in (k for k in a if k in b):
        o, n = a[k], b[k]
        changes = []
        if o.status == n.status == "ok" and o.capacity_rps and n.capacity_rps:
            changes.append(_change("capacity_rps", o.capacity_rps, n.capacity_rps, False, o, n, threshold))
            if o.usd_per_m_output_tokens and n.usd_per_m_output_tokens:
                changes.append(_change("usd_per_m_output", o.usd_per_m_output_tokens, n.usd_per_m_output_tokens,
                                       True, o, n, threshold))
        out.append(CapacityComparison(key=k, label=o.label, old_status=o.status, new_status=n.status,
                                      new_reasons=n.reasons, changes=changes))
    return out


def frontier_at_capacity(caps: list[CapacityResult], results: list[RunResult]) -> dict[str, str]:
    """key -> label of the configs on the frontier at capacity (the default objectives, robust)."""
    from atlas.frontier import compute_frontier, default_objectives
    from atlas.table import capacity_frame

    if not caps:
        return {}
    fr = capacity_frame(caps, results)
    fr["key"] = [capacity_key(c) for c in caps]
    out = {}
    for _, part in fr.groupby("gpu", dropna=False):
        objectives = [o for o in default_objectives() if part[o.metric].notna().any()]
        if objectives:
            marked = compute_frontier(part, objectives, robust=True)
            out.update(dict(zip(marked.loc[marked["on_frontier"], "key"], marked.loc[marked["on_frontier"], "label"],
                                strict=True)))
    return out
