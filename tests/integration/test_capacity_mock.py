"""Capacity under an SLO, end to end through the real Sweeper against the mock engine (a real HTTP server in a
subprocess) whose service curve is known: every gap between tokens grows by `itl_per_running_ms` for each other
request in flight. With Poisson arrivals at rate L and Little's law (requests in flight = L x E2E),
    TPOT = (b + a L t0) / (1 - a L (n - 1)),   E2E = t0 + (n - 1) TPOT,
so a target TPOT <= T holds up to L* = (T - b) / (a (t0 + (n - 1) T)): with t0 = 20 ms, b = 10 ms, a = 2 ms,
n = 16 tokens and T = 30 ms, L* = 21.3 req/s."""

import os
from pathlib import Path

import pytest

from atlas.config import parse_spec
from atlas.hardware import get_gpu
from atlas.results import load_capacities, load_results
from atlas.sweep import Sweeper

T0, B, A, N, T = 20.0, 10.0, 2.0, 16, 30.0
TRUE_CAPACITY = (T - B) / (A * (T0 + (N - 1) * T)) * 1000.0  # req/s

SPEC = {"name": "capacity-mock", "engine": "mock", "gpu": "cpu", "model": {"id": "mock", "source": "embedded"},
        "grid": {"engine": "mock", "ttft_ms": [T0], "itl_ms": [B], "itl_per_running_ms": [A]},
        "load": {"concurrency": [2], "num_requests": 16, "warmup_requests": 1, "prompt_tokens": 16,
                 "output_tokens": N, "min_requests": 8, "min_duration_s": 0.2, "repeats": 1},
        "quality": {"enabled": False},
        "slo": {"tpot_p50_ms": T},
        "capacity": {"duration_s": 3.0, "warmup_s": 1.0, "precision": 0.1, "max_measurements": 8}}


def sweep(tmp_path: Path, spec: dict, resume: bool = False, progress=None):  # type: ignore[no-untyped-def]
    return Sweeper(parse_spec(spec), get_gpu("cpu"), tmp_path / "results", resume=resume,
                   progress=progress or (lambda e: None)).run()


@pytest.fixture(scope="module")
def searched(tmp_path_factory):  # type: ignore[no-untyped-def]
    tmp = tmp_path_factory.mktemp("capacity")
    return tmp, sweep(tmp, SPEC)


def test_capacity_of_a_known_service_curve_is_found_within_the_precision(searched):
    tmp_path, report = searched
    [cap] = report.capacities
    assert cap.status == "ok", cap.reasons
    assert len(cap.trials) <= SPEC["capacity"]["max_measurements"]
    # the stated precision, plus 5% for the mean-field formula (it ignores the spread of requests in flight)
    assert abs(cap.capacity_rps - TRUE_CAPACITY) / TRUE_CAPACITY <= 0.10 + 0.05, (cap.capacity_rps, TRUE_CAPACITY)
    assert cap.upper_rps is not None and (cap.upper_rps - cap.capacity_rps) / cap.upper_rps <= 0.1 + 0.01
    # every rate tried is a recorded point with raw records; the one at capacity meets the SLO
    results, errors = load_results(tmp_path / "results")
    by_id = {r.run_id: r for r in results}
    assert not errors and {t.run_id for t in cap.trials} <= set(by_id)
    at = by_id[cap.point_run_id]
    assert at.records_file and at.config.load.rate_rps == cap.capacity_rps and at.status == "ok"
    assert at.metrics.value("tpot_p50_ms") <= T and cap.latency_ms["tpot_p50_ms"] == at.metrics.value("tpot_p50_ms")
    assert cap.goodput is not None and cap.goodput.attainment is not None and cap.goodput.attainment >= 0.5
    # priced at the capacity rate (capacity x tokens per request), not at the window's realized throughput
    assert cap.usd_per_m_output_tokens == pytest.approx(
        at.cost.usd_per_hour / (cap.capacity_rps * at.metrics.mean_output_tokens * 3600) * 1e6)
    assert cap.energy is not None and cap.energy.j_per_output_token is None and "CPU" in cap.energy.reason
    assert cap.guess_from and "within the SLO" in cap.guess_from  # the ladder's c=2 point gave the first guess


def test_a_config_that_never_meets_the_slo_is_recorded_with_the_reason(tmp_path):
    spec = {**SPEC, "grid": {"engine": "mock", "ttft_ms": [400.0], "itl_ms": [5.0]}, "slo": {"ttft_p90_ms": 200}}
    report = sweep(tmp_path, spec)
    [cap] = report.capacities
    assert cap.status == "no_capacity" and cap.capacity_rps is None
    assert cap.reasons[0].startswith("meets the SLO at no rate: TTFT p90 4")
    assert "ms > 200 ms already at" in cap.reasons[0] and "requests in flight" in cap.reasons[0]
    assert len(cap.trials) <= 3  # the engine was all but idle at the first rate that failed


