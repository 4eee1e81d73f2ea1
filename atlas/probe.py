"""A short hardware probe recorded at the start of each sweep: the memory bandwidth and matrix-multiply rate
this machine really delivers (CPU: numpy on all cores; GPU: torch on the device, with NVML's clocks and power
limit). Two machines of the same kind can differ 2.5x; the probe is what lets a calibration made on one be
moved to another, and flags a prediction whose calibration came from a machine that probes differently."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence

from pydantic import BaseModel, ConfigDict

from atlas.hardware import GpuSpec

DRIFT_TOLERANCE = 0.10  # probes further apart than this (beyond their own noise): another machine
REPROBES = 2  # extra probes taken before a machine is called different from the calibration's


class HardwareProbe(BaseModel):
    model_config = ConfigDict(extra="forbid")
    device: str  # "cpu" or the GPU's name
    bandwidth_gb_s: float  # bytes read + written per second by a large copy
    matmul_gflop_s: float  # dense matrix multiply (CPU: float32; GPU: bf16)
    method: str  # what was timed, so probes taken differently are never compared
    seconds: float  # how long the probe took
    clocks_mhz: float | None = None  # GPU: maximum SM clock (NVML)
    # the noise seen within the probe: median run / fastest run - 1, the worse of copy and matmul (None: older probe)
    spread: float | None = None
    power_limit_w: float | None = None  # GPU: enforced power limit (NVML)


def _times_s(fn: Callable[[], object], repeats: int, warmup: int = 1) -> list[float]:
    """Wall times of `repeats` runs. The fastest is what the machine can do (interference only ever slows a run
    down, so the minimum is the stable figure on a shared host; a median moved 20% between two probes minutes
    apart); how far the median sits above it is the noise the probe saw."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return times


def _spread(*runs: list[float]) -> float:
    return max(statistics.median(t) / min(t) - 1 for t in runs)


CPU_COPY_MIB, CPU_MATMUL_N = 256, 1024


