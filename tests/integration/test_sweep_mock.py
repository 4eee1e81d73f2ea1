"""Whole sweeps through the real Sweeper, ResultStore, frontier and report, with mock engines that are real
HTTP servers in subprocesses: quality gating, engine failures, resume."""

import sys
from pathlib import Path

import pytest

from atlas.config import parse_spec
from atlas.engines.mock.engine import MockEngine, free_port
from atlas.engines.mock.server import MockOptions
from atlas.engines.process import ProcessEngine
from atlas.frontier import compute_frontier
from atlas.hardware import get_gpu
from atlas.report.site import DEFAULT_OBJECTIVES, build_site
from atlas.results import load_results
from atlas.sweep import Sweeper
from atlas.table import results_frame

SPEC = {
    "name": "mock-sweep", "gpu": "cpu",
    "model": {"id": "mock", "source": "path", "path": "/unused"},
    "grid": {"dtype": ["float32"], "quantization": ["none", "fp8"], "kv_cache_dtype": ["auto", "fp8"],
             "max_num_seqs": [8]},
    "load": {"concurrency": [1, 4], "num_requests": 16, "warmup_requests": 1, "output_tokens": 8,
             "min_requests": 4, "min_duration_s": 0.05, "repeats": 2},
    "quality": {"sets": ["arith", "mc"], "max_tokens": 32},
}


def behaviour(server):
    """Baseline: 80% right. FP8 weights: 5 points worse, a bit faster. Naive FP8 KV: fast garbage."""
    if server.kv_cache_dtype == "fp8":
        return MockOptions(ttft_ms=5, itl_ms=2, answers="garbage")
    if server.quantization == "fp8":
        return MockOptions(ttft_ms=8, itl_ms=6, degrade=0.25)
    return MockOptions(ttft_ms=10, itl_ms=10, degrade=0.20)


class Factory:
    def __init__(self, fn):
        self.fn, self.started = fn, 0

    def __call__(self, spec, gpu, cfg, model_path, log_path):
        self.started += 1
        return self.fn(cfg.server, log_path)


def mock_factory():
    return Factory(lambda server, log: MockEngine(behaviour(server), log))


def run(tmp_path, factory, spec=SPEC, resume=False):
    events = []
    s = parse_spec(spec)
    report = Sweeper(s, get_gpu("cpu"), tmp_path / "results", resume=resume, engine_factory=factory,
                     progress=events.append).run()
    return report, events


def test_garbage_is_gated_out_and_degraded_is_kept(tmp_path):
    report, events = run(tmp_path, mock_factory())
    by = {(r.config.server.quantization.value, r.config.server.kv_cache_dtype.value, r.config.load.concurrency): r
          for r in report.results}
    assert len(report.results) == 8 and events[-1].done == 8
    base = by[("none", "auto", 4)]
    assert base.status == "ok" and base.quality.accuracy == pytest.approx(0.8, abs=0.06)
    fp8w = by[("fp8", "auto", 4)]
    assert fp8w.status == "ok" and fp8w.quality.gate_passed
    assert fp8w.quality.comparison.accuracy_delta == pytest.approx(-0.05, abs=0.04)
    garbage = by[("none", "fp8", 4)]
    assert garbage.status == "quality_failed" and any("degenerate" in r for r in garbage.reasons)
    assert garbage.metrics.output_tok_s > base.metrics.output_tok_s  # it *is* faster...
    fr = compute_frontier(results_frame(report.results), DEFAULT_OBJECTIVES).set_index("run_id")
    assert not fr.loc[garbage.run_id, "eligible"] and not fr.loc[garbage.run_id, "on_frontier"]  # ...never a win
    assert fr.loc[fp8w.run_id, "eligible"]
    assert len(base.repeats) == 2 and base.repeat_stats["output_tok_s"].n == 2
    assert base.records_file and (report.results_dir / base.records_file).exists()
    assert base.provenance.atlas_version and base.cost.usd_per_m_output_tokens > 0


def test_resume_skips_finished_points_and_remeasures_corrupted(tmp_path):
    first, _ = run(tmp_path, mock_factory())
    victim = first.results[0]
    (first.results_dir / f"{victim.run_id}.json").write_text("{ truncated")
    f = mock_factory()
    second, _ = run(tmp_path, f, resume=True)
    assert f.started == 1  # only the server whose point was corrupted starts again
    assert {r.run_id for r in second.results} == {r.run_id for r in first.results}
    results, errors = load_results(tmp_path / "results")
    assert not errors and len(results) == 8


