"""SLO checks, goodput arithmetic, the capacity search's decisions, the capacity record's store, the frontier
over configurations at capacity, point extension and energy (with a stand-in for NVML)."""

import math

import pytest

from atlas.capacity import CapacityResult, CapacitySearch, Trial, rate_point, round_rate
from atlas.capacity_run import ladder_guess, trial_of
from atlas.config import CapacitySpec, LoadPoint, SpecError, parse_spec
from atlas.energy import EnergyResult, NvmlEnergy, energy_meter, energy_of, joules_between
from atlas.frontier import compute_frontier, default_objectives
from atlas.goodput import goodput, request_met
from atlas.hardware import get_gpu
from atlas.knobs import LoadMode
from atlas.loadgen import LoadRun, arrival_schedule
from atlas.metrics import summarize_load
from atlas.plan import expand
from atlas.point_checks import extension_factor
from atlas.report.site import best_at_capacity
from atlas.results import ResultStore, RunResult, load_capacities, load_results
from atlas.slo import SloError, SloSpec, parse_slo
from atlas.table import capacity_frame
from tests.unit.test_metrics import rec

SPEC = {"name": "cap", "engine": "mock", "gpu": "cpu", "model": {"id": "m", "source": "embedded"},
        "grid": {"engine": "mock", "itl_ms": [10, 20]},
        "load": {"concurrency": [1, 4], "num_requests": 20, "output_tokens": 8, "min_requests": 4},
        "quality": {"enabled": False}, "slo": {"ttft_p90_ms": 100, "tpot_p50_ms": 20}}


def open_run(records, rate=10.0):
    pt = LoadPoint(mode=LoadMode.POISSON, rate_rps=rate, min_requests=2, min_duration_s=0.1)
    return LoadRun(point=pt, records=records, started_at_unix=1000.0, wall_s=10, offered_rate_rps=rate)


# ------------------------------------------------------------------------------------------------ SLO
def test_violations_name_the_target_and_the_value():
    slo = SloSpec(ttft_p90_ms=100, tpot_p50_ms=20, max_error_rate=0.1)
    fast = summarize_load(open_run([rec(i, i * 0.1, 0.05, 0.01, 5) for i in range(20)]))
    assert slo.violations(fast) == []
    slow = summarize_load(open_run([rec(i, i * 0.1, 0.3, 0.03, 5) for i in range(20)]))
    assert slo.violations(slow) == ["TTFT p90 300 ms > 100 ms", "TPOT p50 30 ms > 20 ms"]
    few = summarize_load(open_run([rec(i, i * 0.1, 0.05, 0.01, 5) for i in range(5)]))
    assert slo.violations(few)[0].startswith("TTFT p90 not measured (needs >= 10 samples, has 5)")
    assert SloSpec(ttft_p99_ms=1).samples_needed() == 100 and SloSpec(ttft_p50_ms=1).samples_needed() == 2


def test_parse_slo_and_its_errors():
    assert parse_slo(["ttft_p99_ms<=1000", "tpot_p99_ms <= 50"]) == SloSpec(ttft_p99_ms=1000, tpot_p99_ms=50)
    with pytest.raises(SloError, match="unknown target 'ttft_p42_ms'"):
        parse_slo(["ttft_p42_ms<=1"])
    with pytest.raises(SloError, match="expected TARGET<=VALUE"):
        parse_slo(["ttft_p99_ms>=1"])
    with pytest.raises(SloError, match="'fast' is not a number"):
        parse_slo(["ttft_p99_ms<=fast"])


def test_per_request_targets_take_the_tightest_and_skip_itl():
    slo = SloSpec(ttft_p50_ms=50, ttft_p99_ms=200, itl_p99_ms=30, e2e_p90_ms=900)
    assert slo.per_request_targets() == {"ttft": 50, "e2e": 900}


