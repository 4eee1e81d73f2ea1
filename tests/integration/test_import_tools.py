"""`atlas import --from guidellm|aiperf` on files the real tools wrote (GuideLLM 0.8.1 and AIPerf 0.13.0 against
Atlas's mock server: TTFT 30 ms, a token every 10 ms; scripts/make_import_fixtures.sh writes them): Atlas's
metrics over their per-request timings agree with each tool's own figures where the definitions agree, differ
by what docs/metrics.md says where they do not, and the points join the report, compare and `atlas fit`. Bad
files are refused in one line naming them, with nothing written."""

from __future__ import annotations

import gzip
import json
import shutil
import statistics
from pathlib import Path

import pytest
from typer.testing import CliRunner

from atlas.cli import app

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data" / "imports"
SPEC = str(ROOT / "configs" / "cpu-smollm2.yaml")


def _import(path: Path, tool: str, results: Path, sweep: str = "imp", *extra: str):
    return CliRunner().invoke(app, ["import", str(path), "--from", tool, "--sweep", sweep, "--spec", SPEC,
                                    "--results", str(results), *extra])


def _points(results: Path, sweep: str = "imp") -> dict[str, dict]:
    out = {}
    for p in (results / sweep).glob("*.json"):
        x = json.loads(p.read_text())
        out[x["config"]["load"].get("concurrency") or x["config"]["load"]["rate_rps"]] = x
    return out


def _p50(m: dict, name: str) -> float:
    return m[name]["p50"]["value"]


def test_a_guidellm_report_becomes_one_point_per_benchmark_without_itl(tmp_path):
    raw = json.loads((DATA / "guidellm-concurrent.json").read_text())
    r = _import(DATA / "guidellm-concurrent.json", "guidellm", tmp_path)
    assert r.exit_code == 0, r.output
    pts = _points(tmp_path)
    assert sorted(pts) == [1, 4]
    for bench in raw["benchmarks"]:
        x = pts[bench["config"]["strategy"]["streams"]]
        assert x["source"] == "imported" and x["status"] == "ok", x["reasons"]
        assert x["config"]["server"]["tool"] == "guidellm" and x["config"]["load"]["mode"] == "closed"
        eng = x["provenance"]["engine"]
        assert eng["tool_version"] == "0.8.1" and len(eng["file_sha256"]) == 64 and eng["strategy"]["type"] == "concurrent"
        m, tool = x["metrics"], bench["metrics"]
        assert m["n_ok"] == len(bench["requests"]["successful"]) == 16
        # no per-chunk times in the file: no ITL percentiles, and the point says why
        assert m["itl_ms"] is None and any(w.startswith("itl_ms: ") for w in m["warnings"])
        # Atlas's TPOT excludes the first token: GuideLLM's inter_token_latency_ms, not its time_per_output_token
        assert _p50(m, "tpot_ms") == pytest.approx(tool["inter_token_latency_ms"]["successful"]["median"], rel=0.02)
        assert 9.5 < _p50(m, "tpot_ms") < 10.5  # the mock's 10 ms
        # Atlas's TTFT runs from targeted_start: GuideLLM's own (from the send) plus its dispatch delay
        ttft_tool = tool["time_to_first_token_ms"]["successful"]["median"]
        delay = [(q["info"]["timings"]["request_start"] - q["info"]["timings"]["targeted_start"]) * 1e3
                 for q in bench["requests"]["successful"]]
        assert ttft_tool <= _p50(m, "ttft_ms") <= ttft_tool + max(delay) + 0.5
        assert _p50(m, "queue_ms") == pytest.approx(statistics.median(delay), rel=0.05)
        assert m["output_tok_s"] == pytest.approx(tool["output_tokens_per_second"]["successful"]["mean"], rel=0.05)
    stored = "".join((gzip.decompress(p.read_bytes()) if p.suffix == ".gz" else p.read_bytes()).decode()
                     for p in (tmp_path / "imp").rglob("*") if p.is_file())
    assert "api_key" not in stored and "api_routes" not in stored  # the report's backend settings are not kept


def test_a_late_guidellm_client_on_an_open_loop_is_called_client_bound(tmp_path):
    r = _import(DATA / "guidellm-constant.json", "guidellm", tmp_path)
    assert r.exit_code == 0, r.output
    [x] = _points(tmp_path).values()
    assert x["config"]["load"]["mode"] == "constant" and x["config"]["load"]["rate_rps"] == 15.0
    assert x["label"].endswith("constant 15 rps")
    # this file's GuideLLM sent 4-8 ms after its schedule on a 30 ms TTFT: Atlas's own rule for its own client
    assert x["status"] == "invalid" and x["reasons"][0].startswith("client-bound (guidellm's own client): send late")


