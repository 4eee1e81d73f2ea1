"""Atlas measures only the engine it started: a decoy server on the port is never measured, two sweeps at once
on one host both measure their own engines, and no engine process outlives Atlas however it ends."""

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from atlas.config import parse_spec
from atlas.engines import procs
from atlas.engines.base import EngineError
from atlas.engines.mock.engine import MockEngine, mock_argv
from atlas.engines.mock.server import MockOptions
from atlas.engines.process import ProcessEngine, stop_stale_launches
from atlas.hardware import get_gpu
from atlas.sweep import Sweeper

SPEC = {
    "name": "ident", "gpu": "cpu",
    "model": {"id": "mock", "source": "path", "path": "/unused"},
    "grid": {"dtype": ["float32"], "max_num_seqs": [4]},
    "load": {"concurrency": [2], "num_requests": 8, "warmup_requests": 1, "output_tokens": 8, "prompt_tokens": 32,
             "min_requests": 4, "min_duration_s": 0.05, "repeats": 1},
    "quality": {"enabled": False},
}
ENGINE_TTFT_MS = 60.0  # the engines Atlas starts; the decoy answers in 1 ms


@pytest.fixture
def decoy():
    """Another program's OpenAI-compatible server (the mock, started by hand: not Atlas's engine)."""
    started = []

    def start(port: int | None = None):
        port = port or procs.free_port()
        p = subprocess.Popen(mock_argv(MockOptions(ttft_ms=1, itl_ms=1, model="mock"), port),
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        started.append(p)
        deadline = time.monotonic() + 20
        while procs.listener_pids(port) == set() and time.monotonic() < deadline:
            time.sleep(0.1)
        return p, port

    yield start
    for p in started:
        p.kill()
        p.wait()


def sweep(tmp_path, spec, name="r"):
    def make(spec_, gpu, cfg, model_path, log_path):
        return MockEngine(MockOptions(ttft_ms=ENGINE_TTFT_MS, itl_ms=5), log_path, port=spec_.port)

    return Sweeper(parse_spec(spec), get_gpu("cpu"), tmp_path / name, engine_factory=make).run()


def test_two_sweeps_at_once_beside_a_decoy_on_the_old_default_port_measure_their_own_engines(tmp_path, decoy):
    # 8011: the port every spec used to share (a decoy there made a newcomer's first sweep record its numbers)
    decoy_proc, decoy_port = decoy(8011 if procs.bind_error("127.0.0.1", 8011) is None else None)
    reports = {}
    threads = [threading.Thread(target=lambda n=n: reports.__setitem__(n, sweep(tmp_path, SPEC, n)))
               for n in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    ports = set()
    for rep in reports.values():
        (r,) = rep.results
        assert r.status == "ok", r.reasons
        assert r.metrics.ttft_ms.p50.value >= ENGINE_TTFT_MS  # the engine's latency, not the decoy's 1 ms
        assert r.server_metrics  # read from the engine's own /metrics
        ports.add(r.provenance.engine["port"])
        assert r.provenance.engine["port_chosen_by"] == "atlas"
    assert len(ports) == 2 and decoy_port not in ports


def test_a_pinned_port_held_by_another_program_fails_the_point_naming_it(tmp_path, decoy):
    decoy_proc, port = decoy()
    rep = sweep(tmp_path, {**SPEC, "port": port})
    (r,) = rep.results
    assert r.status == "failed" and r.metrics is None
    assert f"port {port}" in r.reasons[0] and f"pid {decoy_proc.pid}" in r.reasons[0]


def test_a_decoy_that_binds_while_the_engine_loads_is_never_measured(tmp_path, decoy):
    """The seen failure: another server bound the port while vLLM was still loading."""
    port = procs.free_port()
    eng = MockEngine(MockOptions(startup_delay_s=3), tmp_path / "e.log", port=port)
    box = {}
    t = threading.Thread(target=lambda: box.setdefault("err", _start_error(eng)))
    t.start()
    time.sleep(0.5)
    decoy_proc, _ = decoy(port)
    t.join(60)
    err = box["err"]
    assert isinstance(err, EngineError) and err.kind == "port"
    assert f"pid {decoy_proc.pid}" in err.reason or "taken by another program" in err.reason
    assert not eng.alive()


def test_an_unpinned_port_taken_during_start_up_is_chosen_again(tmp_path, decoy):
    eng = MockEngine(MockOptions(startup_delay_s=2), tmp_path / "e.log")
    first = eng.port
    box = {}
    t = threading.Thread(target=lambda: box.setdefault("err", _start_error(eng)))
    t.start()
    time.sleep(0.5)
    decoy(first)
    t.join(60)
    try:
        assert box["err"] is None and eng.port != first and eng.verify() is None
    finally:
        eng.stop()


def _start_error(eng):
    try:
        eng.start()
    except EngineError as e:
        return e
    return None


def test_a_server_under_another_model_name_is_not_this_launch(tmp_path):
    argv = lambda p: mock_argv(MockOptions(model="someone-else"), p)  # noqa: E731
    eng = ProcessEngine(argv, served_name="mock@atlas-1234", host="127.0.0.1", port=None,
                        log_path=tmp_path / "e.log", startup_timeout_s=20)
    with pytest.raises(EngineError, match="serves \\['someone-else'\\], not this launch's"):
        eng.start()
    assert not eng.alive()


def test_verify_notices_when_the_engine_is_gone_and_a_decoy_took_the_port(tmp_path, decoy):
    eng = MockEngine(MockOptions(), tmp_path / "e.log")
    eng.start()
    try:
        assert eng.verify() is None
        os.kill(eng.proc.pid, signal.SIGKILL)
        eng.proc.wait()
        decoy(eng.port)
        assert "not running" in eng.verify()
    finally:
        eng.stop()


# -- no engine process outlives Atlas ---------------------------------------------------------------------
FORKING = ("import subprocess, sys, runpy; "
           "subprocess.Popen([sys.executable, '-c', 'import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
           "time.sleep(300)']); sys.argv = ['mock_server'] + sys.argv[1:]; runpy.run_module('atlas.engines.mock.server', "
           "run_name='__main__')")


def forking_engine(tmp_path):
    """A server whose leader spawns a worker that ignores SIGTERM, as vLLM's API server spawns EngineCore."""
    eng = ProcessEngine(lambda port: [sys.executable, "-c", FORKING, "--port", str(port)], served_name="mock",
                        host="127.0.0.1", port=None, log_path=tmp_path / "f.log", startup_timeout_s=20)
    eng.stop_grace_s = 2.0
    return eng


def test_stop_kills_the_workers_too_even_after_the_leader_was_reaped(tmp_path):
    eng = forking_engine(tmp_path)
    eng.start()
    token = eng.token
    assert len(procs.launch_pids(token)) == 2
    eng.proc.kill()  # the leader dies first and is reaped: its process group is no handle any more
    eng.proc.wait()
    eng.stop()
    assert procs.launch_pids(token) == set()


def test_an_interrupt_during_launch_leaves_no_process(tmp_path, monkeypatch):
    real = subprocess.Popen

    def popen_then_interrupt(*a, **kw):
        p = real(*a, **kw)
        if kw.get("env", {}).get(procs.LAUNCH_ENV):
            time.sleep(0.5)
            raise KeyboardInterrupt
        return p

    monkeypatch.setattr(subprocess, "Popen", popen_then_interrupt)
    eng = forking_engine(tmp_path)
    with pytest.raises(KeyboardInterrupt):
        eng.start()
    monkeypatch.undo()
    assert procs.launch_pids(eng.token) == set()


ATLAS_THEN_SIGKILL = """
import sys, json, time
from pathlib import Path
sys.path.insert(0, {repo!r})
from tests.integration.test_engine_identity import forking_engine
eng = forking_engine(Path({tmp!r}))
eng.start()
print(json.dumps({{"token": eng.token}}), flush=True)
time.sleep(300)
"""


def test_engines_are_stopped_when_atlas_itself_is_sigkilled(tmp_path):
    repo = str(Path(__file__).resolve().parents[2])
    atlas = subprocess.Popen([sys.executable, "-c", ATLAS_THEN_SIGKILL.format(repo=repo, tmp=str(tmp_path))],
                             stdout=subprocess.PIPE, text=True)
    token = json.loads(atlas.stdout.readline())["token"]
    assert len(procs.launch_pids(token)) == 2
    atlas.kill()
    atlas.wait()
    deadline = time.monotonic() + 20  # the guard sends SIGTERM, then SIGKILL to what ignores it (2 s)
    while procs.launch_pids(token) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert procs.launch_pids(token) == set()
    assert not list(tmp_path.glob("*.pid"))


def test_a_later_run_stops_a_stale_engine_from_its_pid_file(tmp_path):
    token = "feedfacecafe0001"
    stale = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"],
                             env={**os.environ, procs.LAUNCH_ENV: token}, start_new_session=True)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (tmp_path / "x.pid").write_text(json.dumps({"token": token, "atlas_pid": dead.pid, "atlas_started": 1,
                                                "program": "vllm"}))
    stopped = stop_stale_launches(tmp_path)
    stale.wait(5)
    assert stopped and str(stale.pid) in stopped[0] and not (tmp_path / "x.pid").exists()


MOCK_SPEC = """name: two-at-once
engine: mock
gpu: cpu
model: {id: mock-model, source: embedded}
grid: {quantization: [none, int4], ttft_ms: [60], itl_ms: [5], max_num_seqs: [4]}
load: {concurrency: [2], num_requests: 8, warmup_requests: 1, output_tokens: 8, prompt_tokens: 32,
       min_requests: 4, min_duration_s: 0.05, repeats: 1}
quality: {sets: [arith], max_items_per_set: 10, max_tokens: 16, perplexity: false}
"""


def test_two_atlas_sweep_commands_at_once_beside_a_decoy_both_measure_their_own_engines(tmp_path, decoy):
    """The real CLI, twice at once on one host (engine: mock needs no model), with a decoy on port 8011."""
    decoy(8011 if procs.bind_error("127.0.0.1", 8011) is None else None)
    spec = tmp_path / "spec.yaml"
    spec.write_text(MOCK_SPEC)
    runs = [subprocess.Popen([sys.executable, "-m", "atlas.cli", "sweep", str(spec), "--results", str(tmp_path / n)],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for n in ("a", "b")]
    outs = [p.communicate(timeout=300)[0] for p in runs]
    assert [p.returncode for p in runs] == [0, 0], outs
    from atlas.results import load_results

    for n in ("a", "b"):
        results, errors = load_results(tmp_path / n)
        assert len(results) == 2 and not errors
        for r in results:
            assert r.status == "ok" and r.metrics.ttft_ms.p50.value >= 0.8 * ENGINE_TTFT_MS, (r.label, r.reasons)
            assert r.provenance.engine["port_chosen_by"] == "atlas" and r.provenance.engine["port"] != 8011
