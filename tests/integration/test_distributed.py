"""A search shared by workers in separate processes through a real PostgreSQL server (Debian's package,
started by scripts/start_postgres.sh from .ci/run and scripts/test.sh): two workers split one study, a
killed worker's point is retried by another, and `atlas collect` merges every result into one atlas."""

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from optuna.trial import TrialState
from typer.testing import CliRunner

from atlas.cli import app
from atlas.config import parse_spec
from atlas.frontier import DEFAULT_OBJECTIVES, compute_frontier
from atlas.results import load_results
from atlas.search.settings import SearchSettings
from atlas.search.study import create_study, join_study
from atlas.table import results_frame

REPO = Path(__file__).resolve().parents[2]
SPEC = parse_spec({
    "name": "dist", "gpu": "cpu",
    "model": {"id": "mock", "source": "path", "path": "/unused"},
    "grid": {"dtype": ["float32"], "quantization": ["none", "fp8"], "kv_cache_dtype": ["auto", "fp8"],
             "max_num_seqs": [4, 8]},
    "load": {"concurrency": [1, 2], "num_requests": 12, "warmup_requests": 1, "output_tokens": 8,
             "min_requests": 4, "min_duration_s": 0.05, "repeats": 1},
    "quality": {"sets": ["arith", "mc"], "max_items_per_set": 8, "max_tokens": 16},  # p90 needs >= 10 samples
})


@pytest.fixture
def pg_url():
    url = os.environ.get("ATLAS_TEST_POSTGRES_URL")
    if not url:
        if os.environ.get("CI"):
            pytest.fail("ATLAS_TEST_POSTGRES_URL is not set in CI: .ci/run did not start PostgreSQL")
        pytest.skip("no PostgreSQL (run: export ATLAS_TEST_POSTGRES_URL=$(bash scripts/start_postgres.sh))")
    return url


def start_worker(url, study, results, pids, *extra):
    return subprocess.Popen([sys.executable, "-m", "tests.integration.search_worker", url, study, str(results),
                             str(pids), *extra], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)


def kill_pids(pids: Path):
    for line in pids.read_text().split() if pids.exists() else []:
        try:
            os.killpg(int(line), signal.SIGKILL)
        except ProcessLookupError:
            pass


def measured_trials(url, name):
    return [t for t in join_study(url, name).study.get_trials() if "result" in t.user_attrs]


@pytest.mark.timeout(300)
def test_two_workers_share_one_study_and_collect_merges_them(pg_url, tmp_path):
    name = f"dist-{uuid.uuid4().hex[:8]}"
    create_study(SPEC, "cpu", SearchSettings(strategy="grid", poll_s=0.3), pg_url, name)
    pids = tmp_path / "pids"
    workers = [start_worker(pg_url, name, tmp_path / f"host{k}", pids) for k in range(2)]
    try:
        outs = [w.communicate(timeout=240)[0] for w in workers]
    finally:
        for w in workers:
            w.kill()
        kill_pids(pids)
    for w, out in zip(workers, outs, strict=True):
        assert w.returncode == 0, out
        assert "DONE every point" in out, out
    trials = measured_trials(pg_url, name)
    run_ids = [t.user_attrs["run_id"] for t in trials]
    assert len(run_ids) == len(set(run_ids)), "a point was measured twice"
    by_worker = {t.user_attrs["worker"] for t in trials}
    assert len(by_worker) == 2, by_worker  # both hosts did work
    # 16 points: the two numerics with naive FP8 KV cache fail the quality gate on their first point(s);
    # their other points are never measured
    statuses = [t.user_attrs["status"] for t in trials]
    assert statuses.count("ok") == 8 and 2 <= statuses.count("quality_failed") <= 4
    # each host holds only its own points; collect puts all of them in one folder
    merged = tmp_path / "merged"
    r = CliRunner().invoke(app, ["collect", "--storage", pg_url, "--study", name, "--results", str(merged)])
    assert r.exit_code == 0, r.output
    results, errors = load_results(merged / "dist")
    assert not errors and len(results) == 16
    assert sum(x.status == "skipped" and "not measured: its numerics failed the quality gate" in x.reasons[0]
               for x in results) == 16 - len(trials)
    fr = compute_frontier(results_frame(results), DEFAULT_OBJECTIVES)
    assert fr["on_frontier"].any()
    assert not fr[fr["kv_cache_dtype"] == "fp8"]["on_frontier"].any()  # fast garbage is never a win
    r = CliRunner().invoke(app, ["frontier", str(merged), "--out", str(tmp_path / "reports")])
    assert r.exit_code == 0, r.output


@pytest.mark.timeout(300)
def test_a_killed_workers_point_is_retried_by_another(pg_url, tmp_path):
    name = f"dead-{uuid.uuid4().hex[:8]}"
    create_study(SPEC, "cpu", SearchSettings(strategy="grid", budget=6, poll_s=0.3), pg_url, name,
                 heartbeat_s=1, grace_s=3)
    pids = tmp_path / "pids"
    slow = start_worker(pg_url, name, tmp_path / "a", pids, "slow")
    try:
        study = join_study(pg_url, name).study
        deadline = time.monotonic() + 60
        running = []
        while time.monotonic() < deadline and not (running and pids.exists()):
            running = [t for t in study.get_trials() if t.state == TrialState.RUNNING and "worker" in t.user_attrs]
            time.sleep(0.2)
        assert running, "the slow worker never started a point"
        time.sleep(0.5)
        slow.kill()  # SIGKILL: no goodbye, its trial stays RUNNING and its heartbeat stops
        slow.wait()
        kill_pids(pids)
        victim = running[0]
        fresh = start_worker(pg_url, name, tmp_path / "b", pids)
        out = fresh.communicate(timeout=240)[0]
    finally:
        for p in (slow, locals().get("fresh")):
            if p is not None:
                p.kill()
        kill_pids(pids)
    assert fresh.returncode == 0, out
    assert "[retry] measuring" in out, out
    trials = join_study(pg_url, name).study.get_trials()
    assert next(t for t in trials if t.number == victim.number).state == TrialState.FAIL
    retried = [t for t in trials if t.system_attrs.get("failed_trial") == victim.number]
    assert retried and "result" in retried[-1].user_attrs and retried[-1].user_attrs["origin"] == "retry"
    assert sum("result" in t.user_attrs for t in trials) == 6  # the budget, the retried point included
