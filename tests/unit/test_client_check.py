"""The load client's check on itself (atlas.client_check) and the deterministic partition of a point's schedule
over client processes (atlas.loadgen.Job.partition, atlas.loadgen_procs.auto_procs)."""

import pytest

from atlas.client_check import FLOOR_MS, ClientCheck, ProcessStats, check_client, limit_ms
from atlas.config import LoadPoint
from atlas.knobs import LoadMode
from atlas.loadgen import LoadRun, RequestRecord, fixed_plan, schedule
from atlas.loadgen_procs import CHUNKS_PER_PROC, STREAMS_PER_PROC, auto_procs


def _run(late_ms, wait_ms=0.05, busy=(0.3,), wakeups=1000):
    point = LoadPoint(mode=LoadMode.POISSON, rate_rps=10.0, num_requests=len(late_ms), min_requests=1,
                      min_duration_s=0.0, warmup_requests=0)
    recs = [RequestRecord(index=i, phase="measure", scheduled_s=i * 0.1, fired_s=i * 0.1 + d / 1e3)
            for i, d in enumerate(late_ms)]
    stats = [ProcessStats(cpu_s=b * 10.0, wall_s=10.0, wait_s=wait_ms * wakeups / 1e3, wakeups=wakeups)
             for b in busy]
    return LoadRun(point=point, records=recs, started_at_unix=0.0, wall_s=10.0, offered_rate_rps=10.0, client=stats)


def test_the_limit_is_a_tenth_of_the_latency_it_adds_to_never_below_the_floor():
    assert limit_ms(None) == limit_ms(0.0) == FLOOR_MS == limit_ms(20.0)
    assert limit_ms(400.0) == pytest.approx(40.0)


def test_a_client_on_time_passes_and_reports_what_it_measured():
    c = check_client(_run([0.2] * 99 + [1.0]), ttft_p50_ms=100.0, itl_p50_ms=20.0)
    assert c.client_bound is None and c.warning is None and c.procs == 1
    assert c.send_lateness_p50_ms == pytest.approx(0.2) and c.send_lateness_max_ms == pytest.approx(1.0)
    assert c.send_limit_ms == pytest.approx(10.0) and c.wait_limit_ms == FLOOR_MS and c.cpu_busy == pytest.approx(0.3)
    assert c.sched_wait_per_wakeup_ms == pytest.approx(0.05) and c.sched_wait_share == pytest.approx(0.005)


def test_a_late_sending_client_makes_the_point_client_bound_with_the_figure():
    c = check_client(_run([0.2] * 90 + [40.0] * 10), ttft_p50_ms=100.0, itl_p50_ms=20.0)
    assert c.client_bound and c.client_bound.startswith("client-bound: send lateness p99 40.0 ms > 10.0")
    assert "1 client process;" in c.client_bound and "--client-procs where cores are free" in c.client_bound


def test_a_saturated_or_cpu_starved_client_is_bound_and_a_smaller_wait_only_warns():
    saturated = check_client(_run([0.2] * 10, busy=(0.4, 0.97)), ttft_p50_ms=100.0, itl_p50_ms=20.0)
    assert saturated.client_bound and "a client process 97% busy" in saturated.client_bound
    assert "2 client processes" in saturated.client_bound and saturated.procs == 2
    starved = check_client(_run([0.2] * 10, wait_ms=8.0), ttft_p50_ms=100.0, itl_p50_ms=20.0)
    assert starved.client_bound and "its loop waited 8.0 ms for a CPU per wake-up > 5.0" in starved.client_bound
    some = check_client(_run([0.2] * 10, wait_ms=2.0), ttft_p50_ms=100.0, itl_p50_ms=20.0)  # 20% of the run
    assert some.client_bound is None and some.warning and "waited for a CPU 20% of the run" in some.warning
    unknown = ProcessStats(cpu_s=1.0, wall_s=10.0)  # off Linux: no scheduler account, the rest still judged
    assert unknown.wait_per_wakeup_ms is None and unknown.wait_share is None


