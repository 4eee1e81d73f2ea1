"""HumanEval through a whole sweep against mock engines (real HTTP servers): the oracle passes, a config
whose code is broken on most problems is gated out of the frontier with a significant accuracy drop."""

from atlas.config import parse_spec
from atlas.engines.mock.engine import MockEngine
from atlas.engines.mock.server import MockOptions
from atlas.hardware import get_gpu
from atlas.sweep import Sweeper

SPEC = {
    "name": "humaneval-mock", "gpu": "cpu",
    "model": {"id": "mock", "source": "path", "path": "/unused"},
    "grid": {"dtype": ["float32"], "quantization": ["none", "fp8"], "max_num_seqs": [8]},
    "load": {"concurrency": [2], "num_requests": 12, "warmup_requests": 1, "output_tokens": 8,
             "min_requests": 4, "min_duration_s": 0.05, "repeats": 1},
    "quality": {"sets": ["humaneval"], "max_items_per_set": 20, "max_tokens": 256, "perplexity": False},
}


def test_humaneval_in_a_sweep(tmp_path):
    def factory(spec, gpu, cfg, model_path, log_path):
        broken = cfg.server.quantization == "fp8"
        return MockEngine(MockOptions(ttft_ms=5, itl_ms=2, degrade=0.7 if broken else 0.0), log_path)

    report = Sweeper(parse_spec(SPEC), get_gpu("cpu"), tmp_path, engine_factory=factory).run()
    by_quant = {r.config.server.quantization: r for r in report.results}
    base, bad = by_quant["none"], by_quant["fp8"]
    assert base.status == "ok" and base.quality.sets["humaneval"].accuracy == 1.0
    assert all(o.extracted == "pass" for o in base.quality.items)
    assert bad.status == "quality_failed"
    assert bad.quality.comparison.accuracy_delta < -0.4 and bad.quality.comparison.mcnemar_p < 0.05
    assert any(o.extracted == "AssertionError" or "Error" in (o.extracted or "") for o in bad.quality.items)