def failing_engine(server, log: Path):
    argv = [sys.executable, "-c", "import sys; print('ValueError: max_num_seqs 8 is not allowed here'); sys.exit(1)"]
    return ProcessEngine(argv, served_name="x", host="127.0.0.1", port=free_port(), log_path=log,
                         startup_timeout_s=20)


def test_engine_that_will_not_start_fails_its_points_and_the_sweep_goes_on(tmp_path):
    calls = []

    def make(server, log):
        calls.append(server)
        return failing_engine(server, log) if server.kv_cache_dtype == "fp8" else \
            MockEngine(behaviour(server), log)

    spec = {**SPEC, "grid": {**SPEC["grid"], "quantization": ["none"]}}
    report, _ = run(tmp_path, Factory(make), spec)
    failed = [r for r in report.results if r.status == "failed"]
    assert len(failed) == 2 and all("ValueError: max_num_seqs 8 is not allowed here" in r.reasons[0] for r in failed)
    assert failed[0].log_tail
    assert [r.status for r in report.results if r.status != "failed"] == ["ok", "ok"]


def test_engine_crash_mid_sweep_is_recorded(tmp_path):
    spec = {**SPEC, "grid": {**SPEC["grid"], "quantization": ["none"], "kv_cache_dtype": ["auto"]},
            "quality": {"enabled": False}, "load": {**SPEC["load"], "repeats": 1}}
    f = Factory(lambda server, log: MockEngine(MockOptions(ttft_ms=5, itl_ms=2, die_after_requests=25), log))
    report, _ = run(tmp_path, f, spec)
    statuses = [r.status for r in report.results]
    assert statuses[-1] == "failed"
    assert any("injected crash" in r for r in report.results[-1].reasons)


def test_report_site_escapes_hostile_model_output(tmp_path):
    spec = {**SPEC, "grid": {**SPEC["grid"], "quantization": ["none"], "kv_cache_dtype": ["auto"]}}
    f = Factory(lambda server, log: MockEngine(MockOptions(ttft_ms=5, itl_ms=2, answers="hostile"), log))
    report, _ = run(tmp_path, f, spec)
    index = build_site(report.results, tmp_path / "site", title="t")
    pages = [index.read_text()] + [p.read_text() for p in (tmp_path / "site" / "configs").glob("*.html")]
    joined = "\n".join(pages)
    assert "window.__atlas_pwned" in joined  # the output is shown...
    assert "<script>window.__atlas_pwned" not in joined  # ...as text only
    assert "&lt;/script&gt;&lt;script&gt;" in joined
    assert (tmp_path / "site" / "assets" / "plotly.min.js").stat().st_size > 1_000_000


def test_calibrated_kv_is_served_from_the_checkpoint_with_scales_and_never_without(tmp_path):
    """fp8_calibrated serves model.kv_scales' checkpoint (recorded in provenance); a checkpoint that carries no
    scales fails that point with the reason (vLLM would have run FP8 with scale 1.0), and the rest go on."""
    import json

    good, bad = tmp_path / "kvq", tmp_path / "plain-awq"
    for folder, qc in ((good, {"kv_cache_scheme": {"num_bits": 8, "type": "float", "strategy": "tensor",
                                                   "dynamic": False}}), (bad, {"quant_method": "awq"})):
        folder.mkdir()
        (folder / "config.json").write_text(json.dumps({"quantization_config": qc}))
    spec = {**SPEC, "model": {**SPEC["model"], "kv_scales": {"none": str(good), "fp8": str(bad)}},
            "grid": {**SPEC["grid"], "kv_cache_dtype": ["auto", "fp8_calibrated"]}}
    served = {}

    def make(spec_, gpu, cfg, model_path, log_path):
        s = cfg.server
        served[(s.quantization.value, s.kv_cache_dtype.value)] = model_path
        return MockEngine(behaviour(s), log_path)

    report, _ = run(tmp_path, make, spec)
    by = {(r.config.server.quantization.value, r.config.server.kv_cache_dtype.value): r for r in report.results}
    assert served[("none", "fp8_calibrated")] == str(good) and served[("none", "auto")] == "/unused"
    ok = by[("none", "fp8_calibrated")]
    assert ok.status == "ok" and ok.provenance.model_files["kv_cache_scheme"]["type"] == "float"
    failed = by[("fp8", "fp8_calibrated")]
    assert failed.status == "failed" and "carries no KV-cache scales" in failed.reasons[0]
    assert ("fp8", "fp8_calibrated") not in served  # no engine was started for it
    assert by[("fp8", "auto")].status == "ok"


