"""A search in one process through the real Sweeper, ResultStore and study, with mock engines (real HTTP
servers in subprocesses): the budget, the baseline first, engines kept up across a server's points, quality
once per numerics, gated numerics excluded and recorded, and the CLI's one-line errors."""

from typer.testing import CliRunner

from atlas.cli import app
from atlas.config import parse_spec
from atlas.hardware import get_gpu
from atlas.results import load_results
from atlas.search.run import run_search
from atlas.search.settings import SearchSettings
from tests.integration.test_sweep_mock import SPEC, mock_factory

SIZED = {**SPEC, "name": "search-mock",
         # a model small enough that the mock's speed is physical on the "cpu" spec (the simulator caps at the roofline)
         "model": {**SPEC["model"], "params_b": 0.01, "num_layers": 4, "num_kv_heads": 2, "head_dim": 64},
         "grid": {**SPEC["grid"], "max_num_seqs": [4, 8]},
         "load": {**SPEC["load"], "num_requests": 12, "repeats": 1}}


def test_optuna_search_with_mock_engines(tmp_path):
    factory = mock_factory()
    notes = []
    rep = run_search(parse_spec(SIZED), get_gpu("cpu"), tmp_path, SearchSettings(strategy="optuna", budget=6),
                     engine_factory=factory, progress=notes.append)
    assert "budget reached" in rep.stopped and len(rep.measured_here) == 6 and rep.planned == 16
    measuring = [n for n in notes if "] measuring" in n]
    assert measuring[0].startswith("[baseline] measuring float32 w:none kv:auto")
    assert any(n.startswith("[simulator]") for n in measuring), notes
    quality_evals = [n for n in notes if n.startswith("quality eval")]
    numerics = {r.label.split(" seqs")[0] for r in rep.measured_here}
    assert len(quality_evals) == len(numerics)  # once per numerics, shared by its scheduling configs
    assert factory.started <= 6
    results, errors = load_results(tmp_path / "search-mock")
    assert not errors
    measured = [r for r in results if r.status != "skipped"]
    assert len(measured) == 6
    gated = [r for r in measured if r.status == "quality_failed"]
    for r in gated:  # naive fp8 KV: fast garbage, measured once per numerics at most, the rest excluded
        assert "kv:fp8" in r.label
    excluded = [r for r in results if r.status == "skipped"]
    assert all(r.reasons[0].startswith("not measured: its numerics failed the quality gate") for r in excluded)
    assert len(excluded) == 4 * len({r.label.split(" seqs")[0] for r in gated}) - len(gated)  # 4 points per numerics


def test_search_cli_errors_are_one_line(tmp_path):
    runner = CliRunner()
    spec = tmp_path / "s.yaml"
    spec.write_text("name: t\nmodel: {id: m, source: path, path: /m}\nload: {concurrency: [1]}\n")
    r = runner.invoke(app, ["sweep", str(spec), "--strategy", "annealing", "--budget", "3"])
    assert r.exit_code == 2 and "unknown --strategy 'annealing'" in r.output
    r = runner.invoke(app, ["sweep", str(spec), "--strategy", "optuna", "--budget", "3", "--resume"])
    assert r.exit_code == 2 and "--resume is for full sweeps" in r.output
    r = runner.invoke(app, ["sweep", str(spec), "--strategy", "optuna", "--budget", "3", "--objective", "speed:max"])
    assert r.exit_code == 2 and "unknown metric 'speed'" in r.output
    r = runner.invoke(app, ["worker", "--storage", "localhost:5432", "--study", "x"])
    assert r.exit_code == 2 and "expected a database URL" in r.output and "Traceback" not in r.output
    r = runner.invoke(app, ["collect", "--storage", f"sqlite:///{tmp_path / 'none.db'}", "--study", "x"])
    assert r.exit_code == 2 and "no study 'x'" in r.output
