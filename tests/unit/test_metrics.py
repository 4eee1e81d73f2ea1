import numpy as np
import pytest

from atlas.config import LoadPoint
from atlas.knobs import LoadMode
from atlas.loadgen import LoadRun, RequestRecord, arrival_schedule
from atlas.metrics import (
    accounting_error_ms,
    min_samples_for,
    percentile_ci,
    repeat_stat,
    summarize,
    summarize_load,
    tpot_ms,
)


def rec(i, t0, ttft, itl, n, status="ok", phase="measure"):
    times = [t0 + ttft + k * itl for k in range(n)] if status == "ok" else []
    return RequestRecord(index=i, phase=phase, scheduled_s=t0, sent_s=t0, first_token_s=times[0] if times else None,
                         token_times_s=times, chunk_tokens=[1] * len(times), end_s=times[-1] if times else None,
                         done_s=(times[-1] if times else t0) + 0.001, output_tokens=len(times),
                         usage_output_tokens=len(times), requested_tokens=n, status=status, prompt_tokens=10)


def point(**kw):
    return LoadPoint(**{"concurrency": 1, "min_requests": 5, "min_duration_s": 0.1, **kw})


def test_tpot_and_accounting_definitions():
    r = rec(0, 1.0, 0.2, 0.05, 11)
    assert tpot_ms(r) == pytest.approx(50.0)
    assert accounting_error_ms(r) < 1e-6


def test_percentile_needs_enough_samples():
    s = summarize(range(50))
    assert s.p50.value is not None and s.p90.value is not None
    assert s.p99.value is None and "needs >= 100 samples, has 50" in s.p99.reason
    assert min_samples_for(99) == 100 and min_samples_for(50) == 2


def test_percentile_ci_is_exact_order_statistic_interval():
    x = np.arange(1, 101, dtype=float)
    lo, hi = percentile_ci(x, 50)
    # binomial(100, .5): 2.5% and 97.5% quantiles are 40 and 60 -> x_(40) and x_(61)
    assert (lo, hi) == (40.0, 61.0)
    lo, hi = percentile_ci(np.arange(1, 11, dtype=float), 99)
    assert hi is None  # unbounded above with 10 samples


def test_ci_coverage_is_at_least_nominal():
    rng = np.random.default_rng(0)
    hits = 0
    for _ in range(400):
        x = np.sort(rng.exponential(size=60))
        lo, hi = percentile_ci(x, 90)
        true = -np.log(0.1)
        hits += (lo is not None and hi is not None and lo <= true <= hi)
    assert hits / 400 >= 0.93


def test_all_failed_gives_null_latency_and_invalid():
    run = LoadRun(point=point(), records=[rec(i, i * 0.1, 0, 0, 4, status="http_503") for i in range(10)],
                  started_at_unix=0, wall_s=1.0, offered_rate_rps=None)
    s = summarize_load(run)
    assert s.ttft_ms is None and s.e2e_ms is None and s.output_tok_s is None
    assert not s.valid and s.errors == {"http_503": 10} and s.error_rate == 1.0


def test_warmup_excluded_and_throughput_over_window():
    recs = [rec(0, 0.0, 5.0, 0.01, 10, phase="warmup")] + [rec(i, i * 1.0, 0.1, 0.01, 10) for i in range(1, 11)]
    s = summarize_load(LoadRun(point=point(), records=recs, started_at_unix=0, wall_s=12, offered_rate_rps=None))
    assert s.n_measured == 10 and s.ttft_ms.p50.value == pytest.approx(100.0)
    # every token arriving in the window counts, the warm-up request's ten (at 5.0-5.09 s) included
    assert s.output_tok_s == pytest.approx(110 / (10.19 - 1.0), rel=1e-6)
    # requests count like tokens (docs/metrics.md): each adds the share of its tokens inside the window
    assert s.requests_s == pytest.approx(11 / (10.19 - 1.0), rel=1e-6)
    assert s.valid