def test_a_guidellm_0_3_report_is_read_too(tmp_path):
    """GuideLLM 0.3's layout (scheduler_info, token times per request; no version in the file). Its closed-loop
    targeted_start_time stays at the run's start, so latency runs from the send there, as GuideLLM's own."""
    raw = json.loads((DATA / "guidellm03-concurrent.json").read_text())
    r = _import(DATA / "guidellm03-concurrent.json", "guidellm", tmp_path, "imp", "--tool-version", "0.3.1")
    assert r.exit_code == 0, r.output
    pts = _points(tmp_path)
    assert sorted(pts) == [1, 4]
    for bench in raw["benchmarks"]:
        x = pts[bench["args"]["strategy"]["streams"]]
        assert x["status"] == "ok", x["reasons"]
        eng = x["provenance"]["engine"]
        assert eng["layout"] == "0.3 (scheduler_info)" and eng["tool_version"] == "0.3.1"
        assert any("GuideLLM 0.3, closed loop" in w for w in x["metrics"]["warnings"])
        m, tool = x["metrics"], bench["metrics"]
        assert m["itl_ms"] is None
        assert _p50(m, "ttft_ms") == pytest.approx(tool["time_to_first_token_ms"]["successful"]["median"], rel=0.05)
        assert _p50(m, "tpot_ms") == pytest.approx(tool["inter_token_latency_ms"]["successful"]["median"], rel=0.02)
        assert m["output_tok_s"] == pytest.approx(tool["output_tokens_per_second"]["successful"]["mean"], rel=0.05)
    # its constant rate sent hundreds of ms behind its own schedule: invalid, not a 165 ms TTFT
    assert _import(DATA / "guidellm03-constant.json", "guidellm", tmp_path, "c").exit_code == 0
    [x] = _points(tmp_path, "c").values()
    assert x["status"] == "invalid" and x["reasons"][0].startswith("client-bound (guidellm's own client)")
    assert x["provenance"]["engine"]["tool_version"] == "not in the file"


@pytest.mark.parametrize("given", ["aiperf-concurrency", "aiperf-concurrency/profile_export.jsonl",
                                   "aiperf-concurrency/profile_export_aiperf.json"])
def test_an_aiperf_run_is_read_from_its_folder_or_either_file(tmp_path, given):
    summary = json.loads((DATA / "aiperf-concurrency" / "profile_export_aiperf.json").read_text())
    r = _import(DATA / given, "aiperf", tmp_path)
    assert r.exit_code == 0, r.output
    [x] = _points(tmp_path).values()
    assert x["status"] == "ok", x["reasons"]
    assert x["config"]["load"]["mode"] == "closed" and x["config"]["load"]["concurrency"] == 4
    eng = x["provenance"]["engine"]
    assert eng["tool"] == "aiperf" and eng["tool_version"] == "0.13.0" and eng["file"] == "profile_export_aiperf.json"
    assert list(eng["also_read"]) == ["profile_export.jsonl"] and eng["token_counts"] == "the server's usage"
    m = x["metrics"]
    assert m["n_ok"] == 24 and m["mean_prompt_tokens"] == pytest.approx(summary["usage_prompt_tokens"]["avg"])
    # per-chunk gaps are in the records: ITL is the mock's 10 ms, TPOT AIPerf's inter_token_latency
    assert 9.5 < _p50(m, "itl_ms") < 10.5
    assert _p50(m, "tpot_ms") == pytest.approx(summary["inter_token_latency"]["p50"], rel=0.02)
    assert summary["time_to_first_token"]["p50"] <= _p50(m, "ttft_ms") <= summary["time_to_first_token"]["p50"] + 5
    assert m["output_tok_s"] == pytest.approx(summary["output_token_throughput"]["avg"], rel=0.05)


def test_aiperf_poisson_arrivals_are_an_open_loop_point(tmp_path):
    assert _import(DATA / "aiperf-poisson", "aiperf", tmp_path).exit_code == 0
    [x] = _points(tmp_path).values()
    assert x["config"]["load"]["mode"] == "poisson" and x["config"]["load"]["rate_rps"] == 15.0
    assert x["status"] == "ok" and x["metrics"]["achieved_rate_rps"] is not None