def test_prefix_cache_reset_is_retried_and_a_failed_one_is_said(tmp_path):
    """vLLM answers {"success": false} while blocks are held: Atlas retries, and a point measured with prefix
    caching on whose cache could not be emptied carries a warning (its TTFT may be flattered)."""
    eng = MockEngine(MockOptions(reset_busy=2), tmp_path / "m.log")
    with eng:
        assert eng.reset_prefix_cache(wait_s=0.01)  # third try succeeds
    spec = {**SPEC, "grid": {**SPEC["grid"], "quantization": ["none"], "kv_cache_dtype": ["auto"],
                             "enable_prefix_caching": [True]}, "load": {**SPEC["load"], "repeats": 1}}
    report, _ = run(tmp_path, Factory(lambda server, log: MockEngine(MockOptions(reset_busy=10**6), log)), spec)
    assert report.results and all(any("prefix cache could not be reset" in w for w in r.metrics.warnings)
                                  for r in report.results)


def test_resume_after_an_engine_that_will_not_start_keeps_every_measured_point(tmp_path):
    """A later run whose engine fails (at start-up or mid-group) never overwrites what was measured."""
    first, _ = run(tmp_path, mock_factory())
    assert all(r.status in ("ok", "quality_failed") for r in first.results)
    before = {r.run_id: (r.status, r.metrics.output_tok_s) for r in first.results}
    for resume in (True, False):
        second, events = run(tmp_path, Factory(failing_engine), resume=resume)
        after = {r.run_id: (r.status, r.metrics.output_tok_s if r.metrics else None) for r in second.results}
        assert after == before
        stored, errors = load_results(tmp_path / "results")
        assert not errors and {r.run_id: (r.status, r.metrics.output_tok_s) for r in stored} == before
    assert any("kept the earlier measurement" in e.message for e in events)


def test_secrets_in_engine_arguments_and_environment_are_never_written(tmp_path):
    secret, env_secret = "sk-live-canary-1234", "hf_canary_secret_5678"
    spec = {**SPEC, "grid": {**SPEC["grid"], "quantization": ["none"], "kv_cache_dtype": ["auto"]},
            "extra_engine_args": ["--api-key", secret], "engine_env": {"HF_TOKEN": env_secret},
            "load": {**SPEC["load"], "repeats": 1}, "quality": {"enabled": False}}

    def make(spec_, gpu, cfg, model_path, log_path):
        # an engine whose argv carries the spec's arguments and whose log prints them, as vLLM's does
        argv = lambda p: [sys.executable, "-c", f"print('args: {secret} {env_secret}', flush=True); "  # noqa: E731
                          "import sys, runpy; sys.argv = ['m'] + sys.argv[1:]; "
                          "runpy.run_module('atlas.engines.mock.server', run_name='__main__')",
                          "--port", str(p), *spec_.extra_engine_args]
        return ProcessEngine(argv, served_name="mock", host="127.0.0.1", port=None, log_path=log_path,
                             env=spec_.engine_env)

    spec["extra_engine_args"] = ["--api-key", secret]
    report, _ = run(tmp_path, make, spec)
    assert report.results
    written = [p for p in (tmp_path / "results").rglob("*") if p.is_file()]
    assert any(p.name == "sweep-spec.yaml" for p in written) and any(p.suffix == ".log" for p in written)
    for p in written:
        data = p.read_bytes()
        assert secret.encode() not in data and env_secret.encode() not in data, p
    site = build_site(report.results, tmp_path / "site", title="t")
    for p in site.parent.rglob("*.html"):
        assert secret not in p.read_text()