def test_error_rate_and_oversaturation_make_invalid():
    recs = [rec(i, i * 0.1, 0.01, 0.01, 5) for i in range(7)] + [rec(7 + i, 0.7 + i * .1, 0, 0, 5, "http_503")
                                                                  for i in range(3)]
    s = summarize_load(LoadRun(point=point(), records=recs, started_at_unix=0, wall_s=1, offered_rate_rps=None))
    assert not s.valid and any("error rate 30.0%" in r for r in s.invalid_reasons)
    # scheduled every 0.2 s (5 rps) but the server finishes one a second: the queue grows, oversaturated
    late = [rec(i, i * 0.2, 0.01 + i * 0.8, 0.01, 5) for i in range(10)]
    s = summarize_load(LoadRun(point=point(mode=LoadMode.POISSON, rate_rps=5.0, concurrency=None), records=late,
                               started_at_unix=0, wall_s=10, offered_rate_rps=5.0))
    assert any("oversaturated: completed at 1 rps < 0.95 x the 5 rps scheduled" in r for r in s.invalid_reasons)


def test_a_short_schedule_with_few_arrivals_is_not_oversaturated():
    """A Poisson schedule that brought arrivals at 3 rps where 5 were nominal, each served promptly, kept up:
    the verdict compares what was scheduled with what completed, not with the nominal rate."""
    ok = [rec(i, i / 3, 0.05, 0.01, 5) for i in range(12)]
    s = summarize_load(LoadRun(point=point(mode=LoadMode.POISSON, rate_rps=5.0, concurrency=None), records=ok,
                               started_at_unix=0, wall_s=4, offered_rate_rps=5.0))
    assert s.valid, s.invalid_reasons
    assert s.achieved_rate_rps == pytest.approx(3.0)


def test_usage_mismatch_and_length_flags():
    r = rec(0, 0, 0.01, 0.01, 10)
    r.usage_output_tokens = 12
    short = rec(1, 1, 0.01, 0.01, 5)
    short.requested_tokens = 10
    s = summarize_load(LoadRun(point=point(min_requests=1, output_tokens=10), records=[r, short],
                               started_at_unix=0, wall_s=2, offered_rate_rps=None))
    assert any("differ from the server's usage" in w for w in s.warnings)
    assert any("outside 90-110%" in w for w in s.warnings)


def test_schedule_same_seed_same_bytes_and_rate():
    a = arrival_schedule(LoadMode.POISSON, 10.0, 2000, seed=7)
    assert a.tobytes() == arrival_schedule(LoadMode.POISSON, 10.0, 2000, seed=7).tobytes()
    assert a.tobytes() != arrival_schedule(LoadMode.POISSON, 10.0, 2000, seed=8).tobytes()
    assert 2000 / a[-1] == pytest.approx(10.0, rel=0.1)
    g = np.diff(arrival_schedule(LoadMode.GAMMA, 10.0, 4000, seed=1, burstiness=0.25))
    assert g.std() / g.mean() == pytest.approx(2.0, rel=0.15)  # CV of gamma(k) gaps is 1/sqrt(k)
    c = arrival_schedule(LoadMode.CONSTANT, 4.0, 9, seed=1)
    assert c.tolist() == pytest.approx([k * 0.25 for k in range(9)])  # evenly spaced, first at 0


def test_repeat_stat_flags_unstable():
    assert not repeat_stat([100, 101, 99]).unstable
    s = repeat_stat([100, 150, 60])
    assert s.unstable and s.ci_low < s.mean < s.ci_high
    assert repeat_stat([None]).mean is None


def test_closed_loop_window_ends_at_drain():
    recs = [rec(i, i * 1.0, 0.1, 0.1, 10) for i in range(10)]  # tokens at t+0.1 .. t+1.0
    run = LoadRun(point=point(), records=recs, started_at_unix=0, wall_s=11, offered_rate_rps=None, drain_s=5.0)
    s = summarize_load(run)
    # window [0, 5]: requests 0-3 finish (40 tokens); request 4 has its tokens at 4.1 .. 5.0 (10 more)
    assert s.output_tok_s == pytest.approx(50 / 5.0)
    assert s.ttft_ms.n == 10  # latency samples keep every measured request


def test_summary_values_by_name():
    recs = [rec(i, i * 1.0, 0.1, 0.01, 10) for i in range(10)]
    s = summarize_load(LoadRun(point=point(), records=recs, started_at_unix=0, wall_s=11, offered_rate_rps=None))
    assert s.value("ttft_p50_ms") == s.ttft_ms.p50.value == pytest.approx(100.0)
    assert s.value("e2e_p99_ms") is None  # 10 samples: not reported
    assert s.value("output_tok_s") == s.output_tok_s
    assert s.stat("tpot_ms", 90).ci_low is not None