# ------------------------------------------------------------------------------------------------ goodput
def test_goodput_counts_only_requests_within_every_target():
    """10 requests at 10 rps, 5 tokens each; 4 have a TTFT of 0.3 s (over the 0.2 s target), one failed."""
    records = [rec(i, i * 0.1, 0.3 if i in (2, 4, 6, 8) else 0.05, 0.01, 5) for i in range(9)]
    records.append(rec(9, 0.9, 0.05, 0.01, 5, status="http_503"))
    run = open_run(records)
    g = goodput([run], SloSpec(ttft_p90_ms=200))
    s = summarize_load(run)
    assert g.attainment == pytest.approx(5 / 9)
    # every token of the 5 good requests lies inside the window: goodput tokens = 25 over the window
    window = max(r.end_s for r in records if r.end_s) - 0.0
    assert g.output_tok_s == pytest.approx(25 / window)
    assert g.requests_s == pytest.approx(5 / window)
    assert g.output_tok_s < s.output_tok_s
    assert not request_met(records[2], {"ttft": 200}) and request_met(records[0], {"ttft": 200})
    assert not request_met(records[9], {})


def test_goodput_equals_throughput_when_every_request_meets_the_slo():
    run = open_run([rec(i, i * 0.1, 0.05, 0.01, 5) for i in range(10)])
    g, s = goodput([run], SloSpec(e2e_p90_ms=1000)), summarize_load(run)
    assert g.requests_s == pytest.approx(s.requests_s) and g.output_tok_s == pytest.approx(s.output_tok_s)


# ------------------------------------------------------------------------------------------------ search
def trial(rate, passed, in_flight=2.0):
    return Trial(rate_rps=rate, run_id=f"r{rate}", status="ok" if passed else "invalid", passed=passed,
                 in_flight=in_flight)


def run_search(search, capacity):
    """Drives a search against a truth: a rate passes iff it is <= capacity."""
    trials = []
    while (r := search.next_rate(trials)) is not None:
        trials.append(trial(r, r <= capacity))
    return trials


@pytest.mark.parametrize("truth", [0.03, 0.7, 1.0, 3.3, 9.9, 47.0, 812.0])
@pytest.mark.parametrize("off", [1 / 60, 0.3, 1.0, 4.0, 60.0])
def test_search_finds_the_capacity_within_the_precision_and_the_budget(truth, off):
    """A guess up to 64x off: ceil(log2 64) + 1 bracketing steps and 3 bisections fit in 10 rates."""
    guess = truth * off
    cap = CapacitySpec(precision=0.1, max_measurements=10, min_rps=0.0001)
    trials = run_search(CapacitySearch(cap, guess, 2.0), truth)
    lo, hi = CapacitySearch(cap, guess).bracket(trials)
    assert lo is not None and hi is not None and lo <= truth < hi
    assert (hi - lo) / hi <= 0.1 + 0.01  # three-digit rounding of the rates tried
    assert len(trials) <= 10 and len({t.rate_rps for t in trials}) == len(trials)


def test_a_guess_far_off_spends_the_budget_and_keeps_what_it_learned():
    cap = CapacitySpec(precision=0.1, max_measurements=8)
    trials = run_search(CapacitySearch(cap, 0.5), 812.0)
    assert len(trials) == 8 and CapacitySearch(cap, 0.5).bracket(trials) == (64.0, None)


def test_a_good_guess_needs_few_measurements_and_the_budget_is_a_hard_stop():
    cap = CapacitySpec(precision=0.1, max_measurements=8)
    assert len(run_search(CapacitySearch(cap, 10.0, 1.5), 11.0)) <= 5
    assert len(run_search(CapacitySearch(CapacitySpec(max_measurements=3), 1.0), 1000.0)) == 3


def test_search_is_deterministic_and_rates_are_stable_numbers():
    cap = CapacitySpec()
    a = run_search(CapacitySearch(cap, 1.2345), 7.77)
    b = run_search(CapacitySearch(cap, 1.2345), 7.77)
    assert a == b and all(t.rate_rps == round_rate(t.rate_rps) for t in a)
    assert round_rate(1.23456) == 1.23 and round_rate(12345.6) == 12300.0


def test_failure_with_an_idle_engine_stops_going_down():
    """A rate that misses the SLO with under half a request in flight (the engine all but idle) ends the search:
    a lower rate cannot help."""
    s = CapacitySearch(CapacitySpec(), 1.0)
    assert s.next_rate([trial(1.0, False, in_flight=0.3)]) is None
    assert s.next_rate([trial(1.0, False, in_flight=3.0)]) == 0.5
    assert s.next_rate([trial(0.02, False, in_flight=3.0)]) == 0.01
    assert CapacitySearch(CapacitySpec(min_rps=0.015), 1.0).next_rate([trial(0.02, False)]) is None


