"""The external engine kind without a server: URLs Atlas stores (and refuses), the spec rules, the shared-traffic
verdict, and the dry run of an endpoint spec."""

from __future__ import annotations

import re
from types import SimpleNamespace

import pytest

from atlas.config import SpecError, parse_spec
from atlas.endpoint import endpoint_name
from atlas.engines.external.knobs import ExternalKnobs, normal_url
from atlas.hardware import get_gpu
from atlas.plan import PlannedRun, expand
from atlas.point_checks import shared_check


@pytest.mark.parametrize("given, stored", [
    ("http://10.0.0.5:8000", "http://10.0.0.5:8000"),
    ("http://10.0.0.5:8000/", "http://10.0.0.5:8000"),
    ("HTTPS://Serving.Example.com/v1/", "https://serving.example.com"),
    ("https://gw.example.com/team-a/qwen/v1", "https://gw.example.com/team-a/qwen"),
])
def test_an_endpoint_url_is_stored_in_one_form(given, stored):
    assert normal_url(given) == stored


@pytest.mark.parametrize("bad, why", [
    ("10.0.0.5:8000", "no http(s)://host"),
    ("ftp://host/x", "no http(s)://host"),
    ("http://me:secret@host:8000", "credentials"),
    ("http://host:8000/?api_key=abc", "credentials, a query"),
    ("http://host:99999", "out of range"),
])
def test_a_url_that_would_leak_a_secret_or_means_nothing_is_refused(bad, why):
    with pytest.raises(ValueError, match=re.escape(why)) as e:
        normal_url(bad)
    assert "secret" not in str(e.value) and "abc" not in str(e.value)


def test_each_endpoint_and_model_is_its_own_numerics_and_never_a_baseline():
    a = ExternalKnobs(url="http://h:1", served_model="qwen")
    b = ExternalKnobs(url="http://h:2", served_model="qwen")
    assert a.numerics().key != b.numerics().key  # two endpoints never share a quality result
    assert not a.numerics().is_baseline_candidate
    assert a.label() == "external qwen @ h:1"
    assert endpoint_name("qwen2.5-7b", "https://gw.example.com:8443/team-a") == "qwen2.5-7b-ext-gw.example.com-8443-team-a"


BASE = {"name": "e", "model": {"id": "Qwen/Qwen2.5-7B-Instruct", "source": "hub", "params_b": 7.6},
        "load": {"concurrency": [1, 8]}, "quality": {"enabled": False}}


def test_an_endpoint_spec_needs_no_model_files_but_a_local_engine_does():
    spec = parse_spec({**BASE, "engine": "external", "api_key_env": "MY_KEY",
                       "grid": {"url": ["http://h:8000"], "served_model": ["qwen"]}}, "t.yaml")
    assert spec.engines() == ["external"]
    with pytest.raises(SpecError, match="model.path is required"):
        parse_spec({**BASE, "grid": {"max_num_seqs": [8]}}, "t.yaml")
    with pytest.raises(SpecError, match="api_key_env"):
        parse_spec({**BASE, "engine": "external", "api_key_env": "MY-KEY; rm", "grid": {"url": ["http://h:1"]}},
                   "t.yaml")
    with pytest.raises(SpecError, match="grid.url: an external endpoint needs its url"):
        parse_spec({**BASE, "engine": "external", "grid": {"served_model": ["q"]}}, "t.yaml")
    with pytest.raises(SpecError, match="grid.url: .*credentials"):
        parse_spec({**BASE, "engine": "external", "grid": {"url": ["http://u:p@h:1"]}}, "t.yaml")


def _run(tokens: list[int]) -> SimpleNamespace:
    return SimpleNamespace(records=[SimpleNamespace(output_tokens=t) for t in tokens])


def test_other_traffic_is_seen_in_the_endpoints_own_counter():
    runs = [_run([64] * 10)]  # 640 tokens received
    m = "vllm:generation_tokens_total"
    assert shared_check(m, {m: 100.0}, {m: 740.0}, runs) == (False, None)  # exactly this point's
    assert shared_check(m, {m: 100.0}, {m: 100.0 + 640 * 1.2 + 64}, runs) == (False, None)  # within the slack
    shared, why = shared_check(m, {m: 0.0}, {m: 2000.0}, runs)
    assert shared and "rose by 2000 while this point received 640 tokens" in (why or "")
    assert shared_check(None, {}, {}, runs)[0] is False and "not ruled out" in (shared_check(None, {}, {}, runs)[1] or "")
    assert "could not be read" in (shared_check(m, {}, {m: 5.0}, runs)[1] or "")
    replicas, why = shared_check(m, {m: 9000.0}, {m: 300.0}, runs)  # read from another replica the second time
    assert replicas is None and "more than one server" in (why or "")


def test_the_dry_run_of_an_endpoint_plans_its_load_points_and_screens_no_memory(capsys):
    from rich.console import Console

    from atlas.cli_dryrun import print_dry_run, sweep_estimate
    from atlas.dryrun import plan_servers

    spec = parse_spec({**BASE, "engine": "external", "grid": {"url": ["http://h:8000"], "served_model": ["q"]}},
                      "t.yaml")
    items = expand(spec, get_gpu("h100"), None)
    assert len(items) == 2 and all(isinstance(i, PlannedRun) for i in items)
    plans = plan_servers(spec, get_gpu("h100"), items)
    assert len(plans) == 1 and "not Atlas's to fit" in plans[0].memory.verdict and plans[0].argv == []
    from pathlib import Path

    print_dry_run(Console(width=200), spec, get_gpu("h100"), items,
                  sweep_estimate(spec, get_gpu("h100"), items, Path("/nonexistent"), None, None, False))
    out = capsys.readouterr().out
    assert "external q @ h:8000" in out and "not Atlas's to fit" in out


def test_replicas_without_a_process_start_time_are_seen_by_a_counter_going_down():
    """llama-server's /metrics has no process start time: two replicas behind one URL show as its generated-token
    counter going down between reads; one server's counter only rises (other clients' traffic included)."""
    from atlas.engines.base import EngineError
    from atlas.engines.external.engine import ExternalEngine

    def engine(counts: list[int]) -> ExternalEngine:
        e = ExternalEngine("http://lb:8080", "m", api_key_env=None, max_model_len=1024)
        reads = iter(counts)
        e._http = SimpleNamespace(call=lambda path, body=None: (200, f"llamacpp:tokens_predicted_total {next(reads)}\n"))
        e._family = ("llama.cpp", "llamacpp:tokens_predicted_total", ("llamacpp:tokens_predicted_total",))
        return e

    with pytest.raises(EngineError, match="went down between two of 8 reads.*replicas behind one URL"):
        engine([900, 40, 900, 41, 901, 41, 902, 42])._one_server()
    one = engine([900, 900, 905, 930, 930, 931, 960, 990])
    one._one_server()
    assert any("replicas behind one URL are seen only when a counter goes down" in n for n in one._notes)
