"""Search strategies replayed on the recorded embedded-default sweep (real measurements, no engine): the
space, grid/random/optuna orders, the budget, numerics excluded after one refusal, simulator seeding, and
the study's storage, conflicts and dead-worker retry (on SQLite: same RDB code path as PostgreSQL)."""

import time
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from atlas.frontier import DEFAULT_OBJECTIVES, Objective
from atlas.hardware import get_gpu
from atlas.plan import PlannedRun, expand
from atlas.results import load_results
from atlas.search import SearchError
from atlas.search.driver import Worker, baseline_keys
from atlas.search.replay import ReplayMeasurer, hypervolume_fraction, recording_spec
from atlas.search.settings import SearchSettings
from atlas.search.space import SearchSpace
from atlas.search.study import create_study, join_study

REPO = Path(__file__).resolve().parents[2]
SPEC = recording_spec(REPO / "benchmarks/data/cpu-smollm2", REPO / "configs/cpu-smollm2.yaml")
RECORDED, _ = load_results(REPO / "benchmarks/data/cpu-smollm2")
SPACE = SearchSpace([i for i in expand(SPEC, get_gpu("cpu")) if isinstance(i, PlannedRun)])


def search(settings, storage=None, name=None, progress=None):
    handle = create_study(SPEC, "cpu", settings, storage, name)
    m = ReplayMeasurer(RECORDED)
    stopped = Worker(handle, SPACE, m, progress=progress).run()
    return m, stopped, handle


def labels(m):
    return [m.by_id[i].label for i in m.measured]


def test_space_maps_params_to_points_and_back():
    assert len(SPACE) == 36 and SPACE.knobs == ["dtype", "kv_cache_dtype", "max_num_seqs", "load"]
    for i in (0, 17, 35):
        assert SPACE.index_of(SPACE.params(i)) == i
    assert SPACE.index_of({**SPACE.params(0), "load": "c=3"}) is None
    # a proposal outside the grid goes to the free point differing in fewest knobs, nearest value first
    p = {**SPACE.params(0), "load": "c=3"}
    near = SPACE.nearest(p, range(len(SPACE)))
    assert {k: v for k, v in SPACE.params(near).items() if k != "load"} == {k: v for k, v in p.items() if k != "load"}
    assert SPACE.nearest(SPACE.params(5), [1, 2, 5]) == 5


def test_grid_budget_measures_the_first_points_in_sweep_order():
    m, stopped, _ = search(SearchSettings(strategy="grid", budget=9))
    assert len(m.measured) == 9 and "budget reached" in stopped
    assert labels(m)[:3] == ["float32 w:none kv:auto seqs:16 | c=1", "float32 w:none kv:auto seqs:16 | c=4",
                             "float32 w:none kv:auto seqs:16 | c=16"]  # the baseline first, as a full sweep


def test_full_grid_skips_numerics_the_engine_refused():
    m, stopped, _ = search(SearchSettings(strategy="grid"))
    fp8 = [lab for lab in labels(m) if "kv:fp8" in lab]
    # one refused start per dtype with fp8 KV (the engine's reason), the other 8 points of each never measured
    assert len(fp8) == 2 and len(m.measured) == 18 + 2 and "every point" in stopped


def test_random_is_seeded():
    a, b, c = (labels(search(SearchSettings(strategy="random", budget=9, seed=s))[0]) for s in (1, 1, 2))
    assert a == b and a != c and len(a) == 9


def test_optuna_measures_the_baseline_first_and_finds_the_frontier():
    notes = []
    m, stopped, handle = search(SearchSettings(strategy="optuna", budget=9), progress=notes.append)
    got = labels(m)
    assert got[0].startswith("float32 w:none kv:auto") and len(got) == 9
    assert notes[0].startswith("[baseline]") and any(n.startswith("[simulator]") for n in notes)
    assert sum("kv:fp8" in lab for lab in got) <= 2  # each refused numerics costs one start, no more
    hv = hypervolume_fraction([m.by_id[i] for i in m.measured], list(m.by_id.values()), list(DEFAULT_OBJECTIVES))
    assert hv >= 0.95, hv
    # every trial carries its result; the told objectives are the frontier's
    done = [t for t in handle.study.get_trials() if t.state == TrialState.COMPLETE]
    assert all("result" in t.user_attrs and len(t.values) == 3 for t in done)


def test_optuna_without_simulator_uses_the_sampler_and_respects_the_budget():
    notes = []
    m, _, _ = search(SearchSettings(strategy="optuna", budget=12, simulator=False, sampler="nsga2"),
                     progress=notes.append)
    assert len(m.measured) == 12 and len(set(m.measured)) == 12
    assert any(n.startswith("[sampler]") for n in notes)


def test_hypervolume_fraction_of_everything_is_one():
    objs = [Objective(metric="usd_per_m_output", sense="min"), Objective(metric="e2e_p90_ms", sense="min")]
    assert hypervolume_fraction(RECORDED, RECORDED, objs) == pytest.approx(1.0)
    assert hypervolume_fraction([], RECORDED, objs) == 0.0


