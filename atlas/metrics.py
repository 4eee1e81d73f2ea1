"""Latency and throughput statistics from per-request records, with exact confidence intervals and a
validity verdict. Pure functions over numpy arrays.

Definitions (docs/metrics.md): TTFT = first token - scheduled send; E2E = last token - scheduled send;
ITL = gaps between successive streamed content chunks (a chunk carrying k tokens is one gap);
TPOT = (E2E - TTFT) / (output tokens - 1); queue = actual send - scheduled send.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable, Sequence

import numpy as np
from pydantic import BaseModel, ConfigDict
from scipy import stats

from atlas.client_check import ClientCheck, check_client
from atlas.knobs import LoadMode
from atlas.loadgen import LoadRun, RequestRecord

PERCENTILES = (50, 90, 95, 99)
_PERCENTILE_NAME = re.compile(r"(ttft|tpot|itl|e2e|queue)_p(\d+)_ms")
CONFIDENCE = 0.95


class _M(BaseModel):
    model_config = ConfigDict(extra="forbid")


class PercentileStat(_M):
    value: float | None
    ci_low: float | None = None  # None: the exact interval has no bound on that side with this many samples
    ci_high: float | None = None
    reason: str | None = None


class MetricSummary(_M):
    n: int
    mean: float | None
    p50: PercentileStat
    p90: PercentileStat
    p95: PercentileStat
    p99: PercentileStat

    def pct(self, p: int) -> PercentileStat:
        return getattr(self, f"p{p}")  # type: ignore[no-any-return]


class LoadSummary(_M):
    n_total: int
    n_measured: int
    n_ok: int
    errors: dict[str, int]
    error_rate: float
    duration_s: float
    ttft_ms: MetricSummary | None
    tpot_ms: MetricSummary | None
    itl_ms: MetricSummary | None
    e2e_ms: MetricSummary | None
    queue_ms: MetricSummary | None
    output_tok_s: float | None
    input_tok_s: float | None
    requests_s: float | None
    offered_rate_rps: float | None
    achieved_rate_rps: float | None
    mean_output_tokens: float | None
    mean_prompt_tokens: float | None = None  # from the server's usage: the prompt length really sent
    ttft_p50_by_turn_ms: dict[str, float] | None = None  # sessions: median TTFT of each turn ("0", "1", ...)
    client: ClientCheck | None = None  # the load client's check on itself (atlas.client_check)
    valid: bool
    invalid_reasons: list[str]
    warnings: list[str]

    def stat(self, metric: str, p: int) -> PercentileStat | None:
        """The p-th percentile of a latency metric ('ttft_ms', 'tpot_ms', 'itl_ms', 'e2e_ms', 'queue_ms')."""
        m: MetricSummary | None = getattr(self, metric)
        return m.pct(p) if m is not None else None

    def value(self, name: str) -> float | None:
        """A headline number by name: a field ('output_tok_s') or a percentile ('ttft_p50_ms')."""
        if m := _PERCENTILE_NAME.fullmatch(name):
            s = self.stat(f"{m.group(1)}_ms", int(m.group(2)))
            return s.value if s is not None else None
        v = getattr(self, name)
        return float(v) if v is not None else None


class RepeatStat(_M):
    n: int
    mean: float | None
    ci_low: float | None
    ci_high: float | None
    cv: float | None
    unstable: bool


def min_samples_for(p: float) -> int:
    """A p-th percentile is reported only with at least 1/(1-p) samples (p99: 100)."""
    return math.ceil(1.0 / (1.0 - p / 100.0) - 1e-9)


def percentile_ci(sorted_x: np.ndarray, p: float, confidence: float = CONFIDENCE) -> tuple[float | None, float | None]:
    """Exact distribution-free interval for the p-th percentile from binomial order statistics: the
    interval [x_(l), x_(u)] covers the true quantile with probability >= confidence."""
    n = len(sorted_x)
    q = p / 100.0
    alpha = 1.0 - confidence
    lo_k = int(stats.binom.ppf(alpha / 2, n, q))  # x_(lo_k) is the lower bound, 1-based
    hi_k = int(stats.binom.ppf(1 - alpha / 2, n, q)) + 1
    lo = float(sorted_x[lo_k - 1]) if lo_k >= 1 else None
    hi = float(sorted_x[hi_k - 1]) if hi_k <= n else None
    return lo, hi


def summarize(values: Iterable[float], intervals: bool = True) -> MetricSummary | None:
    x = np.sort(np.asarray(list(values), dtype=float))
    if x.size == 0:
        return None
    pcts = {}
    for p in PERCENTILES:
        need = min_samples_for(p)
        if x.size < need:
            pcts[f"p{p}"] = PercentileStat(value=None, reason=f"needs >= {need} samples, has {x.size}")
            continue
        lo, hi = percentile_ci(x, p) if intervals else (None, None)
        pcts[f"p{p}"] = PercentileStat(value=float(np.percentile(x, p)), ci_low=lo, ci_high=hi)
    return MetricSummary(n=int(x.size), mean=float(x.mean()), **pcts)


def ttft_ms(r: RequestRecord) -> float | None:
    return None if r.first_token_s is None else (r.first_token_s - r.scheduled_s) * 1e3


def e2e_ms(r: RequestRecord) -> float | None:
    return None if r.end_s is None else (r.end_s - r.scheduled_s) * 1e3


def itl_ms(r: RequestRecord) -> list[float]:
    t = r.token_times_s
    return [(b - a) * 1e3 for a, b in zip(t, t[1:], strict=False)]


def tpot_ms(r: RequestRecord) -> float | None:
    tt, ee = ttft_ms(r), e2e_ms(r)
    if tt is None or ee is None or r.output_tokens < 2:
        return None
    return (ee - tt) / (r.output_tokens - 1)


def accounting_error_ms(r: RequestRecord) -> float:
    """|TTFT + sum(ITL) - E2E| for one request; zero up to float rounding when the record is consistent."""
    tt, ee = ttft_ms(r), e2e_ms(r)
    if tt is None or ee is None:
        return 0.0
    return abs(tt + sum(itl_ms(r)) - ee)


def steady_window(run: LoadRun) -> tuple[float, float] | None:
    """The steady window (s on the run's clock): from the first measured send to the drain (closed loop: when
    the first stream ran out of work) or to the last measured token (open loop); None without a successful
    measured request. Throughput, goodput and energy count what falls inside it, whichever request carried it."""
    counted = [r for r in run.records if r.phase == "measure"]
    ends = [r.end_s for r in counted if r.status == "ok" and r.end_s is not None]
    if not ends:
        return None
    start = min(r.scheduled_s for r in counted)
    end = run.drain_s if run.drain_s is not None and run.drain_s > start else max(ends)
    return start, end


def tokens_in_window(r: RequestRecord, start: float, end: float) -> int:
    return sum(n for t, n in zip(r.token_times_s, r.chunk_tokens, strict=False) if start <= t <= end)


def open_loop_rates(counted: list[RequestRecord], ok: list[RequestRecord]) -> tuple[float, float] | None:
    """(scheduled, completed) request rates of an open-loop run's measured requests: arrivals over the span of
    their scheduled sends, completions over the span of their ends. A server that keeps up completes them over
    about the span they were scheduled in; one that cannot stretches it. Both are the run's own realized rates,
    so a short Poisson schedule that happened to bring fewer arrivals than its nominal rate, or the last
    request's latency, is not mistaken for saturation. None with fewer than 3 requests."""
    sched = sorted(r.scheduled_s for r in counted)
    ends = sorted(r.end_s for r in ok if r.end_s is not None)
    if len(sched) < 3 or len(ends) < 3 or sched[-1] <= sched[0]:
        return None
    scheduled = (len(sched) - 1) / (sched[-1] - sched[0])
    completed = (len(ends) - 1) / max(ends[-1] - ends[0], 1e-9) if len(ends) == len(sched) else \
        (len(ends) - 1) / max(ends[-1] - sched[0], 1e-9)  # requests failed: count only what completed
    return scheduled, completed


