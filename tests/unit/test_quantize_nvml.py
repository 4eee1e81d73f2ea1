import json
import sys
import types

import pytest

from atlas.hardware import nvidia_gpu_details
from atlas.quantize import QuantizeError, calibration_texts, quantize, read_provenance
from tests.unit.fakes import fake_llmcompressor


class FakeNvml:
    NVML_CLOCK_SM, NVML_CLOCK_MEM = 1, 2

    def nvmlInit(self): pass
    def nvmlShutdown(self): pass
    def nvmlSystemGetDriverVersion(self): return b"570.86.15"
    def nvmlSystemGetCudaDriverVersion(self): return 12080
    def nvmlDeviceGetCount(self): return 1
    def nvmlDeviceGetHandleByIndex(self, i): return i
    def nvmlDeviceGetName(self, h): return "NVIDIA H100 80GB HBM3"
    def nvmlDeviceGetMemoryInfo(self, h): return types.SimpleNamespace(total=80 * 2**30)
    def nvmlDeviceGetMaxClockInfo(self, h, kind): return 1980 if kind == 1 else 2619
    def nvmlDeviceGetPowerManagementLimit(self, h): return 700_000


def test_nvml_details_through_a_fake():
    (d,) = nvidia_gpu_details(FakeNvml())
    assert d == {"index": 0, "name": "NVIDIA H100 80GB HBM3", "driver": "570.86.15", "cuda_driver": "12.8",
                 "memory_gib": 80.0, "sm_clock_max_mhz": 1980, "mem_clock_max_mhz": 2619, "power_limit_w": 700.0}


def test_calibration_texts_are_shipped_text():
    t = calibration_texts(300)
    assert len(t) == 300 and all(isinstance(x, str) and x for x in t)


def test_quantize_builds_the_recipe_and_writes_provenance(tmp_path, monkeypatch):
    calls = {}
    fake_llmcompressor(monkeypatch, calls)
    out = quantize("Qwen/Qwen2.5-7B-Instruct", "gptq", tmp_path / "out", samples=64, revision="abc123")
    (mod,) = calls["recipe"]
    assert type(mod).__name__ == "GPTQModifier" and mod.kw["scheme"] == "W4A16" and "kv_cache_scheme" not in mod.kw
    assert calls["dataset"] == ("dataset", 64) and calls["num_calibration_samples"] == 64
    prov = read_provenance(str(out))
    assert prov["method"] == "gptq" and prov["group_size"] == 128 and prov["source_revision"] == "abc123"
    assert prov["calibration"]["samples"] == 64 and len(prov["calibration"]["sha256"]) == 64
    assert json.loads((out / "atlas-quantize.json").read_text()) == prov
    with pytest.raises(QuantizeError, match="not empty"):
        quantize("m", "fp8", out)


def test_quantize_errors_are_clear(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "llmcompressor.modifiers.quantization", None)
    with pytest.raises(QuantizeError, match="needs llm-compressor"):
        quantize("m", "fp8", tmp_path / "a")
    with pytest.raises(QuantizeError, match="AWQ checkpoints only"):
        quantize("m", "gptq", tmp_path / "b", tool="autoawq")
