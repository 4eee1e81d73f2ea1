"""Everything a sweep will need, checked before the first engine starts: the price of its GPU, its eval sets
and files, the local model files it names. A sweep that would fail only after measuring (its price read after
the first point, say) fails here instead, with one line naming what is missing."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

from atlas.config import SpecError, SweepSpec
from atlas.hardware import GpuSpec, price_usd_per_hour
from atlas.lm_eval_adapter import is_lm_eval
from atlas.quality import QualityError, load_set


def _local(path: str) -> bool:
    """A path that names a file on this machine (a hub id like org/name is not checked offline)."""
    return path.startswith(("/", "./", "../", "~"))


def preflight(spec: SweepSpec, gpu: GpuSpec, price_provider: str | None = None, model_files: bool = True) -> None:
    """Raises HardwareError, QualityError or SpecError (one line each) for the first thing missing;
    `model_files`: also the local model files the spec names (not for engines that serve no model files)."""
    price_usd_per_hour(gpu.key, price_provider or spec.price_provider)
    q = spec.quality
    if "external" in spec.engines() and spec.api_key_env:
        if not os.environ.get(spec.api_key_env):
            raise SpecError(f"api_key_env: the environment variable {spec.api_key_env} is not set (or empty) here")
        if q.enabled and (lm := [n for n in q.sets if is_lm_eval(n)]):
            raise SpecError(f"quality.sets: {', '.join(lm)} cannot send the endpoint's API key (lm-eval reads its "
                            "own); use Atlas's eval sets or a jsonl set against a keyed endpoint")
    if q.enabled:
        for name in [*q.sets, *q.jsonl]:
            if is_lm_eval(name):
                if importlib.util.find_spec("lm_eval") is None:
                    raise QualityError(f"quality: {name} needs lm-eval installed (pip install lm-eval)")
                continue
            load_set(name)
    if not model_files:
        return
    m = spec.model
    named = [("model.path", m.path)] + [(f"model.checkpoints.{k}", v) for k, v in m.checkpoints.items()]
    named += [(f"model.kv_scales.{k}", v) for k, v in (m.kv_scales or {}).items()]
    for field, value in named:
        if value and _local(value) and not Path(value).expanduser().exists():
            raise SpecError(f"{field}: {value}: no such file or folder")
