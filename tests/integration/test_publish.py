"""`atlas publish`: recorded sweeps (benchmarks/data) and a re-measurement with a known change as one static
site, opened from disk in headless Chromium with every network name unresolvable: each page renders with no
console error, every link and asset is relative and resolves, and the best configuration is two clicks from
the index."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from atlas.cli import app
from tests.integration.test_report_browser import _browser, need_browser, render

DATA = Path(__file__).resolve().parents[2] / "benchmarks" / "data"


def _slower_copy(src: Path, dst: Path, factor: float) -> Path:
    """The sweep measured again with every TPOT p50 `factor` times the recorded one (a known regression)."""
    shutil.copytree(src, dst)
    for p in dst.glob("*.json"):
        x = json.loads(p.read_text())
        if "run_id" not in x or not x.get("metrics"):
            continue
        x["metrics"]["tpot_ms"]["p50"]["value"] *= factor
        for b in ("ci_low", "ci_high"):
            if x["metrics"]["tpot_ms"]["p50"].get(b) is not None:
                x["metrics"]["tpot_ms"]["p50"][b] *= factor
        x["provenance"]["finished_at"] = "2026-12-09T00:00:00+00:00"
        p.write_text(json.dumps(x))
    return dst


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("publish")
    again = _slower_copy(DATA / "cpu-smollm2-llamacpp-1core", tmp / "again" / "cpu-smollm2-llamacpp-1core", 1.5)
    out = tmp / "site"
    r = CliRunner().invoke(app, ["publish", str(DATA / "cpu-smollm2"), str(DATA / "cpu-smollm2-llamacpp-1core"),
                                 str(DATA / "cpu-smollm2-workloads"), str(again.parent), "--out", str(out),
                                 "--title", "Atlas test site"])
    assert r.exit_code == 0, r.output
    return out, r.output


def test_the_index_lists_every_atlas_and_the_comparison_of_the_remeasured_one(site):
    out, printed = site
    html = (out / "index.html").read_text()
    for slug in ("cpu-smollm2", "cpu-smollm2-llamacpp-1core", "cpu-smollm2-llamacpp-1core-2", "cpu-smollm2-prefix",
                 "cpu-smollm2-sessions"):
        assert f'href="{slug}/index.html"' in html
    assert "SmolLM2-135M-Instruct" in html and "llamacpp" in html and "2026-12-09" in html
    # plotly.js once for the whole site, the atlases' pages point at it
    assert [p.relative_to(out) for p in out.rglob("plotly.min.js")] == [Path("assets/plotly.min.js")]
    assert 'src="../assets/plotly.min.js"' in (out / "cpu-smollm2" / "index.html").read_text()
    # the same configurations measured twice are compared; the page shows the regression made above
    compares = list((out / "compare").iterdir())
    assert [c.name for c in compares] == ["cpu-smollm2-llamacpp-1core--cpu-smollm2-llamacpp-1core-2"]
    page = (compares[0] / "index.html").read_text()
    assert "regression" in page and "tpot_p50_ms" in page
    assert "1 comparisons" in printed


def test_every_link_and_asset_is_relative_and_resolves(site):
    out, _ = site
    pages = list(out.rglob("*.html"))
    assert len(pages) > 50
    for page in pages:
        for ref in re.findall(r'(?:href|src)="([^"]*)"', page.read_text()):
            assert "://" not in ref and not ref.startswith("/"), (page, ref)
            target = (page.parent / ref.split("#")[0]).resolve()
            assert target.is_file(), (page, ref)


def test_the_site_renders_offline_with_no_console_error_and_best_is_two_clicks_away(site, artifacts):
    need_browser()
    out, _ = site
    driver = _browser()
    try:
        driver.get((out / "index.html").as_uri())
        driver.save_screenshot(str(artifacts / "publish-index.png"))
        # click 1: an atlas; click 2: its best configuration (the first table of its page)
        driver.find_element("link text", "cpu-smollm2").click()
        assert driver.find_element("tag name", "h1").text == "Atlas — cpu-smollm2"
        best = driver.find_element("css selector", "table.small a")
        best.click()
        assert "/configs/" in driver.current_url and driver.find_element("tag name", "h1").text
        for page in sorted(out.rglob("*.html")):
            if page.parent.name == "configs" and "cpu-smollm2-prefix" not in str(page):
                continue  # every kind of page once (one atlas's points): the rest are the same template
            if "/assets/" in str(page):
                continue
            render(driver, page)
            severe = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
            assert not severe, (page, severe)
    finally:
        driver.quit()


def test_what_cannot_be_published_is_named_in_one_line_and_nothing_is_half_written(site, tmp_path):
    out, _ = site
    before = sorted(p.relative_to(out) for p in out.rglob("*"))
    r = CliRunner().invoke(app, ["publish", str(tmp_path / "missing"), "--out", str(out)])
    assert r.exit_code == 2 and "missing: no such results folder" in r.output
    r = CliRunner().invoke(app, ["publish", str(DATA / "cpu-smollm2"), "--compare", "cpu-smollm2:nope",
                                 "--out", str(out)])
    assert r.exit_code == 2 and "no atlas named 'nope'" in r.output
    r = CliRunner().invoke(app, ["publish", str(DATA / "cpu-smollm2"), str(DATA / "cpu-smollm2-llamacpp-1core"),
                                 "--compare", "cpu-smollm2:cpu-smollm2-llamacpp-1core", "--out", str(out)])
    assert r.exit_code == 2 and "no configuration in common" in r.output
    assert sorted(p.relative_to(out) for p in out.rglob("*")) == before  # the published site is untouched
    assert not [p for p in out.parent.iterdir() if p.name.startswith(".site")]  # no temporary folder left
