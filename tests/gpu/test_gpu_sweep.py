"""Real GPU sweeps (marked gpu; skipped without an NVIDIA GPU, and by itself without vLLM). Model:
ATLAS_GPU_MODEL, a local folder or hub id of a 0.5B-1.5B instruct model (default Qwen/Qwen2.5-0.5B-Instruct;
a machine that cannot reach the hub needs a local folder)."""

import os

import pytest
import yaml
from typer.testing import CliRunner

from atlas.cli import app
from atlas.hardware import detect_nvidia_gpus, gpu_named
from atlas.results import load_results

pytestmark = pytest.mark.gpu


def _gpu_key() -> str:
    names = detect_nvidia_gpus()
    for name in names:
        if spec := gpu_named(name):
            return spec.key
    pytest.skip(f"no GPU spec in configs/gpus.yaml matches {names}")


def test_small_real_gpu_sweep(tmp_path):
    pytest.importorskip("vllm", reason="vLLM is not installed here: the real GPU sweep cannot run")
    gpu = _gpu_key()
    model = os.environ.get("ATLAS_GPU_MODEL", "Qwen/Qwen2.5-0.5B-Instruct")
    spec = {"name": "gpu-check", "model": {"id": "gpu-check-model", "source": "hub", "path": model,
                                           "max_model_len": 2048},
            "grid": {"quantization": ["none", "fp8"], "kv_cache_dtype": ["auto", "fp8", "fp8_calibrated"],
                     "max_num_seqs": [64], "gpu_memory_utilization": [0.5]},
            "load": {"concurrency": [1, 32], "num_requests": 96, "warmup_requests": 8, "prompt_tokens": 256,
                     "output_tokens": 128, "repeats": 1, "min_requests": 32},
            "quality": {"sets": ["arith", "mc"], "max_items_per_set": 60, "max_tokens": 128}}
    p = tmp_path / "gpu.yaml"
    p.write_text(yaml.safe_dump(spec))
    r = CliRunner().invoke(app, ["sweep", str(p), "--gpu", gpu, "--results", str(tmp_path / "results")])
    assert r.exit_code == 0, r.output
    results, errors = load_results(tmp_path / "results")
    assert not errors and len(results) == 12
    base = [x for x in results if x.config.server.quantization.value == "none"
            and x.config.server.kv_cache_dtype.value == "auto"]
    assert all(x.status == "ok" for x in base)
    for x in results:
        if x.status != "skipped" and x.provenance:
            assert x.provenance.gpu_details and x.provenance.engine.get("kv_cache_tokens")
    for x in results:
        print(x.status, x.label, x.metrics.output_tok_s if x.metrics else None,
              x.quality.accuracy if x.quality else None, x.reasons[:1])