def cpu_probe(copy_mib: int = CPU_COPY_MIB, n: int = CPU_MATMUL_N, repeats: int = 9) -> HardwareProbe:
    import numpy as np

    start = time.perf_counter()
    src = np.ones(copy_mib * 2**20 // 8, dtype=np.float64)
    dst = np.empty_like(src)
    copy = _times_s(lambda: np.copyto(dst, src), repeats)
    a = np.random.default_rng(0).standard_normal((n, n), dtype=np.float32)
    b = np.random.default_rng(1).standard_normal((n, n), dtype=np.float32)
    mm = _times_s(lambda: a @ b, repeats)
    return HardwareProbe(device="cpu", bandwidth_gb_s=2 * src.nbytes / min(copy) / 1e9,
                         matmul_gflop_s=2 * n**3 / min(mm) / 1e9,
                         method=f"numpy {np.__version__}: copy {copy_mib} MiB float64, float32 matmul {n}^3, "
                                f"best of {repeats}", seconds=time.perf_counter() - start, spread=_spread(copy, mm))


def gpu_probe(copy_gib: float = 1.0, n: int = 4096, repeats: int = 10) -> HardwareProbe:
    import torch

    from atlas.hardware import nvidia_gpu_details

    def timed(fn: Callable[[], object]) -> list[float]:
        for _ in range(3):
            fn()
        times = []
        for _ in range(repeats):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            fn()
            e.record()
            torch.cuda.synchronize()
            times.append(s.elapsed_time(e) / 1e3)
        return times

    start = time.perf_counter()
    size = int(copy_gib * 2**30)
    src = torch.ones(size, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    copy = timed(lambda: dst.copy_(src))
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    mm = timed(lambda: a @ b)
    details = nvidia_gpu_details()
    d = details[0] if details else {}
    return HardwareProbe(device=torch.cuda.get_device_name(), bandwidth_gb_s=2 * size / min(copy) / 1e9,
                         matmul_gflop_s=2 * n**3 / min(mm) / 1e9, spread=_spread(copy, mm),
                         method=f"torch {torch.__version__}: copy {copy_gib:g} GiB, bf16 matmul {n}^3, best of {repeats}",
                         seconds=time.perf_counter() - start, clocks_mhz=_num(d.get("sm_clock_max_mhz")),
                         power_limit_w=_num(d.get("power_limit_w")))


def _num(v: object) -> float | None:
    return float(v) if isinstance(v, int | float) else None


def measure(gpu: GpuSpec) -> HardwareProbe | None:
    """The probe of the machine a sweep for `gpu` runs on (None where it cannot be taken: no CUDA for a GPU
    sweep, which then fails on its own with the reason)."""
    if gpu.is_cpu:
        return cpu_probe()
    try:
        import torch

        if not torch.cuda.is_available():
            return None
    except ImportError:
        return None
    return gpu_probe()


def probe_if_here(gpu: GpuSpec, against: Sequence[HardwareProbe | None] = ()) -> HardwareProbe | None:
    """This machine's probe when it is of the `gpu` kind (a CPU host for cpu; that GPU seen by NVML), else None.
    Where it drifts from a probe in `against` (the calibrations'), it is taken again, up to REPROBES times, each
    rate the best seen: a neighbour busy for one probe must not make this machine look like another one."""
    from atlas.hardware import HardwareError, check_gpu_present

    if not gpu.is_cpu:
        try:
            check_gpu_present(gpu)
        except HardwareError:
            return None
    here = measure(gpu)
    for _ in range(REPROBES):
        if here is None or not any(drift_reasons(drift(ref, here), drift_tolerance(ref, here)) for ref in against):
            break
        again = measure(gpu)
        if again is None:
            break
        here = here.model_copy(update={"bandwidth_gb_s": max(here.bandwidth_gb_s, again.bandwidth_gb_s),
                                       "matmul_gflop_s": max(here.matmul_gflop_s, again.matmul_gflop_s),
                                       "seconds": here.seconds + again.seconds,
                                       "spread": _worse(here.spread, again.spread)})
    return here


def _worse(a: float | None, b: float | None) -> float | None:
    return None if a is None and b is None else max(a or 0.0, b or 0.0)


def drift_tolerance(calibrated: HardwareProbe | None, here: HardwareProbe | None) -> float:
    """How far two probes may differ and still be one machine: DRIFT_TOLERANCE beyond the noise each probe saw
    in itself (a probe taken while a neighbour was busy cannot tell machines apart more finely than that)."""
    return DRIFT_TOLERANCE + sum(p.spread for p in (calibrated, here) if p is not None and p.spread is not None)


def drift(calibrated: HardwareProbe | None, here: HardwareProbe | None) -> dict[str, float] | None:
    """here / calibrated for bandwidth and matmul rate; None when either is unknown or they were taken
    differently (another method or device)."""
    if calibrated is None or here is None or calibrated.method != here.method or calibrated.device != here.device:
        return None
    return {"bandwidth": here.bandwidth_gb_s / calibrated.bandwidth_gb_s,
            "matmul": here.matmul_gflop_s / calibrated.matmul_gflop_s}


def drift_reasons(ratios: dict[str, float] | None, tolerance: float = DRIFT_TOLERANCE) -> list[str]:
    if ratios is None:
        return []
    return [f"the calibration's machine probed {name} {1 / r:.2f}x this one's (more than {tolerance:.0%} apart, "
            f"beyond the probes' own noise)" for name, r in ratios.items() if abs(r - 1) > tolerance]


def median_probe(probes: list[HardwareProbe]) -> HardwareProbe | None:
    """One probe standing for the machine of many results (the median of those taken the same way)."""
    if not probes:
        return None
    first = probes[0]
    same = [p for p in probes if p.method == first.method and p.device == first.device]
    spreads = [p.spread for p in same if p.spread is not None]
    return first.model_copy(update={"bandwidth_gb_s": statistics.median(p.bandwidth_gb_s for p in same),
                                    "matmul_gflop_s": statistics.median(p.matmul_gflop_s for p in same),
                                    "spread": max(spreads) if spreads else None})
