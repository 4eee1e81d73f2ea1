"""Two result folders side by side: points matched by their configuration (the run id is recomputed from each
result's config, never taken from its file name), each headline metric's change with its significance, the
provenance that differs between the two sides (what may explain a change), and how the frontier moved."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict
from scipy import stats

from atlas.results import MEASURED, RunResult, load_results

Better = Literal["lower", "higher"]
# the metrics compared, and which way is better
COMPARED: dict[str, Better] = {
    "ttft_p50_ms": "lower", "ttft_p99_ms": "lower", "tpot_p50_ms": "lower", "tpot_p99_ms": "lower",
    "itl_p99_ms": "lower", "e2e_p50_ms": "lower", "e2e_p99_ms": "lower", "output_tok_s": "higher",
    "requests_s": "higher", "goodput_rps": "higher", "usd_per_m_output": "lower", "accuracy": "higher",
    "perplexity": "lower", "j_per_output_token": "lower",
}
ALPHA = 0.05
THRESHOLD = 0.05  # a change smaller than 5% is "unchanged" whatever its significance
ACCURACY_THRESHOLD = 0.01  # accuracy moves in absolute points


class CompareError(ValueError):
    pass


class MetricChange(BaseModel):
    model_config = ConfigDict(extra="forbid")
    metric: str
    old: float
    new: float
    change: float  # new - old
    relative: float | None  # (new - old) / |old|
    worse: bool  # the change goes the bad way
    significant: bool | None  # None: no test applies (a single repeat without an interval)
    test: str  # which test, with its figures
    verdict: Literal["regression", "improvement", "within noise", "unchanged"]


class _Judged(BaseModel):
    """One matched thing (a point, or a config's capacity) on both sides."""

    model_config = ConfigDict(extra="forbid")
    key: str
    label: str
    old_status: str
    new_status: str
    new_reasons: list[str] = []
    changes: list[MetricChange] = []

    @property
    def status_regressed(self) -> bool:
        """Good on the baseline, not on the new side: its metrics no longer stand for the config."""
        return self.old_status == "ok" and self.new_status != "ok"


class PointComparison(_Judged):
    """One configuration's point (key: the run id both configs hash to)."""


class CapacityComparison(_Judged):
    """One server config's capacity under the SLO (key: atlas.compare_capacity.capacity_key)."""


class Comparison(BaseModel):
    model_config = ConfigDict(extra="forbid")
    baseline: str
    new: str
    matched: list[PointComparison]
    only_baseline: list[str]  # labels of configs measured on one side only
    only_new: list[str]
    provenance: list[str]  # "engine_version: 0.31.0 -> 0.32.0"
    frontier_entered: list[str]
    frontier_left: list[str]
    threshold: float
    capacities: list[CapacityComparison] = []  # configs with a capacity record on both sides
    capacity_frontier_entered: list[str] = []  # the frontier at capacity (what the report leads with)
    capacity_frontier_left: list[str] = []

    def judged(self) -> list[PointComparison | CapacityComparison]:
        """Every matched point, then every matched capacity."""
        return [*self.matched, *self.capacities]

    def regressions(self) -> list[tuple[PointComparison | CapacityComparison, MetricChange]]:
        return [(p, c) for p in self.judged() for c in p.changes if c.verdict == "regression"]


def _key(r: RunResult) -> str:
    return r.config.run_id()


def _load(folder: Path) -> list[RunResult]:
    if not folder.is_dir():
        raise CompareError(f"{folder}: not a results folder")
    results, errors = load_results(folder)
    if errors:
        raise CompareError(f"{folder}: {errors[0]}")
    measured = [r for r in results if r.source in MEASURED]
    if not measured:
        raise CompareError(f"{folder}: no measured results")
    return measured


def _getter(metric: str) -> Callable[[RunResult], float | None]:
    from atlas.table import METRICS

    return METRICS[metric][2]


def _repeat_values(r: RunResult, metric: str) -> list[float]:
    vals = []
    for s in r.repeats:
        try:
            v = s.value(metric)
        except AttributeError:
            return []
        if v is not None and math.isfinite(v):
            vals.append(v)
    return vals


def _ci(r: RunResult, metric: str) -> tuple[float, float] | None:
    from atlas.table import METRICS

    if f"{metric}_lo" not in METRICS:
        return None
    lo, hi = _getter(f"{metric}_lo")(r), _getter(f"{metric}_hi")(r)
    if lo is None and hi is None:
        return None
    # too few samples for one side of the exact interval: it is unbounded on that side
    return (-math.inf if lo is None else lo), (math.inf if hi is None else hi)


def _items(r: RunResult) -> dict[tuple[str, str], bool]:
    return {(i.set, i.id): i.correct for i in r.quality.items} if r.quality else {}


def significance(old: RunResult, new: RunResult, metric: str) -> tuple[bool | None, str]:
    """Whether the change of `metric` between two points is beyond their noise, and the test that says so."""
    if metric == "accuracy" and old.quality and new.quality:
        a, b = _items(old), _items(new)
        common = sorted(set(a) & set(b))
        if len(common) >= 10:  # the same items on both sides: McNemar's exact test on the discordant pairs
            gained = sum(1 for k in common if b[k] and not a[k])
            lost = sum(1 for k in common if a[k] and not b[k])
            if gained + lost == 0:
                return False, f"McNemar exact over {len(common)} paired items: no item changed"
            p = stats.binomtest(gained, gained + lost, 0.5).pvalue
            return p < ALPHA, f"McNemar exact over {len(common)} paired items (+{gained} / -{lost}): p={p:.3g}"
        n1, n2 = old.quality.n, new.quality.n
        pooled = (old.quality.correct + new.quality.correct) / (n1 + n2) if n1 + n2 else 0.0
        se = math.sqrt(pooled * (1 - pooled) * (1 / n1 + 1 / n2)) if n1 and n2 else 0.0
        if se == 0:
            return None, "two-proportion z-test: no variance"
        z = (new.quality.accuracy - old.quality.accuracy) / se
        p = 2 * stats.norm.sf(abs(z))
        return p < ALPHA, f"two-proportion z-test (n={n1}, {n2}): p={p:.3g}"
    via = "output_tok_s" if metric == "usd_per_m_output" else metric  # cost = price / throughput
    x, y = _repeat_values(old, via), _repeat_values(new, via)
    if len(x) >= 2 and len(y) >= 2:
        if np.std(x) == 0 and np.std(y) == 0:
            return x[0] != y[0], f"repeats without spread (n={len(x)}, {len(y)})"
        p = float(stats.ttest_ind(x, y, equal_var=False).pvalue)
        what = " of output throughput (cost = price / throughput)" if via != metric else ""
        return p < ALPHA, f"Welch t-test over repeats{what} (n={len(x)}, {len(y)}): p={p:.3g}"
    ia, ib = _ci(old, metric), _ci(new, metric)
    if ia is not None and ib is not None:
        apart = ia[1] < ib[0] or ib[1] < ia[0]
        return apart, (f"95% intervals of the percentile {'do not overlap' if apart else 'overlap'} "
                       f"([{ia[0]:.4g}, {ia[1]:.4g}] vs [{ib[0]:.4g}, {ib[1]:.4g}])")
    return None, "no test: a single repeat and no interval"


def metric_change(old: RunResult, new: RunResult, metric: str, threshold: float = THRESHOLD) -> MetricChange | None:
    get = _getter(metric)
    a, b = get(old), get(new)
    if a is None or b is None or not (math.isfinite(a) and math.isfinite(b)):
        return None
    better = COMPARED[metric]
    rel = (b - a) / abs(a) if a else None
    worse = (b > a) if better == "lower" else (b < a)
    big = abs(b - a) > ACCURACY_THRESHOLD if metric == "accuracy" else (rel is None and b != a) or (
        rel is not None and abs(rel) > threshold)
    sig, test = significance(old, new, metric)
    if not big:
        verdict = "unchanged"
    elif sig is False:
        verdict = "within noise"
    else:
        verdict = "regression" if worse else "improvement"
    return MetricChange(metric=metric, old=a, new=b, change=b - a, relative=rel, worse=worse and b != a,
                        significant=sig, test=test, verdict=verdict)  # type: ignore[arg-type]


PROVENANCE: dict[str, Callable[[RunResult], object]] = {
    "engine_version": lambda r: r.provenance.engine_version if r.provenance else None,
    "atlas_version": lambda r: r.provenance.atlas_version if r.provenance else None,
    "torch_version": lambda r: r.provenance.torch_version if r.provenance else None,
    "GPUs": lambda r: ", ".join(r.provenance.host_gpus) if r.provenance and r.provenance.host_gpus else None,
    "driver": lambda r: (r.provenance.gpu_details[0].get("driver_version")
                         if r.provenance and r.provenance.gpu_details else None),
    "host CPU": lambda r: r.provenance.host_cpu if r.provenance else None,
    "model files": lambda r: _model_hash(r),
    "price": lambda r: f"{r.cost.usd_per_hour:g} $/h ({r.cost.price_source})" if r.cost else None,
}


def _model_hash(r: RunResult) -> object:
    files = r.provenance.model_files if r.provenance else {}
    found = sorted(str(v.get("sha256"))[:12] for v in files.values() if isinstance(v, dict) and v.get("sha256"))
    return ", ".join(found) or None


def provenance_diff(old: list[RunResult], new: list[RunResult]) -> list[str]:
    """What the two sides were measured with that differs: candidates for explaining a change."""
    out = []
    for name, get in PROVENANCE.items():
        a = sorted({str(v) for v in map(get, old) if v is not None})
        b = sorted({str(v) for v in map(get, new) if v is not None})
        if a != b:
            out.append(f"{name}: {' | '.join(a) or 'not recorded'} -> {' | '.join(b) or 'not recorded'}")
    pa = [r.provenance.hardware_probe for r in old if r.provenance and r.provenance.hardware_probe]
    pb = [r.provenance.hardware_probe for r in new if r.provenance and r.provenance.hardware_probe]
    if pa and pb:
        from atlas.probe import drift, drift_reasons, drift_tolerance, median_probe

        ma, mb = median_probe(pa), median_probe(pb)
        ratios = drift(ma, mb)
        if drift_reasons(ratios, drift_tolerance(ma, mb)) and ratios is not None:
            out.append("machine probe: new/baseline bandwidth "
                       f"{ratios['bandwidth']:.2f}x, matmul {ratios['matmul']:.2f}x")
    return out


def _frontier_keys(results: list[RunResult]) -> set[str]:
    from atlas.frontier import compute_frontier, default_objectives
    from atlas.table import results_frame

    ok = [r for r in results if r.status == "ok"]
    if not ok:
        return set()
    fr = results_frame(ok)
    fr["key"] = [_key(r) for r in ok]
    out = set()
    for _, part in fr.groupby(["gpu", "load"], dropna=False):
        objectives = [o for o in default_objectives() if part[o.metric].notna().any()]
        if objectives:
            marked = compute_frontier(part, objectives, robust=True)
            out |= set(marked.loc[marked["on_frontier"], "key"])
    return out


def compare(baseline: Path, new: Path, threshold: float = THRESHOLD) -> Comparison:
    old_r, new_r = _load(baseline), _load(new)
    a = {_key(r): r for r in old_r}
    b = {_key(r): r for r in new_r}
    common = [k for k in a if k in b]
    if not common:
        raise CompareError(f"{baseline} and {new} have no configuration in common "
                           f"({len(a)} and {len(b)} measured points)")
    matched = []
    for k in common:
        o, n = a[k], b[k]
        measured = o.metrics is not None and n.metrics is not None
        changes = [c for m in COMPARED if (c := metric_change(o, n, m, threshold)) is not None] if measured else []
        matched.append(PointComparison(key=k, label=o.label, old_status=o.status, new_status=n.status,
                                       new_reasons=n.reasons, changes=changes))
    from atlas.compare_capacity import compare_capacities, frontier_at_capacity, measured_capacities

    fa, fb = _frontier_keys(old_r), _frontier_keys(new_r)
    label = {**{k: r.label for k, r in a.items()}, **{k: r.label for k, r in b.items()}}
    caps_a, caps_b = measured_capacities(baseline), measured_capacities(new)
    ca, cb = frontier_at_capacity(caps_a, old_r), frontier_at_capacity(caps_b, new_r)
    return Comparison(baseline=str(baseline), new=str(new), matched=matched,
                      only_baseline=sorted(a[k].label for k in a if k not in b),
                      only_new=sorted(b[k].label for k in b if k not in a),
                      provenance=provenance_diff(old_r, new_r),
                      frontier_entered=sorted(label[k] for k in fb - fa),
                      frontier_left=sorted(label[k] for k in fa - fb), threshold=threshold,
                      capacities=compare_capacities(caps_a, caps_b, threshold),
                      capacity_frontier_entered=sorted(cb[k] for k in cb.keys() - ca.keys()),
                      capacity_frontier_left=sorted(ca[k] for k in ca.keys() - cb.keys()))