def test_noise_below_a_pass_does_not_move_the_bracket():
    s = CapacitySearch(CapacitySpec(), 1.0)
    assert s.bracket([trial(2.0, True), trial(1.5, False), trial(4.0, False)]) == (2.0, 4.0)


def test_rate_point_has_enough_arrivals_for_the_window_and_the_slo():
    spec = parse_spec({**SPEC, "capacity": {"duration_s": 10, "warmup_s": 2, "min_requests": 20}})
    p = rate_point(spec, 5.0)
    assert p.mode == LoadMode.POISSON and p.rate_rps == 5.0 and p.warmup_s == 2
    assert p.num_requests == 1 + math.ceil(10 + 3 * math.sqrt(10)) + 50  # warm-up with its margin, then 10 s
    low = rate_point(spec, 0.1)  # 1.2 arrivals in 12 s: the SLO's p90 needs 10, the spec asks 20 measured
    assert low.num_requests == 20 + 1 + math.ceil(0.2 + 3 * math.sqrt(0.2)) and low.min_requests == 20
    for rate in (0.05, 0.2, 1.0, 3.0):  # the warm-up never eats into the samples the SLO needs
        pt = rate_point(spec, rate)
        for seed in range(200):
            sched = arrival_schedule(pt.mode, rate, pt.num_requests, seed)
            assert sum(t >= pt.warmup_s for t in sched) >= pt.min_requests, (rate, seed)
    p99 = rate_point(parse_spec({**SPEC, "slo": {"ttft_p99_ms": 100}}), 1.0)
    assert p99.num_requests >= 100 + 2 and p99.min_requests == 100
    gamma = parse_spec({**SPEC, "load": {**SPEC["load"], "mode": "gamma", "rate_rps": [1.0], "burstiness": 0.5}})
    assert rate_point(gamma, 3.0).mode == LoadMode.GAMMA and rate_point(gamma, 3.0).burstiness == 0.5


def test_capacity_points_are_new_run_ids_and_the_ladder_ids_do_not_change():
    """An SLO and capacity block change no planned run id: they judge, they do not change what is measured."""
    without = {k: v for k, v in SPEC.items() if k != "slo"}
    a = [p.run_id for p in expand(parse_spec(without), get_gpu("cpu"))]
    b = [p.run_id for p in expand(parse_spec({**SPEC, "capacity": {"precision": 0.2}}), get_gpu("cpu"))]
    assert a == b


def test_spec_errors_for_capacity():
    with pytest.raises(SpecError, match="capacity.enabled: a capacity search needs an slo"):
        parse_spec({**{k: v for k, v in SPEC.items() if k != "slo"}, "capacity": {"enabled": True}})
    with pytest.raises(SpecError, match="min_rps 5 must be below max_rps 1"):
        parse_spec({**SPEC, "capacity": {"min_rps": 5, "max_rps": 1}})
    with pytest.raises(SpecError, match="slo.ttft_p99_ms: Input should be greater than 0"):
        parse_spec({**SPEC, "slo": {"ttft_p99_ms": -1}})
    with pytest.raises(SpecError, match="slo.ttft_p98_ms: Extra inputs are not permitted"):
        parse_spec({**SPEC, "slo": {"ttft_p98_ms": 1}})
    assert parse_spec(SPEC).capacity_on()
    assert not parse_spec({**SPEC, "capacity": {"enabled": False}}).capacity_on()
    assert not parse_spec({**SPEC, "slo": {}}).capacity_on()


