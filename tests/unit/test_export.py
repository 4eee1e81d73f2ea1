"""atlas export and atlas.load_frame: the recorded vLLM-CPU sweep round-trips through Parquet, CSV and JSON
lines with every column and value; a corrupted result stops the export with its name."""

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

import atlas
from atlas.cli import app
from atlas.export import load_records
from atlas.results import ResultError, load_results

RECORDED = Path(__file__).parents[2] / "benchmarks" / "data" / "cpu-smollm2"
runner = CliRunner()


def test_load_frame_is_one_row_per_point_with_units_in_the_names():
    fr = atlas.load_frame(RECORDED)
    results = load_results(RECORDED)[0]
    assert len(fr) == len(results) and fr["run_id"].is_unique
    for col in ("ttft_p50_ms", "tpot_p99_ms", "output_tok_s", "usd_per_m_output", "accuracy", "max_num_seqs",
                "quantization", "kv_cache_dtype", "load", "status", "reason"):
        assert col in fr.columns, col
    one = next(r for r in results if r.status == "ok")
    row = fr.set_index("run_id").loc[one.run_id]
    assert row["tpot_p50_ms"] == pytest.approx(one.metrics.tpot_ms.p50.value)


@pytest.mark.parametrize("fmt", ["parquet", "csv", "jsonl"])
def test_every_format_round_trips(tmp_path, fmt):
    out = tmp_path / f"atlas.{fmt}"
    r = runner.invoke(app, ["export", str(RECORDED), "--format", fmt, "--out", str(out), "--records"])
    assert r.exit_code == 0, r.output
    fr = atlas.load_frame(RECORDED)
    back = {"parquet": pd.read_parquet, "csv": pd.read_csv,
            "jsonl": lambda p: pd.read_json(p, lines=True)}[fmt](out)
    assert list(back.columns) == list(fr.columns) and len(back) == len(fr)
    for col in ("run_id", "label", "status"):
        assert back[col].tolist() == fr[col].tolist()
    for col in ("ttft_p50_ms", "output_tok_s", "usd_per_m_output"):
        assert back[col].to_numpy(dtype=float) == pytest.approx(fr[col].to_numpy(dtype=float), nan_ok=True)
    reqs = tmp_path / f"atlas.records.{fmt}"
    assert reqs.exists() and f"{len(fr)} points" in r.output
    expect = load_records(RECORDED)
    got = {"parquet": pd.read_parquet, "csv": pd.read_csv, "jsonl": lambda p: pd.read_json(p, lines=True)}[fmt](reqs)
    assert len(got) == len(expect) > 0 and set(expect["run_id"]) <= set(fr["run_id"])
    first = got.iloc[0]["token_times_s"]
    times = json.loads(first) if isinstance(first, str) else list(first)
    assert times == pytest.approx(expect.iloc[0]["token_times_s"])


def test_a_corrupted_result_stops_the_export_naming_it(tmp_path):
    broken = tmp_path / "broken"
    shutil.copytree(RECORDED, broken)
    victim = sorted(broken.glob("*.json"))[3]
    victim.write_text("{ truncated")
    out = tmp_path / "x.csv"
    r = runner.invoke(app, ["export", str(broken), "--format", "csv", "--out", str(out)])
    assert r.exit_code == 2 and victim.name in r.output and not out.exists()
    with pytest.raises(ResultError, match=victim.name):
        atlas.load_frame(broken)
    r = runner.invoke(app, ["export", str(RECORDED), "--format", "xlsx", "--out", str(tmp_path / "y")])
    assert r.exit_code == 2 and "xlsx" in r.output
    r = runner.invoke(app, ["export", str(tmp_path / "none")])
    assert r.exit_code == 2 and "none" in r.output
