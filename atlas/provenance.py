"""Where a measurement came from: Atlas version and git sha, host CPU/GPUs, Python, time."""

from __future__ import annotations

import datetime as dt
import platform
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Any

from atlas import __version__
from atlas.hardware import GpuSpec, cpu_model_name, nvidia_gpu_details
from atlas.probe import HardwareProbe
from atlas.results import Provenance


def git_sha() -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=Path(__file__).resolve().parent, capture_output=True,
                             text=True, timeout=5)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if out.returncode != 0:
        return None
    sha = out.stdout.strip()
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                           cwd=Path(__file__).resolve().parent, capture_output=True, text=True, timeout=5)
    return sha + ("-dirty" if dirty.stdout.strip() else "")


def now_iso() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


def base_provenance(model_id: str, model_path: str | None, model_files: dict, engine_version: str | None,  # type: ignore[type-arg]
                    sha: str | None, probe: HardwareProbe | None = None,
                    settings: dict[str, Any] | None = None) -> Provenance:
    gpus = nvidia_gpu_details()
    return Provenance(atlas_version=__version__, git_sha=sha, engine_version=engine_version, model_id=model_id,
                      model_path=model_path, model_files=model_files, host_cpu=cpu_model_name(),
                      host_gpus=[str(g["name"]) for g in gpus], gpu_details=gpus, torch_version=_torch(),
                      python=platform.python_version(), started_at=now_iso(), hardware_probe=probe, settings=settings)


def endpoint_provenance(prov: Provenance, gpu: GpuSpec) -> Provenance:
    """An external endpoint's provenance: the version it reports as the engine's, the GPU as the user stated it
    (Atlas cannot see the endpoint's hardware; the host_* fields are the load client's machine)."""
    version = (prov.engine.get("version") or {}).get("version")
    engine = {**prov.engine, "gpu": f"{gpu.key} as stated with --gpu; not verified (the endpoint's hardware is not "
                                    "visible to Atlas)"}
    return prov.model_copy(update={"engine": engine, "hardware_probe": None,
                                   "engine_version": f"external ({version})" if version else "external (unreported)"})


def _torch() -> str | None:
    try:
        return metadata.version("torch")
    except metadata.PackageNotFoundError:
        return None