# --------------------------------------------------------------------------------------------- store/frontier
def point_result(spec, rate, status="ok", tok_s=100.0, e2e=100.0, acc=0.5, lo=0.4, hi=0.6, server_i=0):
    from atlas.cost import cost_of
    from atlas.quality import QualityResult

    cfg = [p for p in expand(spec, get_gpu("cpu"))][server_i * 2].config
    cfg = cfg.model_copy(update={"load": rate_point(spec, rate)})
    recs = [rec(i, i / rate, 0.05, e2e / 1000 / 8, 8) for i in range(30)]
    m = summarize_load(open_run(recs, rate)).model_copy(update={"output_tok_s": tok_s})
    q = QualityResult(n=100, correct=round(acc * 100), accuracy=acc, ci_low=lo, ci_high=hi, sets={},
                      degenerate_fraction=0.0, unextracted_fraction=0.0, evaluated_on="x")
    return RunResult(run_id=cfg.run_id(), sweep=spec.name, status=status, label=cfg.label(), config=cfg, metrics=m,
                     cost=cost_of("cpu", m), quality=q)


def capacity_of(spec, point, cap_rps, status="ok"):
    from atlas.capacity import cost_at_capacity
    from atlas.capacity_run import capacity_record

    rec_ = capacity_record(spec, point.config, status, [] if status == "ok" else ["meets the SLO at no rate"])
    if status == "ok":
        rec_ = rec_.model_copy(update=cost_at_capacity(cap_rps, point.metrics, 0.085))
    return rec_.model_copy(update={
                                   "capacity_rps": cap_rps if status == "ok" else None,
                                   "point_run_id": point.run_id if status == "ok" else None,
                                   "usd_per_hour": 0.085, "trials": [trial(cap_rps, True)]})


def test_store_keeps_a_found_capacity_and_loads_apart_from_points(tmp_path):
    spec = parse_spec(SPEC)
    p = point_result(spec, 2.0)
    store = ResultStore(tmp_path, "cap")
    store.write(p)
    good = capacity_of(spec, p, 2.0)
    store.write_capacity(good)
    failed = good.model_copy(update={"status": "failed", "capacity_rps": None, "reasons": ["engine died"]})
    assert store.write_capacity(failed) == good  # a failed search never replaces a found capacity
    better = good.model_copy(update={"capacity_rps": 2.5})
    store.write_capacity(better)
    assert store.get_capacity(good.server_key).capacity_rps == 2.5
    assert len(list((tmp_path / "cap" / "history").glob("*.capacity.json"))) == 1
    results, errors = load_results(tmp_path)
    assert [r.run_id for r in results] == [p.run_id] and errors == []
    caps, errors = load_capacities(tmp_path)
    assert [c.capacity_rps for c in caps] == [2.5] and errors == []
    store.capacity_path("bad").write_text("{not json")
    assert "corrupted capacity record" in load_capacities(tmp_path)[1][0]


def test_frontier_at_capacity_one_row_per_config_and_quality_ties_inside_intervals():
    """Two configs: B is cheaper at capacity but its accuracy (0.45) is inside A's interval: a tie on quality,
    so A (dearer, 'more accurate' by noise) is dominated. A third never meets the SLO: kept out with its reason."""
    spec = parse_spec({**SPEC, "grid": {"engine": "mock", "itl_ms": [10, 20, 30]}})
    a = point_result(spec, 2.0, tok_s=100, acc=0.55, lo=0.45, hi=0.65, server_i=0)
    b = point_result(spec, 4.0, tok_s=200, acc=0.45, lo=0.35, hi=0.55, server_i=1)
    c_point = point_result(spec, 1.0, server_i=2)
    caps = [capacity_of(spec, a, 2.0), capacity_of(spec, b, 4.0), capacity_of(spec, c_point, 1.0, "no_capacity")]
    frame = capacity_frame(caps, [a, b], traffic_rps=10)
    assert len(frame) == 3 and list(frame["replicas"][:2]) == [5, 3]
    assert list(frame["usd_per_hour_total"][:2]) == pytest.approx([5 * 0.085, 3 * 0.085])
    objs = [o for o in default_objectives() if o.metric != "e2e_p90_ms"]
    fr = compute_frontier(frame, objs)
    assert list(fr["on_frontier"]) == [False, True, False]
    assert "no_capacity" in fr["excluded_reason"].iloc[2]
    strict = compute_frontier(frame, objs, robust=False)
    assert list(strict["on_frontier"]) == [True, True, False]  # without intervals, noise made A a choice
    best = best_at_capacity(fr, objs, traffic_rps=10)
    assert best[0]["label"] == b.config.server.label() and best[0]["replicas"] == 3


