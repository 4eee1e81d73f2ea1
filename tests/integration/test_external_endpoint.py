"""`atlas sweep SPEC --endpoint URL`: a server Atlas did not start (here a mock server that wants an API key,
started as someone else's deployment would be) measured for real; what Atlas refuses before anything runs;
the key never written; a redeployment between points and other clients' traffic caught."""

from __future__ import annotations

import gzip
import json
import threading
import urllib.request
from pathlib import Path

import pytest
from typer.testing import CliRunner

from atlas.cli import app
from atlas.engines.external.engine import ExternalEngine
from atlas.engines.mock.engine import MockEngine
from atlas.engines.mock.server import MockOptions

KEY = "sk-atlas-test-7f3a9c"
SPEC = """
name: ext
engine: mock
gpu: cpu
model: {id: smollm2-135m, source: embedded}
api_key_env: EXT_TEST_KEY
grid: {max_num_seqs: [8, 16]}
load:
  concurrency: [1, 4]
  num_requests: 16
  warmup_requests: 0
  min_requests: 4
  min_duration_s: 0.05
  repeats: 1
  output_tokens: 8
quality: {enabled: true, sets: [arith], max_items_per_set: 10}
"""


@pytest.fixture
def deployed(tmp_path, monkeypatch):
    """A keyed server that is not this sweep's: started here as its owner would, stopped after the test."""
    monkeypatch.setenv("EXT_TEST_KEY", KEY)
    engines = []

    def start(port: int | None = None, version: str = "0.9.9-mock", **kw) -> MockEngine:
        e = MockEngine(MockOptions(**{"ttft_ms": 5, "itl_ms": 2, **kw}, api_key_env="EXT_TEST_KEY", version=version),
                       tmp_path / f"deployed{len(engines)}.log", port=port)
        e.start()
        engines.append(e)
        return e

    yield start
    for e in engines:
        e.stop()


def _sweep(tmp_path: Path, *args: str):
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC)
    return CliRunner().invoke(app, ["sweep", str(spec), "--results", str(tmp_path / "res"), *args])


def _every_byte(folder: Path) -> bytes:
    out = b""
    for p in folder.rglob("*"):
        if p.is_file():
            data = p.read_bytes()
            out += gzip.decompress(data) if p.suffix == ".gz" else data
    return out


def test_an_endpoint_is_measured_labelled_and_its_key_never_written(deployed, tmp_path):
    server = deployed()
    r = _sweep(tmp_path, "--endpoint", server.base_url + "/v1/")  # a pasted .../v1/ is the same endpoint
    assert r.exit_code == 0, r.output
    assert "mock grid(s) are not swept" in r.output and "external endpoint, not started by Atlas" in r.output
    folders = [p for p in (tmp_path / "res").iterdir()]
    assert [p.name for p in folders] == [f"ext-ext-127.0.0.1-{server.port}"]  # never the spec's own folder
    results = [json.loads(p.read_text()) for p in folders[0].glob("*.json")]
    assert len(results) == 2  # the load axis once: the grid's two max_num_seqs are not the endpoint's to set
    for x in results:
        assert x["status"] == "ok", x["reasons"]
        assert x["config"]["server"] == {"engine": "external", "url": server.base_url,
                                         "served_model": server.served_model}
        eng = x["provenance"]["engine"]
        assert eng["started_by_atlas"] is False and eng["note"] == "external endpoint, not started by Atlas"
        assert eng["version"] == {"version": "0.9.9-mock"} and eng["metrics"] == "vllm counters"
        assert eng["models"][0]["max_model_len"] == 4096 and "not verified" in eng["gpu"]
        assert x["provenance"]["engine_version"] == "external (0.9.9-mock)"
        assert x["provenance"]["hardware_probe"] is None  # this host is the client, not the server
        assert x["energy"]["joules"] is None and "not on this host" in x["energy"]["reason"]
        assert x["quality"]["accuracy"] == 1.0  # the eval ran against the endpoint, with the key
        # no warning about the endpoint (a busy host may still warn that the client itself waited for a CPU)
        assert x["metrics"]["n_ok"] == 16 and not [w for w in x["metrics"]["warnings"] if "client" not in w]
    spec_written = (folders[0] / "sweep-spec.yaml").read_text()
    assert "api_key_env: EXT_TEST_KEY" in spec_written
    assert KEY.encode() not in _every_byte(tmp_path / "res")
    rep = CliRunner().invoke(app, ["report", str(folders[0]), "--out", str(tmp_path / "site")])
    assert rep.exit_code == 0, rep.output
    assert KEY.encode() not in _every_byte(tmp_path / "site")
    site = tmp_path / "site" / folders[0].name
    html = (site / "index.html").read_text()
    assert "external endpoint(s), not started by Atlas" in html and "external (0.9.9-mock)" in html
    page = (site / "configs" / f"{results[0]['run_id']}.html").read_text()
    assert "External endpoint, not started by Atlas" in page


