"""The load client's collector is off for its run and put back after (atlas.client_gc), in the process that sends
alone and in a spawned client's loop; garbage made meanwhile is collected once there is enough of it."""

import gc
import threading
import time
import weakref
from multiprocessing import Pipe

import pytest

import atlas.client_gc as client_gc
import atlas.loadgen as loadgen
from atlas.client_gc import quiet_gc, relieve
from atlas.config import LoadPoint
from atlas.engines.procs import free_port
from atlas.knobs import LoadMode
from atlas.loadgen import run_load, run_sync


class Cycle:
    def __init__(self) -> None:
        self.me = self


def cyclic_garbage(n: int) -> list[weakref.ref]:  # type: ignore[type-arg]
    refs = []
    for _ in range(n):
        c = Cycle()
        refs.append(weakref.ref(c))
    return refs


@pytest.fixture
def gc_state():
    was = gc.isenabled()
    yield
    gc.unfreeze()
    (gc.enable if was else gc.disable)()


def test_quiet_gc_freezes_and_stops_the_collector_then_puts_it_back(gc_state):
    gc.enable()
    with quiet_gc():
        assert not gc.isenabled() and gc.get_freeze_count() > 0
    assert gc.isenabled() and gc.get_freeze_count() == 0
    with pytest.raises(RuntimeError), quiet_gc():
        raise RuntimeError("the run failed")
    assert gc.isenabled() and gc.get_freeze_count() == 0
    gc.disable()  # a caller that had turned it off keeps it off
    with quiet_gc():
        pass
    assert not gc.isenabled()


def test_relieve_collects_only_past_the_limit_and_only_while_quiet(gc_state, monkeypatch):
    monkeypatch.setattr(client_gc, "CHECK_LIMIT", 5_000)
    with quiet_gc():
        few = cyclic_garbage(100)
        assert relieve() == 0 and all(r() is not None for r in few)  # under the limit: nothing runs
        many = cyclic_garbage(6_000)
        assert relieve() >= 6_000
        assert all(r() is None for r in few + many)
        assert gc.get_count()[0] < 5_000 and relieve() == 0
    gc.enable()
    monkeypatch.setattr(client_gc, "CHECK_LIMIT", 0)
    assert relieve() == 0  # the automatic collector is on: never ours to run


def _point(n: int) -> LoadPoint:
    return LoadPoint(mode=LoadMode.POISSON, rate_rps=500.0, num_requests=n, min_requests=4, min_duration_s=0.0,
                     repeats=1, output_tokens=4, request_timeout_s=5.0)


def test_a_run_sends_with_the_collector_off_and_relieves_as_each_request_ends(gc_state, monkeypatch):
    seen = []
    monkeypatch.setattr(loadgen, "relieve", lambda: seen.append((gc.isenabled(), gc.get_freeze_count() > 0)) or 0)
    gc.enable()
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens: every request is refused at once
    run = run_sync(run_load(url, "m", _point(12), procs=1))
    assert {r.status for r in run.records} == {"connection_error"}
    assert seen == [(False, True)] * 12
    assert gc.isenabled() and gc.get_freeze_count() == 0


def test_a_spawned_clients_loop_runs_with_the_collector_off(gc_state, monkeypatch):
    """_client_process driven through its pipe in a thread of this process (the collector is process-wide)."""
    from atlas.loadgen import schedule
    from atlas.loadgen_procs import _client_process

    seen = []
    monkeypatch.setattr(loadgen, "relieve", lambda: seen.append(gc.isenabled()) or 0)
    gc.enable()
    point = _point(6)
    job = schedule(point, loadgen.fixed_plan(loadgen.make_prompts(6, point.prompt_tokens, 0), point))
    parent, child = Pipe()
    t = threading.Thread(target=_client_process, args=(child,))
    t.start()
    parent.send((f"http://127.0.0.1:{free_port()}", "m", point, job.partition(1)[0], False, None))
    assert parent.recv() == ("ready", None)
    assert not gc.isenabled()  # off from before "ready" (its collection is not in the run)
    parent.send(time.perf_counter())
    kind, done = parent.recv()
    t.join(10)
    assert kind == "done" and len(done.records) == 6 and seen == [False] * 6
    assert gc.isenabled() and gc.get_freeze_count() == 0
