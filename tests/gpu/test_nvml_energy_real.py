"""On a real NVIDIA GPU (marked gpu): the energy meter Atlas uses for J/token reads NVML's cumulative counter,
the sampler sees it rise while the GPU works, and the power it implies is plausible (above idle, not above the
board's power limit by more than NVML's own reading slack). Needs torch with CUDA for the load."""

import time

import pytest

from atlas.energy import EnergySampler, energy_meter, joules_between
from atlas.hardware import nvidia_gpu_details

pytestmark = pytest.mark.gpu


def test_nvml_energy_counter_rises_under_load_at_a_plausible_power():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch sees no CUDA device")
    meter, why = energy_meter(is_cpu=False)
    assert meter is not None, why
    limit_w = sum(float(d["power_limit_w"]) for d in nvidia_gpu_details())
    sampler = EnergySampler(meter.read_j, every_s=0.1)
    sampler.start()
    time.sleep(1.0)  # idle stretch
    idle = (time.time() - 1.0, time.time())
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    t0 = time.time()
    while time.time() - t0 < 4.0:
        for _ in range(20):
            a = (a @ a).clamp_(-1, 1)
        torch.cuda.synchronize()
    t1 = time.time()
    samples = sampler.finish()
    busy_j = joules_between(samples, t0 + 0.5, t1)
    idle_j = joules_between(samples, *idle)
    assert busy_j is not None and idle_j is not None, (len(samples), samples[:2])
    busy_w, idle_w = busy_j / (t1 - t0 - 0.5), idle_j / (idle[1] - idle[0])
    distinct = len({round(e, 3) for _, e in samples})
    print(f"\nNVML energy: {len(samples)} samples ({distinct} distinct) at 10 Hz; idle {idle_w:.0f} W, "
          f"bf16 matmul load {busy_w:.0f} W, power limit {limit_w:.0f} W; {meter.source}")
    assert distinct > 10, "the counter did not update during the load"
    assert busy_w > idle_w > 0
    assert 50 < busy_w < 1.1 * limit_w