def summarize_load(run: LoadRun, intervals: bool = True) -> LoadSummary:
    """The summary of one load run; `intervals=False` skips the percentile intervals (the simulator's fit
    calls this thousands of times and needs only the point values)."""
    pt = run.point
    counted = [r for r in run.records if r.phase == "measure"]
    ok = [r for r in counted if r.status == "ok"]
    errors = dict(Counter(r.status for r in counted if r.status != "ok"))
    error_rate = (len(counted) - len(ok)) / len(counted) if counted else 1.0
    reasons: list[str] = []
    warnings: list[str] = []
    if ok:
        start, end = steady_window(run)  # type: ignore[misc]
        if run.drain_s is not None and run.drain_s <= start:
            warnings.append("no steady state: the first stream ran out of work before the measured window began")
        duration = max(end - start, 1e-9)
        # Requests are counted like tokens: each successful request (of any phase) adds the share of its
        # output tokens that arrived in the window. Counting only requests that finished inside it dropped
        # the last wave of equal-length requests (2.10 req/s where `vllm bench serve` measured 3.07).
        out_tokens, req_share, in_share, prompt_unknown = 0, 0.0, 0.0, False
        for r in run.records:
            inside = tokens_in_window(r, start, end)
            out_tokens += inside
            if r.status == "ok" and r.output_tokens and inside:
                share = inside / r.output_tokens
                req_share += share
                if r.prompt_tokens is None:
                    prompt_unknown = True
                else:
                    in_share += share * r.prompt_tokens
        output_tok_s, requests_s = out_tokens / duration, req_share / duration
        input_tok_s = None if prompt_unknown else in_share / duration
        mean_out = sum(r.output_tokens for r in ok) / len(ok)
    else:
        duration, output_tok_s, input_tok_s, requests_s, mean_out = 0.0, None, None, None, None
    prompts = [r.prompt_tokens for r in ok if r.prompt_tokens is not None]
    mean_prompt = sum(prompts) / len(prompts) if prompts else None
    achieved = open_loop_rates(counted, ok) if pt.mode != LoadMode.CLOSED else None

    if duration < pt.min_duration_s:
        reasons.append(f"too short: measured window {duration:.2f} s < {pt.min_duration_s:g} s")
    if len(ok) < pt.min_requests:
        reasons.append(f"too few samples: {len(ok)} successful measured requests < {pt.min_requests}")
    if error_rate > pt.max_error_rate:
        shown = ", ".join(f"{k}={v}" for k, v in sorted(errors.items()))
        reasons.append(f"error rate {error_rate:.1%} > {pt.max_error_rate:.0%} ({shown})")
    if run.offered_rate_rps and achieved is not None and achieved[1] < 0.95 * achieved[0]:
        reasons.append(f"oversaturated: completed at {achieved[1]:.3g} rps < 0.95 x the {achieved[0]:.3g} rps "
                       f"scheduled (offered {run.offered_rate_rps:g} rps)")

    mismatched = [r for r in ok if r.usage_output_tokens is not None and r.usage_output_tokens != r.output_tokens]
    if mismatched:
        warnings.append(f"{len(mismatched)} requests: tokens counted from the stream differ from the server's usage")
    off_len = [r for r in ok if not 0.9 * r.requested_tokens <= r.output_tokens <= 1.1 * r.requested_tokens]
    if off_len:
        warnings.append(f"{len(off_len)} requests: output length outside 90-110% of the tokens requested")
    if pt.workload is None and mean_prompt is not None and abs(mean_prompt - pt.prompt_tokens) > 0.5:
        warnings.append(f"prompt length: the server counted {mean_prompt:.1f} prompt tokens on average, "
                        f"not the {pt.prompt_tokens} configured")
    bad_acc = [r for r in ok if accounting_error_ms(r) > 1.0]
    if bad_acc:
        warnings.append(f"{len(bad_acc)} requests: TTFT + sum(ITL) differs from E2E by more than 1 ms")

    def vals(f):  # type: ignore[no-untyped-def]
        return [v for v in (f(r) for r in ok) if v is not None]

    ttft, itl = summarize(vals(ttft_ms), intervals), summarize((v for r in ok for v in itl_ms(r)), intervals)
    client = check_client(run, ttft.p50.value if ttft else None, itl.p50.value if itl else None)
    if client.client_bound:
        reasons.append(client.client_bound)
    elif client.warning:
        warnings.append(client.warning)
    return LoadSummary(
        n_total=len(run.records), n_measured=len(counted), n_ok=len(ok), errors=errors, error_rate=error_rate,
        duration_s=duration, client=client,
        ttft_ms=ttft, tpot_ms=summarize(vals(tpot_ms), intervals),
        itl_ms=itl, e2e_ms=summarize(vals(e2e_ms), intervals),
        queue_ms=summarize(((r.sent_s - r.scheduled_s) * 1e3 for r in counted if r.sent_s is not None), intervals),
        output_tok_s=output_tok_s, input_tok_s=input_tok_s, requests_s=requests_s, offered_rate_rps=run.offered_rate_rps,
        achieved_rate_rps=achieved[1] if achieved else None, mean_output_tokens=mean_out, mean_prompt_tokens=mean_prompt,
        valid=not reasons, invalid_reasons=reasons, warnings=warnings, ttft_p50_by_turn_ms=ttft_by_turn(ok),
    )