def test_trial_and_ladder_guess_read_the_slo():
    spec = parse_spec(SPEC)
    ok = point_result(spec, 2.0)
    t = trial_of(ok, spec)
    assert t.passed and t.rate_rps == 2.0 and t.in_flight == pytest.approx(2.0 * ok.metrics.value("e2e_p50_ms") / 1e3)
    slow = point_result(spec, 2.0, e2e=2000)
    assert not trial_of(slow, spec).passed and "TPOT p50" in trial_of(slow, spec).why[0]
    sat = ok.model_copy(update={"status": "invalid", "reasons": ["oversaturated: ..."]})
    assert trial_of(sat, spec).why[0].startswith("invalid: oversaturated")
    assert ladder_guess(spec, [ok])[1] == 1.5
    assert ladder_guess(spec, [slow])[1] == 2.0 and ladder_guess(spec, [slow])[0] == pytest.approx(
        slow.metrics.requests_s / 2)
    assert ladder_guess(spec, []) is None


# ------------------------------------------------------------------------------------------------ extension
def test_extension_only_for_a_point_that_ran_short():
    pt = LoadPoint(concurrency=4, min_duration_s=2.0, min_requests=8)
    short = summarize_load(LoadRun(point=pt, records=[rec(i, i * 0.05, 0.01, 0.01, 5) for i in range(10)],
                                   started_at_unix=0, wall_s=1, offered_rate_rps=None, drain_s=0.5))
    assert not short.valid and short.invalid_reasons[0].startswith("too short")
    f = extension_factor([short], pt, 4.0)
    assert f == pytest.approx(min(4.0, 2.0 / short.duration_s * 1.25))
    assert extension_factor([short], pt, 1.0) is None
    errors = short.model_copy(update={"invalid_reasons": ["too short: ...", "error rate 30% > 5%"]})
    assert extension_factor([errors], pt, 4.0) is None


# ------------------------------------------------------------------------------------------------ energy
class FakeNvml:
    """pynvml's energy functions: a counter in mJ per GPU that rises 300 W (0.3 J per ms) while read."""

    def __init__(self, gpus=2, supported=True, clock=None):
        self.gpus, self.supported, self.clock = gpus, supported, clock

    def nvmlInit(self): ...
    def nvmlShutdown(self): ...
    def nvmlDeviceGetCount(self): return self.gpus
    def nvmlDeviceGetHandleByIndex(self, i): return i

    def nvmlDeviceGetTotalEnergyConsumption(self, h):
        if not self.supported:
            raise RuntimeError("NVML_ERROR_NOT_SUPPORTED")
        return 1_000_000 + 300_000 * self.clock()


def test_energy_per_token_from_a_fake_nvml_counter():
    now = [1000.0]
    meter = NvmlEnergy(FakeNvml(gpus=2, clock=lambda: now[0]))
    samples = []
    for t in [1000.0 + 0.5 * k for k in range(25)]:
        now[0] = t
        samples.append((t, meter.read_j()))
    # 2 GPUs x 300 W over the window [1000 + 0, 1000 + 9.9 s] (10 requests x 5 tokens, all inside it)
    run = open_run([rec(i, i * 1.0, 0.05, 0.01, 5) for i in range(10)])
    e = energy_of(samples, [run], meter.source)
    window = 9.0 + 0.05 + 0.04
    assert e.joules == pytest.approx(600 * window) and e.j_per_output_token == pytest.approx(600 * window / 50)
    assert e.source == "NVML total energy counter, 2 GPUs"
    assert joules_between(samples, 1001.25, 1002.0) == pytest.approx(600 * 0.75)
    assert joules_between(samples, 999.0, 1002.0) is None
    assert energy_of(samples[:3], [run], "x").reason == "energy samples do not cover the steady window"


def test_no_energy_counter_is_null_with_the_reason_never_zero():
    meter, why = energy_meter(is_cpu=True)
    assert meter is None and "a CPU sweep" in why
    meter, why = energy_meter(is_cpu=False, nvml=FakeNvml(supported=False, clock=lambda: 0.0))
    assert meter is None and "NVML_ERROR_NOT_SUPPORTED" in why
    meter, why = energy_meter(is_cpu=False, nvml=FakeNvml(gpus=0, clock=lambda: 0.0))
    assert meter is None and "sees no GPU" in why
    e = EnergyResult(reason=why)
    assert e.j_per_output_token is None and e.joules is None
    assert math.isfinite(CapacityResult.model_fields["capacity_rps"].default or 0.0)