def test_the_meter_reads_this_threads_scheduler_account():
    from atlas.client_check import ClientMeter

    meter = ClientMeter()
    meter.start()
    sum(i * i for i in range(200_000))
    stats = meter.stop()
    assert stats.wall_s > 0 and 0 < stats.cpu_s
    if __import__("sys").platform == "linux":
        assert stats.wakeups is not None and stats.wakeups >= 0 and stats.wait_s is not None and stats.wait_s >= 0


def test_summarize_load_marks_a_client_bound_point_invalid():
    from atlas.metrics import summarize_load

    run = _run([0.2] * 90 + [40.0] * 10)
    for r in run.records:
        r.status, r.sent_s, r.first_token_s = "ok", r.fired_s, r.fired_s + 0.1
        r.token_times_s, r.end_s, r.done_s = [r.fired_s + 0.1, r.fired_s + 0.12], r.fired_s + 0.12, r.fired_s + 0.12
        r.output_tokens, r.prompt_tokens = 2, 8
    s = summarize_load(run)
    assert not s.valid and any(x.startswith("client-bound: send lateness p99") for x in s.invalid_reasons)
    assert isinstance(s.client, ClientCheck) and s.client.send_lateness_p99_ms == pytest.approx(40.0)


def _job(mode=LoadMode.POISSON, n=40, **kw):
    point = LoadPoint(mode=mode, num_requests=n, min_requests=1, min_duration_s=0.0, warmup_requests=0,
                      output_tokens=50, **kw)
    return point, schedule(point, fixed_plan(["p"] * n, point))


def test_the_schedule_is_split_deterministically_and_adds_up_to_the_point():
    point, job = _job(rate_rps=100.0, max_in_flight=10)
    shares = job.partition(3)
    assert [[i for g in s.groups for i, _ in g] for s in shares] == [list(range(j, 40, 3)) for j in range(3)]
    assert sorted(t for s in shares for t in s.starts) == job.starts  # each request keeps its send time
    assert [s.max_in_flight for s in shares] == [4, 3, 3] and all(s.horizon == job.horizon for s in shares)
    assert [[i for g in s.groups for i, _ in g] for s in job.partition(3)] == \
        [[i for g in s.groups for i, _ in g] for s in shares]  # the same split every time
    _, closed = _job(LoadMode.CLOSED, concurrency=5)
    assert [s.concurrency for s in closed.partition(2)] == [3, 2]
    assert len(closed.partition(8)) == 5  # never more processes than streams


def test_client_processes_follow_the_offered_load_up_to_the_cores_less_one():
    point, job = _job(rate_rps=10.0)
    assert auto_procs(point, job, cores=16) == 1
    rate = 3 * CHUNKS_PER_PROC / 50  # three processes' worth of chunks at 50 tokens each
    point, job = _job(rate_rps=rate)
    assert auto_procs(point, job, cores=16) == 3 and auto_procs(point, job, cores=2) == 1
    point, job = _job(LoadMode.CLOSED, concurrency=4 * STREAMS_PER_PROC)
    assert auto_procs(point, job, cores=16) == 4 and auto_procs(point, job, cores=3) == 2


def test_lateness_is_judged_at_the_highest_percentile_the_point_reports():
    """15 requests report p50 and p90 only: one send 111 ms late (the maximum, and so the 'p99') moves neither,
    and the point is not client-bound; two late among 15 reach p90 and it is."""
    one = check_client(_run([0.5] * 14 + [111.0]), ttft_p50_ms=345.0, itl_p50_ms=140.0)
    assert one.judged_quantile == 90 and one.client_bound is None and one.send_lateness_p99_ms == pytest.approx(111.0)
    two = check_client(_run([0.5] * 13 + [111.0] * 2), ttft_p50_ms=345.0, itl_p50_ms=140.0)
    assert two.client_bound and two.client_bound.startswith("client-bound: send lateness p90 111.0 ms > 34.5")
    assert check_client(_run([0.5] * 100), None, None).judged_quantile == 99
