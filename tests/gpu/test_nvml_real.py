"""On a real NVIDIA GPU, no vLLM needed (marked gpu): NVML finds the GPU, configs/gpus.yaml knows it and its
memory matches, provenance has every field, and `--gpu` naming another GPU is refused with both names."""

import pytest
from typer.testing import CliRunner

from atlas.cli import app
from atlas.hardware import HardwareError, check_gpu_present, gpu_named, load_gpus, nvidia_gpu_details

pytestmark = pytest.mark.gpu


def _present():
    details = nvidia_gpu_details()
    assert details, "nvidia-smi is here but NVML (nvidia-ml-py) found no GPU"
    for d in details:
        if spec := gpu_named(str(d["name"])):
            return d, spec.key, spec
    pytest.fail(f"no entry of configs/gpus.yaml has nvml_names {[d['name'] for d in details]}")


def test_nvml_sees_a_gpu_that_gpus_yaml_knows():
    d, key, spec = _present()
    print(f"\nNVML: {d}\ngpus.yaml: {key} = {spec.name}, {spec.memory_gib} GiB")
    assert abs(float(d["memory_gib"]) - spec.memory_gib) / spec.memory_gib < 0.05
    for field in ("driver", "cuda_driver", "sm_clock_max_mhz", "mem_clock_max_mhz", "power_limit_w"):
        assert d[field], field
    check_gpu_present(spec)


def test_a_sweep_naming_another_gpu_is_refused_before_anything_starts(tmp_path):
    _, key, _ = _present()
    other = next(k for k in ("l4", "a100-80", "h100") if k != key)
    with pytest.raises(HardwareError, match=other):
        check_gpu_present(load_gpus()[other])
    r = CliRunner().invoke(app, ["sweep", "configs/qwen2.5-7b.yaml", "--gpu", other,
                                 "--results", str(tmp_path)])
    assert r.exit_code != 0 and f"--gpu {other}" in r.output, r.output
    assert not any(tmp_path.rglob("*.json"))