def test_imported_tool_points_join_the_report_compare_and_fit(tmp_path):
    assert _import(DATA / "aiperf-concurrency", "aiperf", tmp_path / "a").exit_code == 0
    assert _import(DATA / "guidellm-concurrent.json", "guidellm", tmp_path / "a", "gl").exit_code == 0
    slower = tmp_path / "slower"
    shutil.copytree(DATA / "aiperf-concurrency", slower)
    lines = []
    for line in (slower / "profile_export.jsonl").read_text().splitlines():
        d = json.loads(line)
        gaps = d["metrics"]["inter_chunk_latency"]["value"]
        d["metrics"]["request_latency"]["value"] += sum(gaps) * 0.5
        d["metrics"]["inter_chunk_latency"]["value"] = [g * 1.5 for g in gaps]
        lines.append(json.dumps(d))
    (slower / "profile_export.jsonl").write_text("\n".join(lines) + "\n")
    assert _import(slower, "aiperf", tmp_path / "b").exit_code == 0
    rep = CliRunner().invoke(app, ["report", str(tmp_path / "a"), "--out", str(tmp_path / "site")])
    assert rep.exit_code == 0, rep.output
    index = (tmp_path / "site" / "imp" / "index.html").read_text()
    assert "imported aiperf" in index and "1 imported file(s), measured by another tool" in index
    assert "profile_export_aiperf.json from aiperf 0.13.0" in index and "external endpoint" not in index
    gl = tmp_path / "site" / "gl"
    assert "imported guidellm" in (gl / "index.html").read_text()
    pages = [p.read_text() for p in (gl / "configs").glob("*.html")]
    assert pages and all("Imported, measured by\nguidellm 0.8.1, not by Atlas" in p for p in pages)
    assert all("not measured: the file has each request&#39;s first and last token times only" in p for p in pages)
    assert not any("Kept out of the frontier: nan" in p for p in pages)
    c = CliRunner().invoke(app, ["compare", str(tmp_path / "a" / "imp"), str(tmp_path / "b" / "imp"), "--out",
                                 str(tmp_path / "cmp"), "--fail-on", "tpot_p50_ms:+20%"])
    assert c.exit_code == 1 and "tpot_p50_ms" in c.output and "regression" in c.output, c.output
    # the fit takes points with and without ITL
    f = CliRunner().invoke(app, ["fit", str(tmp_path / "a"), "--name", "tools", "--out", str(tmp_path / "sim")])
    assert f.exit_code == 0, f.output
    # the servers' own batching is not in the files: the fit says what it assumed, and so does its artifact
    assert "note: imported: its server's own batching is not known to Atlas" in " ".join(f.output.split())
    art = json.loads((tmp_path / "sim" / "tools.json").read_text())
    assert art["groups"] and all("vLLM V1" in g["assumption"] for g in art["groups"])


def _refused(r, *words: str) -> None:
    assert r.exit_code == 2, r.output
    assert all(w in r.output for w in words), r.output
    assert r.output.strip().count("\n") <= 2, r.output


def test_files_the_importers_cannot_read_are_named_in_one_line_and_nothing_is_written(tmp_path):
    res = tmp_path / "res"
    bad = tmp_path / "bad"
    bad.mkdir()
    # AIPerf records without their summary (it holds the load)
    shutil.copy(DATA / "aiperf-concurrency" / "profile_export.jsonl", bad / "profile_export.jsonl")
    _refused(_import(bad / "profile_export.jsonl", "aiperf", res), "profile_export_aiperf.json", "not there")
    # a run that was not streamed
    s = json.loads((DATA / "aiperf-concurrency" / "profile_export_aiperf.json").read_text())
    s["input_config"]["endpoint"]["streaming"] = False
    (bad / "profile_export_aiperf.json").write_text(json.dumps(s))
    _refused(_import(bad, "aiperf", res), "profile_export_aiperf.json", "not streamed")
    # a corrupted record line
    (bad / "profile_export_aiperf.json").write_text((DATA / "aiperf-concurrency" / "profile_export_aiperf.json")
                                                    .read_text())
    (bad / "profile_export.jsonl").write_text('{"metadata": {}}\n{"metad')
    _refused(_import(bad, "aiperf", res), "profile_export.jsonl", "line 2")
    # a GuideLLM report holding a sample of its requests
    g = json.loads((DATA / "guidellm-concurrent.json").read_text())
    del g["benchmarks"][1]["requests"]["successful"][5:]
    (bad / "sampled.json").write_text(json.dumps(g))
    _refused(_import(bad / "sampled.json", "guidellm", res), "sampled.json", "benchmark 2 of 2", "5 of the 16")
    # a strategy Atlas cannot describe
    g = json.loads((DATA / "guidellm-constant.json").read_text())
    g["benchmarks"][0]["config"]["strategy"]["type_"] = "replay"
    (bad / "replay.json").write_text(json.dumps(g))
    _refused(_import(bad / "replay.json", "guidellm", res), "replay.json", "'replay'")
    # the wrong tool for the file, both ways, and truncated JSON
    _refused(_import(DATA / "aiperf-concurrency" / "profile_export_aiperf.json", "guidellm", res),
             "not a GuideLLM report")
    _refused(_import(DATA / "guidellm-constant.json", "aiperf", res), "guidellm-constant.json", "not an AIPerf summary")
    (bad / "cut.json").write_text((DATA / "guidellm-constant.json").read_text()[:5000])
    _refused(_import(bad / "cut.json", "guidellm", res), "cut.json", "not JSON")
    assert not res.exists() or not list(res.rglob("*.json"))


