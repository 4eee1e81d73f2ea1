"""Results recorded before knobs were per engine (benchmarks/data: a flat `server`, llama.cpp rows carrying
vLLM's knobs at their defaults, specs listing every engine's knobs) still load, keep their run ids, resume
without measuring anything again, and replay."""

import shutil
from pathlib import Path

import pytest

from atlas.config import load_spec
from atlas.engines.base import EngineError
from atlas.hardware import get_gpu
from atlas.plan import expand
from atlas.results import DONE_STATUSES, load_capacities, load_results
from atlas.sweep import Sweeper

DATA = Path(__file__).resolve().parents[2] / "benchmarks" / "data"
RECORDINGS = sorted(p for p in DATA.iterdir() if (p / "sweep-spec.yaml").exists())


@pytest.mark.parametrize("folder", RECORDINGS, ids=lambda p: p.name)
def test_recorded_results_keep_their_run_ids_and_their_spec_plans_exactly_them(folder):
    results, errors = load_results(folder)
    assert results and not errors
    for r in results:
        assert r.config.run_id() == r.run_id == (folder / f"{r.run_id}.json").stem
        assert r.config.server.engine == r.config.engine
        assert r.config.server.label() in r.label
    spec = load_spec(folder / "sweep-spec.yaml")
    trials = {t.run_id for c in load_capacities(folder)[0] for t in c.trials}  # a capacity search's rates
    planned = {i.run_id for i in expand(spec, get_gpu("cpu"))}
    assert planned | trials == {r.run_id for r in results} and not planned & trials


@pytest.mark.parametrize("folder", RECORDINGS, ids=lambda p: p.name)
def test_a_recorded_sweep_resumes_without_measuring_a_finished_point_again(tmp_path, folder, monkeypatch):
    """Only points that failed are tried again (here an engine that refuses to start); every measured one
    is kept as it is, without an engine or a model being prepared for it."""
    copy = tmp_path / "results" / folder.name
    shutil.copytree(folder, copy)
    before, _ = load_results(folder)
    measured = {r.run_id for r in before if r.status in DONE_STATUSES}
    started = []

    def refusing(spec, gpu, cfg, model_path, log_path):
        started.append(cfg.run_id())
        raise EngineError("ValueError: not in this test", kind="refused")

    monkeypatch.setattr("atlas.serving.ModelResolver.resolve", lambda self, server: ("/unused", {}))
    spec = load_spec(folder / "sweep-spec.yaml")
    report = Sweeper(spec, get_gpu("cpu"), tmp_path / "results", resume=True, engine_factory=refusing).run()
    assert not measured & set(started)
    after = {r.run_id: r.status for r in report.results}
    trials = {t.run_id for c in load_capacities(folder)[0] for t in c.trials}
    assert {k: v for k, v in after.items() if k in measured} == {r.run_id: r.status for r in before
                                                                 if r.run_id in measured - trials}
    # capacity searches: each found again from its stored rates, none measured again, none lost
    stored = {c.server_key: (c.capacity_rps, [t.run_id for t in c.trials]) for c in load_capacities(folder)[0]}
    assert {c.server_key: (c.capacity_rps, [t.run_id for t in c.trials]) for c in report.capacities} == stored
    assert {r.run_id: r.status for r in load_results(copy)[0]} == {r.run_id: r.status for r in before}