def ttft_by_turn(ok: Sequence[RequestRecord]) -> dict[str, float] | None:
    """Median TTFT per session turn (turn 0 has no history; later turns carry the conversation so far)."""
    by: dict[int, list[float]] = {}
    for r in ok:
        if r.turn is not None and (v := ttft_ms(r)) is not None:
            by.setdefault(r.turn, []).append(v)
    return {str(t): float(np.median(v)) for t, v in sorted(by.items())} or None


def repeat_stat(values: Sequence[float | None], cv_limit: float = 0.10) -> RepeatStat:
    """Run-level mean with a t confidence interval and the coefficient of variation across repeats."""
    x = np.asarray([v for v in values if v is not None], dtype=float)
    if x.size == 0:
        return RepeatStat(n=0, mean=None, ci_low=None, ci_high=None, cv=None, unstable=False)
    mean = float(x.mean())
    if x.size < 2:
        return RepeatStat(n=1, mean=mean, ci_low=None, ci_high=None, cv=None, unstable=False)
    sd = float(x.std(ddof=1))
    half = float(stats.t.ppf(0.5 + CONFIDENCE / 2, x.size - 1)) * sd / math.sqrt(x.size)
    cv = sd / abs(mean) if mean else None
    return RepeatStat(n=int(x.size), mean=mean, ci_low=mean - half, ci_high=mean + half, cv=cv,
                      unstable=bool(cv is not None and cv > cv_limit))


