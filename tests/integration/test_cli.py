"""The thin CLI over the library: validate, schema, frontier/report over stored results, clear errors."""

import json

from typer.testing import CliRunner

from atlas.cli import app

runner = CliRunner()


def test_validate_reports_planned_and_skipped(tmp_path):
    p = tmp_path / "s.yaml"
    p.write_text("name: t\nmodel: {id: m, source: hub, path: org/m}\n"
                 "grid: {quantization: [none, awq], max_num_seqs: [8]}\nload: {concurrency: [1, 2]}\n")
    r = runner.invoke(app, ["validate", str(p), "--gpu", "h100"])
    assert r.exit_code == 0, r.output
    assert "4 points on h100 (2 planned, 2 skipped)" in r.output and "no AWQ checkpoint" in r.output


def test_bad_inputs_give_one_line_errors(tmp_path):
    p = tmp_path / "bad.yaml"
    p.write_text("name: t\nmodel: {id: m, source: embedded}\nbogus: 1\n")
    r = runner.invoke(app, ["validate", str(p)])
    assert r.exit_code == 2 and "bogus" in r.output and "Traceback" not in r.output
    r = runner.invoke(app, ["sweep", str(p), "--gpu", "h900"])
    assert r.exit_code == 2 and "bogus" in r.output
    good = tmp_path / "good.yaml"
    good.write_text("name: t\nmodel: {id: m, source: embedded}\n")
    r = runner.invoke(app, ["sweep", str(good), "--gpu", "h900"])
    assert r.exit_code == 2 and "unknown GPU 'h900'" in r.output
    r = runner.invoke(app, ["sweep", str(good), "--gpu", "h100"])
    assert r.exit_code == 2 and "h100" in r.output and "NVIDIA" in r.output
    r = runner.invoke(app, ["frontier", str(tmp_path / "none")])
    assert r.exit_code == 2 and "no such results folder" in r.output


def test_schema_prints_json():
    r = runner.invoke(app, ["schema", "sweep"])
    assert r.exit_code == 0 and "grid" in json.loads(r.output)["properties"]
    r = runner.invoke(app, ["schema", "result"])
    assert r.exit_code == 0 and "status" in json.loads(r.output)["properties"]


def test_frontier_builds_report_and_survives_a_corrupted_file(tmp_path):
    from atlas.config import parse_spec
    from atlas.hardware import get_gpu
    from atlas.sweep import Sweeper
    from tests.integration.test_sweep_mock import SPEC, mock_factory

    spec = {**SPEC, "grid": {**SPEC["grid"], "quantization": ["none"]}, "load": {**SPEC["load"], "repeats": 1}}
    Sweeper(parse_spec(spec), get_gpu("cpu"), tmp_path / "results", engine_factory=mock_factory()).run()
    (tmp_path / "results" / "mock-sweep" / "zz.json").write_text("not json")
    r = runner.invoke(app, ["frontier", str(tmp_path / "results"), "--out", str(tmp_path / "reports"),
                            "--slo", "ttft_p50_ms<=1000"])
    assert r.exit_code == 0, r.output
    assert "zz.json: corrupted result file" in r.output and "Pareto frontier" in r.output
    index = tmp_path / "reports" / "mock-sweep" / "index.html"
    html = index.read_text()
    assert "could not be read" in html and "quality_failed" in html
    assert (tmp_path / "reports" / "mock-sweep" / "gpu-cpu.html").exists()
    assert len(list((tmp_path / "reports" / "mock-sweep" / "configs").glob("*.html"))) == 4


def test_fit_then_simulate_writes_labelled_predictions(tmp_path):
    from atlas.config import parse_spec
    from atlas.hardware import get_gpu
    from atlas.results import load_results
    from atlas.sweep import Sweeper
    from tests.integration.test_sweep_mock import SPEC, mock_factory

    model = {**SPEC["model"], "params_b": 0.135, "num_layers": 30, "num_kv_heads": 3, "head_dim": 64}
    spec = {**SPEC, "model": model, "grid": {**SPEC["grid"], "quantization": ["none"], "kv_cache_dtype": ["auto"],
                                              "max_num_seqs": [2, 8]},
            "load": {**SPEC["load"], "repeats": 1}, "quality": {"enabled": False}}
    Sweeper(parse_spec(spec), get_gpu("cpu"), tmp_path / "results", engine_factory=mock_factory()).run()
    r = runner.invoke(app, ["fit", str(tmp_path / "results"), "--name", "m", "--out", str(tmp_path / "sim")])
    assert r.exit_code == 0, r.output
    assert (tmp_path / "sim" / "m.json").exists() and "leave-one-config-out" in r.output
    bigger = tmp_path / "bigger.yaml"
    import yaml

    bigger.write_text(yaml.safe_dump({**spec, "grid": {**spec["grid"], "max_num_seqs": [2, 4, 8]}}))
    # --no-probe: this host probed again seconds later can differ by more than the drift tolerance on a busy
    # shared machine, which flags the predictions as from another machine (tests/unit/test_simulator_engines.py)
    r = runner.invoke(app, ["simulate", "--spec", str(bigger), "--gpu", "cpu", "--artifact",
                            str(tmp_path / "sim" / "m.json"), "--results", str(tmp_path / "results"), "--no-probe"])
    assert r.exit_code == 0, r.output
    assert "2 points predicted for cpu" in r.output  # max_num_seqs=4 at both load levels; the rest was measured
    results, errors = load_results(tmp_path / "results")
    sims = [x for x in results if x.source == "simulated"]
    assert not errors and len(sims) == 2
    assert all(not s.simulation.extrapolated for s in sims), [s.simulation.extrapolation_reasons for s in sims]
    r = runner.invoke(app, ["simulate", "--spec", str(bigger), "--gpu", "cpu", "--artifact",
                            str(tmp_path / "nope.json")])
    assert r.exit_code == 2 and "cannot read calibration artifact" in r.output