def _stored_records(results: Path, sweep: str = "imp") -> dict[str, list[dict]]:
    out = {}
    for p in (results / sweep).glob("*.json"):
        x = json.loads(p.read_text())
        lines = gzip.decompress((results / sweep / x["records_file"]).read_bytes()).decode().splitlines()
        out[x["label"]] = [json.loads(line) for line in lines]
    return out


def test_round_trip_the_stored_records_give_back_each_files_timings(tmp_path):
    """What Atlas stored gives back, request by request, what the tool wrote: the TTFT from the send, each
    chunk gap (AIPerf) or the first-to-last span (GuideLLM), the latency and the token counts."""
    assert _import(DATA / "aiperf-poisson", "aiperf", tmp_path).exit_code == 0
    [recs] = _stored_records(tmp_path).values()
    by_sent = {round(r["sent_s"], 6): r for r in recs}
    lines = [json.loads(line) for line in (DATA / "aiperf-poisson" / "profile_export.jsonl").read_text().splitlines()]
    t0 = min(d["metadata"]["credit_issued_ns"] for d in lines)
    assert len(recs) == len(lines)
    for d in lines:
        r = by_sent[round((d["metadata"]["request_start_ns"] - t0) / 1e9, 6)]
        m = d["metrics"]
        assert (r["first_token_s"] - r["sent_s"]) * 1e3 == pytest.approx(m["time_to_first_token"]["value"], abs=1e-6)
        gaps = [(b - a) * 1e3 for a, b in zip(r["token_times_s"], r["token_times_s"][1:], strict=False)]
        assert gaps == pytest.approx(m["inter_chunk_latency"]["value"], abs=1e-6)
        assert (r["done_s"] - r["sent_s"]) * 1e3 == pytest.approx(m["request_latency"]["value"], abs=1e-6)
        assert r["output_tokens"] == m["usage_completion_tokens"]["value"] == sum(r["chunk_tokens"])
        assert r["prompt_tokens"] == m["usage_prompt_tokens"]["value"]
        assert (r["scheduled_s"] * 1e9 + t0) == pytest.approx(d["metadata"]["credit_issued_ns"], abs=1e3)
    assert _import(DATA / "guidellm-concurrent.json", "guidellm", tmp_path, "gl").exit_code == 0
    raw = json.loads((DATA / "guidellm-concurrent.json").read_text())
    for bench, (label, recs) in zip(raw["benchmarks"], sorted(_stored_records(tmp_path, "gl").items()), strict=True):
        assert label.endswith(f"c={bench['config']['strategy']['streams']}")
        t = [q["info"]["timings"] for q in bench["requests"]["successful"]]
        t0 = min(x["targeted_start"] for x in t)
        got = sorted((r["scheduled_s"], r["sent_s"], r["first_token_s"], r["end_s"], r["done_s"], r["output_tokens"])
                      for r in recs)
        want = sorted(((x["targeted_start"] - t0, x["request_start"] - t0, x["first_token_iteration"] - t0,
                        x["last_token_iteration"] - t0, x["request_end"] - t0, q["output_metrics"]["total_tokens"])
                       for x, q in zip(t, bench["requests"]["successful"], strict=True)))
        assert len(got) == len(want)
        for g, w in zip(got, want, strict=True):
            assert g == pytest.approx(w, abs=1e-6)


def test_many_files_and_an_aiperf_sweep_tree_import_in_one_call_or_not_at_all(tmp_path):
    tree = tmp_path / "aiperf-sweep"
    shutil.copytree(DATA / "aiperf-concurrency", tree / "concurrency_4")
    shutil.copytree(DATA / "aiperf-poisson", tree / "poisson_15" / "trial-0")
    assert _import(tree, "aiperf", tmp_path / "r").exit_code == 0
    assert sorted(map(str, _points(tmp_path / "r"))) == ["15.0", "4"]
    r = _import(DATA / "guidellm-concurrent.json", "guidellm", tmp_path / "g", "imp", str(DATA / "guidellm-constant.json"))
    # (the second FILE follows the options here: typer takes it as the FILES argument's next value)
    assert r.exit_code == 0, r.output
    assert sorted(map(str, _points(tmp_path / "g"))) == ["1", "15.0", "4"]
    # one file that cannot be read stops the whole import before anything is written
    (tmp_path / "cut.json").write_text("{")
    r = _import(DATA / "guidellm-concurrent.json", "guidellm", tmp_path / "x", "imp", str(tmp_path / "cut.json"))
    _refused(r, "cut.json")
    assert not (tmp_path / "x").exists() or not list((tmp_path / "x").rglob("*.json"))
    _refused(_import(tmp_path / "g", "aiperf", tmp_path / "x"), "no AIPerf run in this folder or below it")