def pooled_run(runs: Sequence[LoadRun]) -> LoadRun:
    """All repeats' records as one run (indices kept per repeat) for pooled percentiles."""
    if not runs:
        raise ValueError("no load runs to pool")
    records: list[RequestRecord] = []
    wall = 0.0
    for k, run in enumerate(runs):
        for r in run.records:  # shift each repeat onto its own time range so windows do not overlap
            shift = wall
            records.append(RequestRecord(**{**r.to_json(),
                                            "index": k * 1_000_000 + r.index,
                                            "scheduled_s": r.scheduled_s + shift,
                                            "sent_s": None if r.sent_s is None else r.sent_s + shift,
                                            "fired_s": None if r.fired_s is None else r.fired_s + shift,
                                            "first_token_s": None if r.first_token_s is None else r.first_token_s + shift,
                                            "token_times_s": [t + shift for t in r.token_times_s],
                                            "end_s": None if r.end_s is None else r.end_s + shift,
                                            "done_s": None if r.done_s is None else r.done_s + shift}))
        wall += run.wall_s
    return LoadRun(point=runs[0].point, records=records, started_at_unix=runs[0].started_at_unix, wall_s=wall,
                   offered_rate_rps=runs[0].offered_rate_rps, client=[p for run in runs for p in run.client])
