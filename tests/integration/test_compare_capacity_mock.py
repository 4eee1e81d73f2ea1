"""atlas compare on capacity: the same config searched twice against a mock whose service curve changed under
it (every gap grows 3 ms per other request in flight instead of 2: as a new engine version might), so its
capacity falls from ~21 to ~14 req/s; compare calls that a regression the brackets resolve, and the gate
fails on it."""

from typer.testing import CliRunner

from atlas.cli import app
from atlas.config import parse_spec
from atlas.engines.mock.engine import MockEngine
from atlas.engines.mock.server import MockOptions
from atlas.hardware import get_gpu
from atlas.sweep import Sweeper
from tests.integration.test_capacity_mock import SPEC


def _sweep(root, per_running_ms):
    def factory(spec, gpu, cfg, model_path, log_path):  # the config says 2 ms; the engine does what it does
        return MockEngine(MockOptions(ttft_ms=20.0, itl_ms=10.0, itl_per_running_ms=per_running_ms), log_path)

    return Sweeper(parse_spec(SPEC), get_gpu("cpu"), root, engine_factory=factory, progress=lambda e: None).run()


def test_a_capacity_that_fell_is_a_regression_and_fails_the_gate(tmp_path):
    before, after = _sweep(tmp_path / "before", 2.0), _sweep(tmp_path / "after", 3.0)
    [a], [b] = before.capacities, after.capacities
    assert a.status == b.status == "ok" and b.capacity_rps < a.capacity_rps
    out = tmp_path / "page"
    r = CliRunner().invoke(app, ["compare", str(tmp_path / "before" / SPEC["name"]),
                                 str(tmp_path / "after" / SPEC["name"]), "--out", str(out),
                                 "--fail-on", "capacity_rps:-10%"])
    assert r.exit_code == 1, r.output
    assert "1 capacities matched" in r.output
    [line] = [x for x in r.output.splitlines() if x.startswith("regression:")]
    assert "at capacity: capacity_rps" in line and "capacity brackets do not overlap" in line
    html = (out / "index.html").read_text()
    assert "Capacity under the SLO" in html and "capacity_rps" in html