GOOD = "name: t\nmodel: {id: m, source: embedded}\n"


def _spec(tmp_path, text, name="s.yaml"):
    p = tmp_path / name
    p.write_text(text) if isinstance(text, str) else p.write_bytes(text)
    return str(p)


def test_the_specs_gpu_is_used_unless_gpu_is_given(tmp_path):
    r = runner.invoke(app, ["sweep", _spec(tmp_path, GOOD + "gpu: h900\n"), "--results", str(tmp_path / "r")])
    assert r.exit_code == 2 and "s.yaml: gpu: unknown GPU 'h900'" in r.output
    r = runner.invoke(app, ["validate", _spec(tmp_path, GOOD + "gpu: h900\n")])
    assert r.exit_code == 2 and "gpu: unknown GPU 'h900'" in r.output
    # gpu: h100 in the spec is what runs (and is refused here, where no H100 is present), not the cpu default
    r = runner.invoke(app, ["sweep", _spec(tmp_path, GOOD + "gpu: h100\n"), "--results", str(tmp_path / "r")])
    assert r.exit_code == 2 and "--gpu h100" in r.output and "NVIDIA" in r.output
    r = runner.invoke(app, ["sweep", _spec(tmp_path, GOOD + "gpu: h100\n"), "--gpu", "h900"])
    assert r.exit_code == 2 and "--gpu: unknown GPU 'h900'" in r.output


def test_impossible_load_values_are_refused_naming_the_field(tmp_path):
    cases = {
        "load: {mode: poisson, rate_rps: [.nan]}": "load.rate_rps.0",
        "load: {mode: poisson, rate_rps: [.inf]}": "load.rate_rps.0",
        "load: {concurrency: [100000000000000000000]}": "load.concurrency.0",
        "load: {num_requests: 1000000000000}": "load.num_requests",
        "load: {burstiness: .nan, mode: gamma, rate_rps: [1]}": "load.burstiness",
        "load: {prompt_tokens: 4000, output_tokens: 200}": "exceeds model.max_model_len 2048",
        "grid: {max_num_seqs: [100000000]}": "grid.max_num_seqs.0",
    }
    for text, where in cases.items():
        r = runner.invoke(app, ["validate", _spec(tmp_path, GOOD + text + "\n")])
        assert r.exit_code == 2 and where in r.output and "Traceback" not in r.output, (text, r.output)
        assert len(r.output.strip().splitlines()) == 1, r.output


def test_unreadable_specs_and_results_folders_are_one_line_errors(tmp_path):
    cases = [
        (_spec(tmp_path, b"\xff\xfe\x00\x01binary", "bin.yaml"), "not a YAML text file"),
        (_spec(tmp_path, "a: " + "[" * 50000 + "]" * 50000 + "\n", "deep.yaml"), "deep.yaml"),
        (str(tmp_path / "missing.yaml"), "cannot read YAML"),
    ]
    for path, words in cases:
        r = runner.invoke(app, ["validate", path])
        assert r.exit_code == 2 and words in r.output and "Traceback" not in r.output, r.output
    (tmp_path / "a-file").write_text("")
    r = runner.invoke(app, ["sweep", _spec(tmp_path, GOOD), "--gpu", "cpu", "--results", str(tmp_path / "a-file")])
    assert r.exit_code == 2 and "cannot write results there" in r.output and "Traceback" not in r.output


def test_validate_checks_what_the_sweep_will_need_before_anything_starts(tmp_path):
    cases = {
        "price_provider: nope\n": "unknown price provider 'nope'",
        "quality: {sets: [nope]}\n": "unknown eval set 'nope'",
        f"quality: {{jsonl: [{tmp_path / 'none.jsonl'}]}}\n": "cannot read eval set",
    }
    for text, words in cases.items():
        r = runner.invoke(app, ["validate", _spec(tmp_path, GOOD + text)])
        assert r.exit_code == 2 and words in r.output, (text, r.output)
        r = runner.invoke(app, ["sweep", _spec(tmp_path, GOOD + text), "--results", str(tmp_path / "r")])
        assert r.exit_code == 2 and words in r.output, (text, r.output)
    r = runner.invoke(app, ["validate", _spec(tmp_path, "name: t\nmodel: {id: m, source: path, path: /no/such/model}\n")])
    assert r.exit_code == 2 and "model.path: /no/such/model: no such file or folder" in r.output


def test_a_sweep_that_measured_nothing_exits_non_zero(tmp_path):
    # every point is skipped before any engine starts (AWQ without a checkpoint)
    spec = _spec(tmp_path, "name: t\nmodel: {id: m, source: embedded}\ngrid: {quantization: [awq]}\n"
                           "quality: {enabled: false}\n")
    r = runner.invoke(app, ["sweep", spec, "--gpu", "cpu", "--results", str(tmp_path / "r")])
    assert r.exit_code == 1 and "nothing was measured" in r.output, r.output