def test_resume_in_the_middle_of_a_capacity_search_measures_nothing_twice(tmp_path):
    """Interrupted after two capacity rates; --resume replays the search from the stored points (same rates,
    nothing measured again) and finishes it."""
    measured: list[str] = []

    def interrupt(e):  # type: ignore[no-untyped-def]
        if e.kind == "note" and e.message.startswith("measuring") and "rps" in e.message:
            measured.append(e.message)
            if len(measured) == 3:
                raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        sweep(tmp_path, SPEC, progress=interrupt)
    assert load_capacities(tmp_path / "results")[0] == []
    stored = {p.name: p.stat().st_mtime_ns for p in (tmp_path / "results" / "capacity-mock").glob("*.json")}
    assert len(stored) == 3  # the ladder point and the first two rates

    again: list[str] = []
    report = sweep(tmp_path, SPEC, resume=True,
                   progress=lambda e: again.append(e.message) if e.kind == "note" and "measuring" in e.message else None)
    [cap] = report.capacities
    assert cap.status == "ok" and abs(cap.capacity_rps - TRUE_CAPACITY) / TRUE_CAPACITY <= 0.15
    assert not any(m in again for m in measured[:2]) and measured[2] in again  # the third rate runs now
    for name, mtime in stored.items():  # nothing measured before the interruption was rewritten
        assert (tmp_path / "results" / "capacity-mock" / name).stat().st_mtime_ns == mtime
    assert not (tmp_path / "results" / "capacity-mock" / "history").exists()
    # a second resume finds the search finished: no engine starts, no point is measured
    third: list[tuple[str, str]] = []
    sweep(tmp_path, SPEC, resume=True, progress=lambda e: third.append((e.kind, e.message)))
    notes = [m for k, m in third if k == "note" and not m.startswith("hardware probe:")]  # the probe is every run's
    assert not notes and load_capacities(tmp_path / "results")[0][0] == cap


def test_frontier_and_report_compare_configurations_at_capacity(searched, tmp_path, artifacts):
    from typer.testing import CliRunner

    from atlas.cli import app

    results, _ = searched
    runner = CliRunner()
    out = runner.invoke(app, ["frontier", str(results / "results"), "--out", str(tmp_path / "site"),
                              "--traffic-rps", "50"])
    assert out.exit_code == 0, out.output
    text = " ".join(out.output.split())
    assert "configurations at capacity under TPOT p50 <= 30 ms" in text and "replicas" in text
    index = tmp_path / "site" / "capacity-mock" / "index.html"
    [page] = list((tmp_path / "site" / "capacity-mock" / "servers").glob("*.html"))
    html = index.read_text()
    assert "Best configuration for 50 req/s under the SLO" in html and "Configurations at SLO capacity" in html
    assert "tie on quality" in html and "Rates measured, in order" in page.read_text()
    per_load = runner.invoke(app, ["frontier", str(results / "results"), "--out", str(tmp_path / "pl"), "--per-load"])
    assert per_load.exit_code == 0 and "points (per load level)" in " ".join(per_load.output.split())
    assert "Configurations at SLO capacity" not in (tmp_path / "pl" / "capacity-mock" / "index.html").read_text()

    from tests.integration.test_report_browser import CHROMIUM, DRIVER, _browser, render

    if not (CHROMIUM and DRIVER):
        if os.environ.get("CI"):
            pytest.fail("chromium and chromium-driver must be installed in CI (.ci/run installs them)")
        pytest.skip("needs Debian's chromium and chromium-driver")
    driver = _browser()
    try:
        for url, name in ((index, "report-capacity.png"), (page, "report-capacity-server.png")):
            assert render(driver, url) >= 2
            driver.save_screenshot(str(artifacts / name))
            severe = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
            assert not severe, severe
        assert driver.find_elements("css selector", "table tr.s-ok")  # the rates that met the SLO
    finally:
        driver.quit()


def test_a_point_too_short_is_extended_not_left_invalid(tmp_path):
    """A fast config at a closed-loop level finishes its 12 requests in ~0.15 s, under min_duration_s 0.4 s:
    measured again with more requests (recorded), it is valid (the llama.cpp default lost every slots:4 | c=4
    point, its fastest configs, to 'measured window < 2 s')."""
    spec = {**SPEC, "grid": {"engine": "mock", "ttft_ms": [5.0], "itl_ms": [5.0]}, "slo": None,
            "load": {**SPEC["load"], "concurrency": [4], "num_requests": 12, "output_tokens": 8,
                     "min_duration_s": 0.4, "min_requests": 4}}
    [r] = sweep(tmp_path, spec).results
    assert r.status == "ok", r.reasons
    assert r.extended is not None and r.extended.from_requests == 12 and 12 < r.extended.to_requests <= 48
    assert r.extended.reason.startswith("too short: measured window")
    assert r.metrics.duration_s >= 0.4 and any(w.startswith("extended from 12 to") for w in r.metrics.warnings)
    assert r.metrics.n_total == r.extended.to_requests + 1  # the warm-up request too
    assert r.config.load.num_requests == 12  # the run id is the planned point's