@pytest.mark.parametrize("case, expect", [
    ("wrong key", "HTTP 401: the endpoint refused the API key from EXT_TEST_KEY"),
    ("no key", "api_key_env: the environment variable EXT_TEST_KEY is not set"),
    ("unreachable", "does not answer"),
    ("other model", "does not serve 'qwen'"),
    ("credentials", "a URL with credentials"),
])
def test_what_cannot_be_measured_is_refused_in_one_line_before_anything_runs(deployed, tmp_path, monkeypatch,
                                                                              case, expect):
    server = deployed()
    url, extra = server.base_url, []
    if case == "wrong key":
        monkeypatch.setenv("EXT_TEST_KEY", "sk-wrong")
    elif case == "no key":
        monkeypatch.delenv("EXT_TEST_KEY")
    elif case == "unreachable":
        server.stop()
    elif case == "other model":
        extra = ["--model", "qwen"]
    else:
        url = url.replace("http://", "http://user:pw@")
    r = _sweep(tmp_path, "--endpoint", url, *extra)
    assert r.exit_code != 0
    assert expect in r.output and r.output.count("\n") <= 3, r.output
    assert "pw@" not in r.output and "sk-wrong" not in r.output
    assert not (tmp_path / "res").exists()  # nothing written


def test_model_names_the_endpoints_model_and_needs_an_endpoint(deployed, tmp_path):
    r = _sweep(tmp_path, "--model", "x")
    assert r.exit_code != 0 and "--model names the model of an --endpoint" in r.output
    server = deployed()
    r = _sweep(tmp_path, "--endpoint", server.base_url, "--engine", "vllm")
    assert r.exit_code != 0 and "exclude each other" in r.output


def test_a_redeployed_endpoint_is_caught_between_points(deployed):
    first = deployed()
    e = ExternalEngine(first.base_url, first.served_model, api_key_env="EXT_TEST_KEY", max_model_len=2048)
    e.start()
    assert e.verify() is None and e.alive()
    port = first.port
    first.stop()
    assert "stopped answering" in (e.verify() or "") and not e.alive()
    assert any(line.startswith("EndpointError:") for line in e.log_tail())
    second = deployed(port=port, version="1.0.0-mock")  # same URL, redeployed (a new launch, a new version)
    assert second.base_url == first.base_url
    why = e.verify() or ""
    assert "no longer serves" in why or "changed since the sweep checked it" in why
    e.stop()  # never stops the endpoint: it is its owner's
    assert second.alive()


def test_other_clients_sharing_the_endpoint_invalidate_the_point(deployed, tmp_path):
    server = deployed()
    stop = threading.Event()

    def other_client() -> None:
        body = json.dumps({"model": server.served_model, "prompt": "hello there", "max_tokens": 32}).encode()
        while not stop.is_set():
            req = urllib.request.Request(server.base_url + "/v1/completions", data=body, headers={
                "Content-Type": "application/json", "Authorization": f"Bearer {KEY}"})
            with urllib.request.urlopen(req, timeout=10) as resp:
                resp.read()

    others = [threading.Thread(target=other_client, daemon=True) for _ in range(4)]
    for t in others:
        t.start()
    try:
        r = _sweep(tmp_path, "--endpoint", server.base_url)
    finally:
        stop.set()
        for t in others:
            t.join(timeout=10)
    assert r.exit_code == 0, r.output
    results = [json.loads(p.read_text()) for p in next((tmp_path / "res").iterdir()).glob("*.json")]
    assert results and all(x["status"] == "invalid" for x in results)
    assert all("other clients shared the endpoint during this point" in x["reasons"][0] for x in results)


def test_an_engine_atlas_starts_that_wants_a_key_fails_at_once_not_at_the_timeout(tmp_path, monkeypatch):
    """vLLM started with --api-key in extra_engine_args would refuse every request of the sweep: the start fails
    in one line as soon as the engine answers, instead of waiting out startup_timeout_s."""
    import sys
    import time

    from atlas.engines.base import EngineError
    from atlas.engines.process import ProcessEngine

    monkeypatch.setenv("EXT_TEST_KEY", KEY)
    argv = lambda p: [sys.executable, "-m", "atlas.engines.mock.server", "--port", str(p),  # noqa: E731
                      "--model", "mock", "--api-key-env", "EXT_TEST_KEY"]
    e = ProcessEngine(argv, served_name="mock", host="127.0.0.1", port=None, log_path=tmp_path / "e.log",
                      startup_timeout_s=120)
    t0 = time.monotonic()
    with pytest.raises(EngineError, match="answers HTTP 401 without an API key"):
        e.start()
    assert time.monotonic() - t0 < 30 and not e.alive()