def test_prompts_are_exact_in_the_served_tokenizer_and_requests_count_like_tokens(tmp_path):
    spec = {**SPEC, "grid": {**SPEC["grid"], "quantization": ["none"], "kv_cache_dtype": ["auto"]},
            "load": {**SPEC["load"], "concurrency": [16], "num_requests": 64, "prompt_tokens": 64,
                     "output_tokens": 16, "repeats": 1}, "quality": {"enabled": False}}
    report, _ = run(tmp_path, mock_factory(), spec)
    (r,) = report.results
    assert r.status == "ok", r.reasons
    assert r.metrics.mean_prompt_tokens == 64  # the mock counts a token per word, and says so on /tokenize
    assert not [w for w in r.metrics.warnings if "prompt" in w]
    # equal lengths: request throughput is exactly token throughput / tokens per request (docs/metrics.md)
    assert r.metrics.requests_s == pytest.approx(r.metrics.output_tok_s / 16, rel=1e-9)
    assert r.server_metrics["generation_tokens"] >= 64 * 16  # the engine's own counter saw the load


def test_a_point_measured_while_another_program_fills_the_cpus_is_invalid_with_the_figures(tmp_path):
    """Someone else's busy processes (their own session, not started by Atlas) on every core while the point
    runs: its latency carries their load, so the point is invalid as host-busy, with how much was taken."""
    import os
    import signal

    from tests.unit.test_host_check import _orphan

    spec = {**SPEC, "grid": {**SPEC["grid"], "quantization": ["none"], "kv_cache_dtype": ["auto"]},
            "quality": {"enabled": False}, "load": {**SPEC["load"], "concurrency": [4], "repeats": 1,
                                                    "num_requests": 40}}
    pids = []
    try:
        for k in range(os.cpu_count() or 1):
            _orphan(60, tmp_path / f"burner{k}")
            pids.append(tmp_path / f"burner{k}")
        report, _ = run(tmp_path, mock_factory(), spec)
    finally:
        for p in pids:
            while not p.exists():
                pass
            try:
                os.kill(int(p.read_text()), signal.SIGKILL)
            except (ProcessLookupError, ValueError):
                pass
    (r,) = report.results
    assert r.status == "invalid" and any(x.startswith("host busy: other programs used") for x in r.reasons), r.reasons
    assert r.host.others_cores > 0.5 and r.host.taken_share > 0.1
    # and on a quiet host the same point passes, its host check recorded
    quiet, _ = run(tmp_path / "quiet", mock_factory(), spec)
    assert quiet.results[0].status == "ok" and quiet.results[0].host.taken_share <= 0.1, quiet.results[0].reasons


@pytest.mark.parametrize("change", [{"extra_engine_args": ["--threads", "1"]}, {"engine_env": {"OMP_NUM_THREADS": "1"}},
                                    {"quality": {"sets": ["arith"], "max_tokens": 32}}],
                         ids=["extra_engine_args", "engine_env", "quality"])
def test_resume_measures_again_what_was_measured_under_other_settings(tmp_path, change):
    """The engine's extra arguments and environment, and the quality evaluation, are not in the run id yet set
    what is measured or its verdict: a point measured under others is measured again on --resume (the earlier one
    kept in history/), never kept as this spec's; a resume under the same settings starts nothing."""
    spec = {**SPEC, "grid": {**SPEC["grid"], "quantization": ["none"], "kv_cache_dtype": ["auto"]},
            "load": {**SPEC["load"], "repeats": 1}}
    first, _ = run(tmp_path, mock_factory(), spec)
    assert all(r.provenance.settings == parse_spec(spec).measurement_settings() for r in first.results)
    same = mock_factory()
    run(tmp_path, same, spec, resume=True)
    assert same.started == 0
    other = mock_factory()
    changed = {**spec, **change}
    second, _ = run(tmp_path, other, changed, resume=True)
    assert other.started == 1 and {r.run_id for r in second.results} == {r.run_id for r in first.results}
    assert all(r.provenance.settings == parse_spec(changed).measurement_settings() for r in second.results)
    assert all(r.provenance.settings != parse_spec(spec).measurement_settings() for r in second.results)
    history = sorted(p.name for p in (second.results_dir / "history").glob("*.json"))
    assert len(history) == len(first.results)
    again = mock_factory()
    run(tmp_path, again, changed, resume=True)
    assert again.started == 0
