import json

import pytest

from atlas.config import parse_spec
from atlas.cost import usd_per_million
from atlas.hardware import get_gpu
from atlas.plan import expand
from atlas.results import Provenance, ResultError, ResultStore, RunResult, load_result_file, load_results


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
    failed = _result("failed")
    store.write(failed)
    assert not store.is_complete(failed.run_id, failed.config)
    ok = _result("ok")
    store.write(ok)  # a measurement replaces a failure
    assert store.is_complete(ok.run_id, ok.config)
    (store.path(ok.run_id)).write_text("garbage")
    assert not store.is_complete(ok.run_id, ok.config)


def test_resume_keeps_only_what_was_measured_under_the_same_settings(tmp_path):
    store = ResultStore(tmp_path, "t")
    spec = parse_spec({"name": "t", "model": {"id": "m", "source": "embedded"},
                       "extra_engine_args": ["--threads", "1", "--api-key", "k3y-value"], "engine_env": {"HF_TOKEN": "x1234"}})
    settings = spec.measurement_settings()
    assert settings["extra_engine_args"] == ["--threads", "1", "--api-key", "***"]
    assert settings["engine_env"] == {"HF_TOKEN": "***"} and settings["quality"]["sets"] == ["arith", "mc"]
    prov = Provenance(atlas_version="t", model_id="m", host_cpu="c", python="3", started_at="now",
                      engine={"argv": ["--port", "1", "--threads", "1", "--api-key", "***"]}, settings=settings)
    r = store.write(_result().model_copy(update={"provenance": prov}))
    assert store.is_complete(r.run_id, r.config, settings) and store.is_complete(r.run_id, r.config)
    other = {**settings, "extra_engine_args": ["--threads", "2"]}
    assert not store.is_complete(r.run_id, r.config, other)
    assert not store.is_complete(r.run_id, r.config, {**settings, "engine_env": {}})
    stricter = spec.model_copy(update={"quality": spec.quality.model_copy(update={"max_items_per_set": 10})})
    assert not store.is_complete(r.run_id, r.config, stricter.measurement_settings())
    off = spec.model_copy(update={"quality": spec.quality.model_copy(update={"enabled": False})})
    off_other_sets = spec.model_copy(update={"quality": off.quality.model_copy(update={"sets": ["mc"]})})
    assert off.measurement_settings() == off_other_sets.measurement_settings()  # no evaluation: its sets do not matter
    # written before results recorded their settings: judged by the command line's tail (the extra arguments)
    legacy = prov.model_copy(update={"settings": None})
    store.write(r.model_copy(update={"provenance": legacy}))
    assert store.is_complete(r.run_id, r.config, settings)
    assert store.is_complete(r.run_id, r.config, stricter.measurement_settings())  # not recorded: taken as given
    assert not store.is_complete(r.run_id, r.config, other)


def test_a_measured_point_is_never_overwritten_by_a_later_failure(tmp_path):
    store = ResultStore(tmp_path, "t")
    ok = store.write(_result("ok"), records=[{"index": 0, "status": "ok"}])
    for status in ("failed", "skipped"):
        kept = store.write(_result(status))
        assert kept.status == "ok" and store.get(ok.run_id).status == "ok"
    # measured again: the new measurement is current, the earlier one (and its records) kept in history/
    again = store.write(_result("invalid"), records=[{"index": 0, "status": "timeout"}])
    assert store.get(ok.run_id).status == "invalid" and again.records_file
    hist = sorted(p.name for p in (store.dir / "history").iterdir())
    assert len(hist) == 2 and any(n.endswith(".records.jsonl.gz") for n in hist)
    results, errors = load_results(tmp_path)
    assert [r.status for r in results] == ["invalid"] and not errors  # history is not loaded as current


def test_unwritable_results_are_one_line_errors(tmp_path):
    (tmp_path / "file").write_text("")
    with pytest.raises(ResultError, match="cannot write results there"):
        ResultStore(tmp_path / "file", "t").check_writable()
    store = ResultStore(tmp_path / "ro", "t")
    store.check_writable()
    store.dir.chmod(0o500)
    try:
        import os
        if os.geteuid() != 0:  # root writes anywhere; the message is checked on a file in the way above
            with pytest.raises(ResultError, match="cannot write the result"):
                store.write(_result())
    finally:
        store.dir.chmod(0o700)


def test_result_files_with_paths_or_impossible_numbers_are_refused(tmp_path):
    store = ResultStore(tmp_path, "t")
    good = store.write(_result())
    data = json.loads(good.model_dump_json())
    bad = {
        "traversal.json": {**data, "run_id": "../../escape"},
        "sweep.json": {**data, "sweep": "../x"},
        "records.json": {**data, "records_file": "../../etc/passwd"},
    }
    for name, d in bad.items():
        (store.dir / name).write_text(json.dumps(d))
    metrics = {"n_total": 1, "n_measured": 1, "n_ok": 1, "errors": {}, "error_rate": 0.0, "duration_s": 1.0,
               "ttft_ms": None, "tpot_ms": None, "itl_ms": None, "e2e_ms": None, "queue_ms": None,
               "output_tok_s": 10.0, "input_tok_s": None, "requests_s": 1.0, "offered_rate_rps": None,
               "achieved_rate_rps": None, "mean_output_tokens": 10.0, "valid": True, "invalid_reasons": [],
               "warnings": []}
    (store.dir / "neg.json").write_text(json.dumps({**data, "run_id": "n1", "metrics": {**metrics, "output_tok_s": -5.0}}))
    (store.dir / "inf.json").write_text(json.dumps({**data, "run_id": "n2", "metrics": metrics,
                                                    "cost": {"usd_per_hour": 1.0, "price_source": "x",
                                                             "usd_per_m_output_tokens": float("inf"),
                                                             "usd_per_m_total_tokens": None}}))
    (store.dir / "nan.json").write_text(json.dumps({**data, "run_id": "n3", "metrics": {**metrics, "requests_s": float("nan")}}))
    results, errors = load_results(tmp_path)
    assert [r.run_id for r in results] == [good.run_id]
    joined = "\n".join(errors)
    for name in bad:
        assert f"{name}: invalid result" in joined
    assert "metrics.output_tok_s: -5.0 is negative" in joined
    assert "cost.usd_per_m_output_tokens: inf is not a finite number" in joined
    assert "metrics.requests_s: nan is not a finite number" in joined


def test_a_copied_result_file_is_counted_once(tmp_path):
    store = ResultStore(tmp_path, "t")
    good = store.write(_result())
    (store.dir / "copy of it.json").write_text(store.path(good.run_id).read_text())
    (store.dir / "zz.json").write_text(store.path(good.run_id).read_text())
    results, errors = load_results(tmp_path)
    assert len(results) == 1 and len(errors) == 2 and all("counted once" in e for e in errors)


def test_cost_per_million():
    assert usd_per_million(3.6, 1000.0) == pytest.approx(1.0)
    assert usd_per_million(3.6, 0.0) is None and usd_per_million(3.6, None) is None
