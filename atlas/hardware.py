"""GPU specs and price tables (shipped in atlas/configs/, or the user's files), and detection of the machine
actually present."""

from __future__ import annotations

import os
import platform
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

PACKAGED = Path(__file__).resolve().parent / "configs"  # shipped in the package (the checkout's configs/ links here)
FILE_ENV = {"gpus.yaml": "ATLAS_GPUS_FILE", "prices.yaml": "ATLAS_PRICES_FILE"}  # set by atlas --gpus / --prices


def config_file(name: str) -> Path:
    """A default file: the one named by --gpus / --prices (their variables), else $ATLAS_CONFIG_DIR/name where
    that exists, else the copy shipped in the package (so an installed wheel finds every default)."""
    if (named := os.environ.get(FILE_ENV.get(name, ""), "")):
        return Path(named)
    if (folder := os.environ.get("ATLAS_CONFIG_DIR")) and (Path(folder) / name).exists():
        return Path(folder) / name
    return PACKAGED / name


class HardwareError(ValueError):
    """Unknown GPU, a price missing, or a GPU that is not the one present."""


class GpuSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    key: str = ""
    name: str
    memory_gib: float = Field(gt=0)
    bandwidth_gb_s: float = Field(gt=0)
    bf16_tflops: float = Field(gt=0)
    fp8_tflops: float | None = None
    tdp_w: float | None = None
    fp8_native: bool
    nvml_names: list[str] = []
    source: str

    @property
    def is_cpu(self) -> bool:
        return self.key == "cpu"


def _read_yaml(path: Path) -> dict:  # type: ignore[type-arg]
    try:
        data = yaml.safe_load(path.read_text())
    except OSError as e:
        raise HardwareError(f"{path}: cannot read: {e.strerror}") from None
    except yaml.YAMLError as e:
        raise HardwareError(f"{path}: malformed YAML: {e}") from None
    if not isinstance(data, dict):
        raise HardwareError(f"{path}: expected a mapping")
    return data


def load_gpus(path: Path | None = None) -> dict[str, GpuSpec]:
    return _load_gpus(path or config_file("gpus.yaml"))


@lru_cache(maxsize=8)
def _load_gpus(path: Path) -> dict[str, GpuSpec]:
    data = _read_yaml(path).get("gpus", {})
    out = {}
    for key, entry in data.items():
        try:
            out[key] = GpuSpec(key=key, **entry)
        except (ValidationError, TypeError) as e:
            raise HardwareError(f"{path}: gpus.{key}: {e}") from None
    return out


def gpu_named(nvml_name: str, path: Path | None = None) -> GpuSpec | None:
    """The gpus.yaml entry of a GPU as NVML (or torch) names it, or None."""
    return next((g for g in load_gpus(path).values() if nvml_name in g.nvml_names), None)


def get_gpu(key: str, path: Path | None = None) -> GpuSpec:
    gpus = load_gpus(path)
    if key not in gpus:
        raise HardwareError(f"unknown GPU {key!r}; known: {', '.join(sorted(gpus))}")
    return gpus[key]


def price_usd_per_hour(gpu: str, provider: str | None = None, path: Path | None = None) -> tuple[float, str]:
    """The $/GPU-hour for `gpu` and a source string naming the provider and date."""
    path = path or config_file("prices.yaml")
    data = _read_yaml(path)
    provider = provider or data.get("default_provider")
    providers = data.get("providers", {})
    if provider not in providers:
        raise HardwareError(f"{path}: unknown price provider {provider!r}; known: {', '.join(sorted(providers))}")
    table = providers[provider].get("usd_per_gpu_hour", {})
    if gpu not in table:
        raise HardwareError(f"{path}: provider {provider!r} has no price for GPU {gpu!r}")
    price = float(table[gpu])
    if price <= 0:
        raise HardwareError(f"{path}: price for {gpu!r} at {provider!r} must be > 0")
    return price, f"{provider} as of {providers[provider].get('as_of', 'unknown date')}"


def cpu_model_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def cpu_flags() -> set[str]:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def detect_nvidia_gpus() -> list[str]:
    """Names of the NVIDIA GPUs present (NVML); empty when there is no driver or no nvidia-ml-py."""
    return [str(d["name"]) for d in nvidia_gpu_details()]


def nvidia_gpu_details(nvml: object | None = None) -> list[dict[str, object]]:
    """Per GPU: SKU, driver and CUDA driver versions, memory, max clocks, power limit (NVML). `nvml` is the
    pynvml module or a stand-in with the same functions (tests)."""
    if nvml is None:
        try:
            import pynvml as nvml  # type: ignore[no-redef]
        except ImportError:
            return []
    m: Any = nvml
    try:
        m.nvmlInit()
    except Exception:
        return []

    def text(v: object) -> str:
        return v.decode() if isinstance(v, bytes) else str(v)

    try:
        driver = text(m.nvmlSystemGetDriverVersion())
        cuda = int(m.nvmlSystemGetCudaDriverVersion())
        out = []
        for i in range(m.nvmlDeviceGetCount()):
            h = m.nvmlDeviceGetHandleByIndex(i)
            out.append({
                "index": i, "name": text(m.nvmlDeviceGetName(h)),
                "driver": driver, "cuda_driver": f"{cuda // 1000}.{cuda % 1000 // 10}",
                "memory_gib": round(m.nvmlDeviceGetMemoryInfo(h).total / 2**30, 1),
                "sm_clock_max_mhz": m.nvmlDeviceGetMaxClockInfo(h, m.NVML_CLOCK_SM),
                "mem_clock_max_mhz": m.nvmlDeviceGetMaxClockInfo(h, m.NVML_CLOCK_MEM),
                "power_limit_w": m.nvmlDeviceGetPowerManagementLimit(h) / 1000.0,
            })
        return out
    finally:
        m.nvmlShutdown()


def check_gpu_present(spec: GpuSpec, present: list[str] | None = None) -> None:
    """Raise when the sweep names a GPU that is not the one in this machine."""
    if spec.is_cpu:
        return
    present = detect_nvidia_gpus() if present is None else present
    if not present:
        raise HardwareError(f"--gpu {spec.key} asked for, but no NVIDIA GPU is visible (NVML found none)")
    if not any(p in spec.nvml_names for p in present):
        raise HardwareError(f"--gpu {spec.key} ({spec.name}) asked for, but this machine has: {', '.join(present)}")
