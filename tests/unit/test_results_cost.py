import json

import pytest

from atlas.config import parse_spec
from atlas.cost import usd_per_million
from atlas.hardware import get_gpu
from atlas.plan import expand
from atlas.results import ResultError, ResultStore, RunResult, load_result_file, load_results


def _result(status="ok"):
    spec = parse_spec({"name": "t", "model": {"id": "m", "source": "embedded"}})
    item = expand(spec, get_gpu("cpu"))[0]
    return RunResult(run_id=item.run_id, sweep="t", status=status, label="x", config=item.config)


def test_write_is_atomic_and_round_trips(tmp_path):
    store = ResultStore(tmp_path, "t")
    r = _result()
    store.write(r, records=[{"index": 0, "status": "ok"}])
    back = store.get(r.run_id)
    assert back is not None and back.config == r.config and back.records_file
    assert store.read_records(back) == [{"index": 0, "status": "ok"}]
    assert not [p for p in store.dir.iterdir() if p.name.startswith(".")]  # no temp files left


def test_corrupted_file_is_an_error_not_a_crash(tmp_path):
    store = ResultStore(tmp_path, "t")
    good = _result()
    store.write(good)
    (store.dir / "broken.json").write_text('{"schema_version": 1, "run_id": ')
    (store.dir / "future.json").write_text(json.dumps({**json.loads(good.model_dump_json()), "schema_version": 99}))
    results, errors = load_results(tmp_path)
    assert [r.run_id for r in results] == [good.run_id]
    assert any("broken.json: corrupted result file" in e for e in errors)
    assert any("schema_version 99 is not supported" in e for e in errors)
    with pytest.raises(ResultError):
        load_result_file(store.dir / "broken.json")


def test_resume_keeps_only_finished_matching_results(tmp_path):
    store = ResultStore(tmp_path, "t")
    ok, failed = _result("ok"), _result("failed")
    store.write(ok)
    assert store.is_complete(ok.run_id, ok.config)
    store.write(failed)
    assert not store.is_complete(failed.run_id, failed.config)
    (store.path(ok.run_id)).write_text("garbage")
    assert not store.is_complete(ok.run_id, ok.config)


def test_cost_per_million():
    assert usd_per_million(3.6, 1000.0) == pytest.approx(1.0)
    assert usd_per_million(3.6, 0.0) is None and usd_per_million(3.6, None) is None
