"""Energy per output token from NVML's cumulative energy counter (`nvmlDeviceGetTotalEnergyConsumption`, mJ
since the driver loaded), sampled while the load runs and interpolated at the edges of each repeat's steady
window. Where nothing reports energy (a CPU sweep, a GPU without the counter) the figure is null with the
reason, never 0."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict

from atlas.loadgen import LoadRun
from atlas.metrics import steady_window, tokens_in_window


class EnergyResult(BaseModel):
    model_config = ConfigDict(extra="forbid")
    joules: float | None = None
    j_per_output_token: float | None = None
    source: str | None = None  # e.g. "NVML total energy counter, 1 GPU"
    reason: str | None = None  # why there is no figure


class NvmlEnergy:
    """Reads the summed energy counter (J) of the NVIDIA GPUs; `nvml` is pynvml or a stand-in (tests)."""

    def __init__(self, nvml: Any):
        self.nvml = nvml
        nvml.nvmlInit()
        self.handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(nvml.nvmlDeviceGetCount())]
        self.source = f"NVML total energy counter, {len(self.handles)} GPU{'s' if len(self.handles) != 1 else ''}"

    def read_j(self) -> float:
        return sum(self.nvml.nvmlDeviceGetTotalEnergyConsumption(h) for h in self.handles) / 1000.0


def energy_meter(is_cpu: bool, nvml: Any | None = None) -> tuple[NvmlEnergy | None, str | None]:
    """The meter for this sweep's hardware, or (None, why there is none)."""
    if is_cpu:
        return None, "no energy counter: a CPU sweep (NVML measures GPUs; CPU package power is not read)"
    if nvml is None:
        try:
            import pynvml as nvml  # type: ignore[no-redef]
        except ImportError:
            return None, "no energy counter: nvidia-ml-py is not installed"
    try:
        meter = NvmlEnergy(nvml)
        meter.read_j()
    except Exception as e:  # NVMLError_NotSupported on GPUs older than Volta, no driver, ...
        return None, f"no energy counter: NVML cannot read it ({type(e).__name__}: {str(e)[:120]})"
    if not meter.handles:
        return None, "no energy counter: NVML sees no GPU"
    return meter, None


class EnergySampler(threading.Thread):
    """(unix time, joules) every `every_s` while a point's load runs."""

    def __init__(self, read_j: Callable[[], float], every_s: float = 0.1, clock: Callable[[], float] = time.time):
        super().__init__(daemon=True)
        self.read_j, self.every_s, self.clock = read_j, every_s, clock
        self.samples: list[tuple[float, float]] = []
        self.stop_flag = threading.Event()
        self.error: str | None = None

    def sample(self) -> None:
        try:
            self.samples.append((self.clock(), self.read_j()))
        except Exception as e:
            self.error = f"{type(e).__name__}: {str(e)[:120]}"

    def run(self) -> None:
        while not self.stop_flag.is_set():
            self.sample()
            self.stop_flag.wait(self.every_s)

    def finish(self) -> list[tuple[float, float]]:
        self.stop_flag.set()
        self.join(timeout=5)
        self.sample()
        return self.samples


def joules_between(samples: Sequence[tuple[float, float]], t0: float, t1: float) -> float | None:
    """Energy between two unix times by linear interpolation of the cumulative counter; None when the samples
    do not cover [t0, t1]."""
    if len(samples) < 2 or t0 < samples[0][0] or t1 > samples[-1][0] or t1 <= t0:
        return None

    def at(t: float) -> float:
        for (ta, ea), (tb, eb) in zip(samples, samples[1:], strict=False):
            if ta <= t <= tb:
                return ea if tb == ta else ea + (eb - ea) * (t - ta) / (tb - ta)
        return samples[-1][1]

    return at(t1) - at(t0)


def energy_of(samples: Sequence[tuple[float, float]], runs: Sequence[LoadRun], source: str,
              error: str | None = None) -> EnergyResult:
    """Joules per output token over the repeats' steady windows (tokens counted as throughput counts them)."""
    if error:
        return EnergyResult(reason=f"energy counter failed while measuring: {error}")
    joules, tokens = 0.0, 0
    for run in runs:
        window = steady_window(run)
        if window is None:
            continue
        start, end = window
        e = joules_between(samples, run.started_at_unix + start, run.started_at_unix + end)
        if e is None:
            return EnergyResult(reason="energy samples do not cover the steady window")
        joules += e
        tokens += sum(tokens_in_window(r, start, end) for r in run.records)
    if tokens == 0:
        return EnergyResult(reason="no output tokens in the steady window")
    if joules < 0:
        return EnergyResult(reason="the energy counter went backwards (driver reloaded?)")
    return EnergyResult(joules=joules, j_per_output_token=joules / tokens, source=source)