def test_search_capacity_stops_at_the_floor_and_says_so():
    """Driven by a stand-in measure: every rate misses the TPOT target with the engine busy (2 in flight)."""
    from atlas.capacity_run import search_capacity

    spec = parse_spec({**SPEC, "capacity": {"min_rps": 0.5, "start_rps": 1.0}})
    cfg = expand(spec, get_gpu("cpu"))[0].config
    seen = []

    def measure(planned):
        rate = planned.config.load.rate_rps
        seen.append(rate)
        r = point_result(spec, rate, e2e=4000.0 * 2 / rate)
        return r.model_copy(update={"run_id": planned.run_id, "config": planned.config})

    record, points = search_capacity(spec, cfg, [], measure)
    assert seen == [1.0, 0.5] and len(points) == 2 and record.status == "no_capacity"
    assert "TPOT p50" in record.reasons[0] and "already at 0.5 rps" in record.reasons[0]
    assert record.reasons[0].endswith("(lower rates are not searched: capacity.min_rps is 0.5)")
    assert record.guess_from == "the spec's start rate" and [t.rate_rps for t in record.trials] == [1.0, 0.5]


def test_cost_at_capacity_follows_the_capacity_not_the_window():
    """Serving at 2 req/s of 8 output tokens on a $0.085/h machine: 16 tok/s, whatever the point's window drew."""
    from atlas.capacity import cost_at_capacity

    spec = parse_spec(SPEC)
    p = point_result(spec, 2.0, tok_s=11.0)  # a window that happened to see fewer arrivals
    c = cost_at_capacity(2.0, p.metrics, 0.085)
    assert c["usd_per_m_output_tokens"] == pytest.approx(0.085 / (2.0 * 8 * 3600) * 1e6)
    assert c["usd_per_m_total_tokens"] == pytest.approx(0.085 / (2.0 * (8 + 10) * 3600) * 1e6)
    assert cost_at_capacity(2.0, p.metrics, None)["usd_per_m_output_tokens"] is None


CLIENT_BOUND = ("client-bound: send lateness p99 90 ms > 10", "load client fell behind")
HOST_BUSY = ("host busy: other programs used 0.60 of 2 cores while 0.00 sat idle: 25% of the CPU time",
             "other programs took the engine's CPU time")


@pytest.mark.parametrize(("verdict", "other"), [(CLIENT_BOUND, HOST_BUSY), (HOST_BUSY, CLIENT_BOUND)],
                         ids=["client-bound", "host-busy"])
def test_a_transient_rate_is_measured_again_and_said_when_it_bounds_the_capacity(verdict, other):
    """A client-bound point says nothing of the server, nor does one where another program took the host's CPUs:
    the rate is measured once more; a rate given that verdict both times counts as a miss and the record says
    the client (or the other programs) may set that bound."""
    from atlas.capacity_run import search_capacity

    spec = parse_spec({**SPEC, "capacity": {"start_rps": 1.0}})
    cfg = expand(spec, get_gpu("cpu"))[0].config
    seen = []
    stalls = {1.0: 1, 2.0: 9}  # 1 rps: once then fine; 2 rps and above: every time

    def measure(planned):
        rate = planned.config.load.rate_rps
        seen.append(rate)
        r = point_result(spec, rate).model_copy(update={"run_id": planned.run_id, "config": planned.config})
        left = stalls.get(rate, 9 if rate > 2.0 else 0)
        if left:
            stalls[rate] = left - 1
            return r.model_copy(update={"status": "invalid", "reasons": [verdict[0]]})
        return r

    record, points = search_capacity(spec, cfg, [], measure)
    assert seen[:2] == [1.0, 1.0] and points[0].status == "ok"  # each such rate measured twice
    assert seen.count(2.0) == 2
    assert record.status == "ok" and record.capacity_rps is not None and record.capacity_rps < 2.0
    assert record.upper_rps == 2.0 and any(verdict[1] in n for n in record.reasons)
    assert not any(other[1] in n for n in record.reasons)