def test_the_capacity_of_an_endpoint_under_the_slo_is_searched_like_any_configs(deployed, tmp_path):
    """The known service curve of tests/integration/test_capacity_mock.py, deployed by someone else: the search
    runs on the endpoint (every rate a recorded external point) and lands within its precision."""
    from atlas.config import parse_spec
    from atlas.endpoint import with_endpoint
    from atlas.hardware import get_gpu
    from atlas.sweep import Sweeper
    from tests.integration.test_capacity_mock import SPEC as CAPACITY_SPEC
    from tests.integration.test_capacity_mock import TRUE_CAPACITY

    g = CAPACITY_SPEC["grid"]
    server = deployed(ttft_ms=g["ttft_ms"][0], itl_ms=g["itl_ms"][0], itl_per_running_ms=g["itl_per_running_ms"][0])
    spec, _ = with_endpoint(parse_spec({**CAPACITY_SPEC, "api_key_env": "EXT_TEST_KEY"}), server.base_url, None)
    report = Sweeper(spec, get_gpu("cpu"), tmp_path / "results").run()
    [cap] = report.capacities
    assert cap.status == "ok", cap.reasons
    assert abs(cap.capacity_rps - TRUE_CAPACITY) / TRUE_CAPACITY <= 0.15, (cap.capacity_rps, TRUE_CAPACITY)
    assert cap.config.server.engine == "external" and cap.label.startswith("external ")
    assert all(r.config.engine == "external" and r.provenance.engine["started_by_atlas"] is False
               for r in report.results)


class _RoundRobin:
    """A load balancer in front of replicas: each request (on its own connection) goes to the next one."""

    def __init__(self, backends: list[str]):
        import http.server
        import itertools

        turn = itertools.cycle(backends)

        class Handler(http.server.BaseHTTPRequestHandler):
            def _forward(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0)) or None
                req = urllib.request.Request(next(turn) + self.path, data=body, method=self.command,
                                             headers={k: v for k, v in self.headers.items() if k.lower() != "host"})
                try:
                    with urllib.request.urlopen(req, timeout=10) as r:
                        status, data, ctype = r.status, r.read(), r.headers.get("Content-Type", "text/plain")
                except urllib.error.HTTPError as e:
                    status, data, ctype = e.code, e.read(), "text/plain"
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = _forward

            def log_message(self, *args) -> None:  # noqa: ANN002
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_replicas_behind_one_url_are_refused_before_the_first_point(deployed, tmp_path, monkeypatch):
    """Two identical replicas behind a round-robin balancer (same model name, same version): each /metrics read
    may come from either, so their throughput would be two servers' at one server's price; the sweep stops in
    one line before measuring. One replica's own URL is measured."""
    import time

    from atlas.engines.base import EngineError

    monkeypatch.setattr("atlas.engines.mock.engine.launch_name", lambda model: f"{model}@deployment")
    a = deployed()
    time.sleep(0.05)  # two processes never start in the same hundredth of a second
    b = deployed()
    assert a.served_model == b.served_model
    lb = _RoundRobin([a.base_url, b.base_url])
    try:
        e = ExternalEngine(lb.url, a.served_model, api_key_env="EXT_TEST_KEY", max_model_len=2048)
        with pytest.raises(EngineError, match="answers from more than one server .*replicas behind one URL"):
            e.start()
        r = _sweep(tmp_path, "--endpoint", lb.url)
        assert r.exit_code != 0 and "replicas behind one URL" in r.output
        assert not (tmp_path / "res").exists() or not list((tmp_path / "res").rglob("*.json"))
    finally:
        lb.close()
    one = ExternalEngine(a.base_url, a.served_model, api_key_env="EXT_TEST_KEY", max_model_len=2048)
    one.start()
    assert one.verify() is None


def test_a_restart_at_the_same_url_and_version_is_caught_between_points(deployed, monkeypatch):
    """Same model name, same version, a new process: only /metrics' process start time tells, and it does."""
    import time

    monkeypatch.setattr("atlas.engines.mock.engine.launch_name", lambda model: f"{model}@deployment")
    first = deployed()
    e = ExternalEngine(first.base_url, first.served_model, api_key_env="EXT_TEST_KEY", max_model_len=2048)
    e.start()
    port = first.port
    first.stop()
    time.sleep(0.05)
    assert deployed(port=port).served_model == e.served_model  # restarted by its owner, nothing else changed
    why = e.verify() or ""
    assert "answers from another server process" in why and "restarted between points" in why
