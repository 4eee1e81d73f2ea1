"""`atlas sweep --dry-run`: the plan, the engine command lines, memory fit and the estimate, with nothing started."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from atlas.cli import app
from atlas.config import LoadPoint, load_spec, parse_spec
from atlas.estimate import actual_vs_estimate, estimate, shortened
from atlas.hardware import get_gpu
from atlas.knobs import LoadMode
from atlas.plan import expand

runner = CliRunner()

SPEC = """name: plan-me
engine: vllm
gpu: h100
model:
  id: Qwen2.5-7B-Instruct
  source: hub
  path: Qwen/Qwen2.5-7B-Instruct
  max_model_len: 8192
  params_b: {params}
  num_layers: 28
  num_kv_heads: 4
  head_dim: 128
grid:
  dtype: [bfloat16]
  quantization: [none, awq]
  kv_cache_dtype: [auto, fp8]
  max_num_seqs: [16, 256]
load:
  mode: closed
  concurrency: [1, 16]
  num_requests: {requests}
  prompt_tokens: 512
  output_tokens: 128
  repeats: 2
quality:
  sets: [arith]
"""


def _spec(tmp_path: Path, params: float = 7.62, requests: int = 64) -> Path:
    p = tmp_path / "spec.yaml"
    p.write_text(SPEC.format(params=params, requests=requests))
    return p


@pytest.fixture
def no_launch(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*a: object, **k: object) -> None:
        raise AssertionError("a dry run started a process")
    monkeypatch.setattr(subprocess, "Popen", refuse)


def test_dry_run_prints_each_command_line_fit_skips_and_cost(tmp_path: Path, no_launch: None) -> None:
    r = runner.invoke(app, ["sweep", str(_spec(tmp_path)), "--gpu", "h100", "--dry-run",
                            "--results", str(tmp_path / "results")])
    assert r.exit_code == 0, r.output
    out = r.output
    assert "16 points, 8 planned on 4 server configs, 8 skipped; nothing was started" in out
    commands = [line for line in out.splitlines() if line.strip().startswith("command:")]
    assert len(commands) == 4
    assert all("--port '<port>'" in c and "Qwen2.5-7B-Instruct@atlas-<launch>" in c for c in commands)
    assert sum("--kv-cache-dtype fp8" in c for c in commands) == 2
    assert sum("--max-num-seqs 256" in c for c in commands) == 2
    # 15.8 GiB of bf16 weights: KV for ~1.04M tokens at 56 KiB each; 256 sequences of 8192 do not all fit
    assert "fits: 14.2 GiB weights, KV cache ~1,044,955 tokens (56 KiB/token)" in out
    assert "(< max_num_seqs 256: long requests will queue or be preempted)" in out
    assert "no AWQ checkpoint given" in out  # the skipped configs, with their reason
    assert "GPU-hours on h100, $" in out and "assumed: vllm start-up 120 s" in out
    assert not (tmp_path / "results").exists()  # nothing written


def test_dry_run_names_a_model_that_does_not_fit(tmp_path: Path, no_launch: None) -> None:
    r = runner.invoke(app, ["sweep", str(_spec(tmp_path, params=70.0)), "--gpu", "l4", "--dry-run"])
    assert r.exit_code == 0, r.output
    assert "0 planned" in r.output and "does not fit: 130.4 GiB of weights" in r.output


def test_dry_run_refuses_a_search_and_an_unknown_gpu(tmp_path: Path) -> None:
    spec = str(_spec(tmp_path))
    r = runner.invoke(app, ["sweep", spec, "--dry-run", "--budget", "3"])
    assert r.exit_code == 2 and "--dry-run plans a full sweep" in r.output
    r = runner.invoke(app, ["sweep", spec, "--dry-run", "--gpu", "h900"])
    assert r.exit_code == 2 and "unknown GPU 'h900'" in r.output


def test_estimate_grows_with_the_work_and_prices_gpu_hours(tmp_path: Path) -> None:
    g = get_gpu("h100")
    small, big = (load_spec(_spec(tmp_path, requests=n)) for n in (64, 256))
    a = estimate(small, g, expand(small, g))
    b = estimate(big, g, expand(big, g))
    pts = lambda e: sum(p.seconds or 0 for s in e.servers for p in s.points)  # noqa: E731
    assert 3.0 < pts(b) / pts(a) < 4.5  # four times the requests, the same start-ups
    assert a.usd == pytest.approx(a.gpu_hours * a.usd_per_gpu_hour)
    assert all(s.startup_s == 120 for s in a.servers) and a.unestimated == 0
    # quality once per numerics: two of the four servers share their numerics with another
    assert sum(s.quality_s > 0 for s in a.servers) == 2
    resumed = estimate(small, g, expand(small, g), done={i.run_id for i in expand(small, g)})
    assert resumed.seconds == 0


def test_a_shortened_point_scales_back_to_its_requests() -> None:
    lp = LoadPoint(mode=LoadMode.CLOSED, concurrency=4, num_requests=200, warmup_requests=8)
    short, scale = shortened(lp)
    assert short.num_requests == 24 and scale == pytest.approx(208 / 32)
    assert shortened(lp.model_copy(update={"num_requests": 10})) == (lp.model_copy(update={"num_requests": 10}), 1.0)


def test_a_sweep_with_nothing_left_to_measure_says_so_rather_than_an_infinite_ratio():
    spec = parse_spec({"name": "t", "model": {"id": "m", "source": "embedded"}})
    items = expand(spec, get_gpu("cpu"))
    est = estimate(spec, get_gpu("cpu"), items, done={i.run_id for i in items})
    assert est.seconds == 0
    assert actual_vs_estimate(est, 2.0) == "took 2 s; nothing was estimated to measure"
    full = estimate(spec, get_gpu("cpu"), items)
    assert "x the estimate" in actual_vs_estimate(full, full.seconds) and "inf" not in actual_vs_estimate(full, 1.0)