def test_baseline_is_the_most_precise_unquantized_numerics():
    assert baseline_keys(SPACE) == {"vllm": ("vllm", "float32", "none", "auto")}


def test_study_in_a_database_is_resumed_and_guarded(tmp_path):
    url = f"sqlite:///{tmp_path / 'study.db'}"
    s = SearchSettings(strategy="random", budget=5, seed=3)
    m1, _, _ = search(s, url, "t")
    assert len(m1.measured) == 5
    m2, stopped, _ = search(SearchSettings(strategy="random", budget=5, seed=3), url, "t")
    assert m2.measured == [] and "budget reached" in stopped  # the study remembers what it measured
    with pytest.raises(SearchError, match="already exists with another settings"):
        create_study(SPEC, "cpu", SearchSettings(strategy="grid"), url, "t")
    with pytest.raises(SearchError, match="no study 'nope'"):
        join_study(url, "nope")
    h = join_study(url, "t")
    assert h.spec == SPEC and h.settings == s and h.gpu == "cpu"
    with pytest.raises(SearchError, match="cannot open the study storage"):
        create_study(SPEC, "cpu", s, "postgresql://u:secret@127.0.0.1:1/x", "t")
    try:
        create_study(SPEC, "cpu", s, "postgresql://u:secret@127.0.0.1:1/x", "t")
    except SearchError as e:
        assert "secret" not in str(e) and "\n" not in str(e)


def test_a_dead_workers_trial_is_retried(tmp_path):
    url = f"sqlite:///{tmp_path / 'study.db'}"
    handle = create_study(SPEC, "cpu", SearchSettings(strategy="grid", budget=3, poll_s=0.2), url, "d",
                          heartbeat_s=1, grace_s=2)
    # A worker that asked for the first point, beat once and died.
    first = SPACE.params(0)
    handle.study.enqueue_trial(first)
    dead = handle.study.ask(SPACE.distributions)
    dead.set_user_attr("worker", "dead-host:1")
    handle.storage.record_heartbeat(dead._trial_id)
    time.sleep(3.5)  # SQLite keeps heartbeat times to the second
    m = ReplayMeasurer(RECORDED)
    notes = []
    h2 = join_study(url, "d")
    Worker(h2, SPACE, m, progress=notes.append).run()
    states = {t.number: t.state for t in h2.study.get_trials()}
    assert states[dead.number] == TrialState.FAIL
    assert notes[0].startswith("[retry]") and m.measured[0] == SPACE.points[0].run_id and len(m.measured) == 3
    retried = [t for t in h2.study.get_trials() if t.system_attrs.get("failed_trial") == dead.number]
    assert retried and "result" in retried[0].user_attrs


def test_bad_storage_url_is_one_line():
    with pytest.raises(SearchError, match="expected a database URL"):
        create_study(SPEC, "cpu", SearchSettings(), "localhost:5432", "x")


@pytest.fixture(autouse=True)
def _quiet():
    optuna.logging.set_verbosity(optuna.logging.ERROR)


def test_an_interrupted_measurement_frees_its_point():
    class Interrupted(ReplayMeasurer):
        def measure(self, planned):
            raise KeyboardInterrupt

    handle = create_study(SPEC, "cpu", SearchSettings(strategy="grid", budget=2))
    with pytest.raises(KeyboardInterrupt):
        Worker(handle, SPACE, Interrupted(RECORDED)).run()
    assert [t.state for t in handle.study.get_trials()] == [TrialState.FAIL]
    m = ReplayMeasurer(RECORDED)
    Worker(handle, SPACE, m).run()  # the next run measures that point first, without waiting for a heartbeat
    assert len(m.measured) == 2 and m.by_id[m.measured[0]].label.endswith("seqs:16 | c=1")


def test_workers_plan_with_the_vllm_the_study_was_made_with(tmp_path):
    from atlas.engines.vllm.caps import VllmCaps

    url = f"sqlite:///{tmp_path / 'study.db'}"
    caps = {"vllm": VllmCaps("vllm==0.32.0", calculate_kv_scales=False).to_json()}
    create_study(SPEC, "cpu", SearchSettings(), url, "v", caps=caps)
    assert join_study(url, "v").caps == caps  # a worker on another host expands the same points
    assert create_study(SPEC, "cpu", SearchSettings(), url, "v", caps=caps).caps == caps  # rerun: joins it
    with pytest.raises(SearchError, match="already exists with another caps"):
        create_study(SPEC, "cpu", SearchSettings(), url, "v", caps={"vllm": VllmCaps("vllm==0.11.0", True).to_json()})
    create_study(SPEC, "cpu", SearchSettings(), url, "none")
    assert join_study(url, "none").caps is None


def test_a_study_made_before_caps_were_per_engine_still_plans_with_its_vllm():
    from atlas.search.study import _caps

    legacy = {"version": "vllm==0.11.0", "calculate_kv_scales": True}
    assert _caps({"atlas:vllm": legacy}) == {"vllm": legacy}
    assert _caps({"atlas:caps": {"vllm": legacy, "llamacpp": None}}) == {"vllm": legacy, "llamacpp": None}
    assert _caps({}) is None
