"""Opens the generated report site from disk in headless Chromium: figures render, no console errors,
hostile model output stays text. Keeps a screenshot in test-artifacts/."""

import os
import shutil
import time

import pytest

from atlas.config import parse_spec
from atlas.engines.mock.engine import MockEngine
from atlas.engines.mock.server import MockOptions
from atlas.hardware import get_gpu
from atlas.report.site import build_site
from atlas.sweep import Sweeper
from tests.integration.test_sweep_mock import SPEC, Factory, behaviour

CHROMIUM, DRIVER = shutil.which("chromium"), shutil.which("chromedriver")


def _browser():
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
              "--disable-background-networking", "--disable-component-update", "--disable-sync",
              "--window-size=1400,2400", "--allow-file-access-from-files"):
        opts.add_argument(a)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=Service(DRIVER), options=opts)


def render(driver, page) -> int:
    """Opens a page and waits until every embedded figure is drawn; returns how many there are.

    chromedriver's get() can return before a file:// navigation has committed, so the figures are counted
    only once the document is the page asked for and has finished loading (CI once counted the previous
    page's none and then found the new page's two)."""
    uri = page.as_uri()
    driver.get(uri)

    def loaded() -> bool:
        return driver.execute_script("return document.readyState") == "complete" and driver.current_url == uri

    def counts() -> tuple[int, int]:
        return (len(driver.find_elements("css selector", "script.figdata")),
                len(driver.find_elements("css selector", ".js-plotly-plot")))

    def ready() -> bool:
        want, drawn = counts()
        return loaded() and drawn >= want

    deadline = time.time() + 30
    while time.time() < deadline and not ready():
        time.sleep(0.2)
    assert loaded(), f"{page} did not finish loading: at {driver.current_url}"
    want, drawn = counts()
    assert drawn == want, f"{page}: {drawn} of {want} figures drawn"
    return want


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("browser")

    def make(server, log):
        opts = behaviour(server)
        if server.quantization.value == "fp8":  # this engine's model answers with an HTML injection attempt
            opts = MockOptions(ttft_ms=8, itl_ms=6, answers="hostile")
        return MockEngine(opts, log)

    spec = {**SPEC, "load": {**SPEC["load"], "repeats": 1}}
    report = Sweeper(parse_spec(spec), get_gpu("cpu"), tmp / "results", engine_factory=Factory(make)).run()
    return build_site(report.results, tmp / "site", title="Atlas browser test"), report


def need_browser() -> None:
    """Skips a browser test where Chromium is missing; fails it in CI, whose set-up installs it."""
    if not (CHROMIUM and DRIVER):
        if os.environ.get("CI"):
            pytest.fail("chromium and chromium-driver must be installed in CI (.ci/run installs them)")
        pytest.skip("needs Debian's chromium and chromium-driver")


def test_site_renders_offline_without_errors_and_escapes_model_text(site, artifacts):
    need_browser()
    index, report = site
    hostile = next(r for r in report.results if r.config.server.quantization.value == "fp8")
    driver = _browser()
    try:
        want = render(driver, index)
        assert want >= 4
        assert driver.find_elements("css selector", ".js-plotly-plot .scatterlayer .point")
        driver.save_screenshot(str(artifacts / "report-index.png"))
        rows = driver.find_elements("css selector", "#points tbody tr")
        driver.find_element("id", "filter").send_keys("quality_failed")
        visible = [r for r in rows if r.is_displayed()]
        assert 0 < len(visible) < len(rows)
        driver.get((index.parent / "configs" / f"{hostile.run_id}.html").as_uri())
        assert driver.execute_script("return window.__atlas_pwned === undefined")
        assert driver.execute_script(  # the model's text is shown literally, as text
            "return [...document.querySelectorAll('pre')].some("
            "p => p.textContent.includes('</script><script>window.__atlas_pwned=1</script>'))")
        driver.save_screenshot(str(artifacts / "report-config-hostile.png"))
        driver.get(index.as_uri())
        severe = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
        assert not severe, severe
    finally:
        driver.quit()
