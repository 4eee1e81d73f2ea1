"""`atlas quantize`: produce an AWQ / GPTQ / FP8 checkpoint from a 16-bit model with llm-compressor (or
AutoAWQ), optionally with calibrated FP8 KV-cache scales, calibrated on text that ships with Atlas (no dataset
download), and write the provenance that results then carry (`atlas-quantize.json` in the checkpoint folder).
Also: whether a checkpoint really carries KV-cache scales (`checkpoint_kv_scheme`)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from contextlib import contextmanager
from importlib import metadata
from pathlib import Path
from typing import Any, Literal

from atlas.provenance import now_iso
from atlas.quality import builtin_sets, load_set, passage

PROVENANCE_FILE = "atlas-quantize.json"
Method = Literal["none", "awq", "gptq", "fp8"]
Tool = Literal["llmcompressor", "autoawq"]


class QuantizeError(RuntimeError):
    pass


class CheckpointError(ValueError):
    """A checkpoint that is not what the spec says it is (one line, naming it)."""


def calibration_texts(n: int) -> list[str]:
    """Calibration samples from Atlas's own shipped text: the passage's paragraphs and the eval questions."""
    texts = [p.strip() for p in passage().split("\n\n") if p.strip()]
    for name in builtin_sets():
        texts += [it.question for it in load_set(name)]
    if n > len(texts):
        texts = (texts * (n // len(texts) + 1))
    return texts[:n]


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


# Static per-tensor FP8 scales for K and V, observed over the calibration text; vLLM reads them from the
# checkpoint (quantization_config.kv_cache_scheme + k_scale/v_scale tensors) for --kv-cache-dtype fp8.
KV_SCHEME = {"num_bits": 8, "type": "float", "strategy": "tensor", "dynamic": False, "symmetric": True}
WEIGHT_SCHEMES = {"fp8": "FP8_DYNAMIC", "gptq": "W4A16", "awq": "W4A16_ASYM", "none": None}


def recipe_for(method: Method, group_size: int, kv_scales: bool = False) -> list[Any]:
    """The llm-compressor modifiers for a method (imported lazily: the package needs a GPU stack)."""
    try:
        from llmcompressor.modifiers.quantization import GPTQModifier, QuantizationModifier
    except ImportError:
        raise QuantizeError("atlas quantize needs llm-compressor: pip install llmcompressor") from None
    kv: dict[str, Any] = {"kv_cache_scheme": KV_SCHEME} if kv_scales else {}
    linear = {"targets": "Linear", "ignore": ["lm_head"]}
    if method == "none":  # 16-bit weights kept; only the KV-cache scales are calibrated
        if not kv_scales:
            raise QuantizeError("--method none makes only KV-cache scales: add --kv-scales")
        return [QuantizationModifier(**kv)]
    if method == "fp8":  # per-channel FP8 weights, dynamic per-token FP8 activations: no calibration needed
        return [QuantizationModifier(scheme="FP8_DYNAMIC", **linear, **kv)]
    weights = int4_weights(method, group_size)
    if method == "gptq":
        return [GPTQModifier(**weights, **linear, **kv)]
    try:  # llm-compressor >= 0.14: AWQ is a transform (smoothing) followed by plain W4A16 quantization
        from llmcompressor.modifiers.transform.awq import AWQModifier

        return [AWQModifier(), QuantizationModifier(**weights, **linear, **kv)]
    except ImportError:
        from llmcompressor.modifiers.awq import AWQModifier as OldAWQModifier

        return [OldAWQModifier(**weights, **linear, **kv)]


def int4_weights(method: Method, group_size: int) -> dict[str, Any]:
    """llm-compressor's preset (group size 128), or the same int4 scheme with another group size (for models
    whose layer widths 128 does not divide, e.g. SmolLM2's 576)."""
    if group_size == 128:
        return {"scheme": WEIGHT_SCHEMES[method]}
    if group_size < 1:
        raise QuantizeError(f"--group-size must be positive, not {group_size}")
    args = {"num_bits": 4, "type": "int", "symmetric": method == "gptq", "strategy": "group", "group_size": group_size}
    return {"config_groups": {"group_0": {"targets": ["Linear"], "weights": args}}}


def quantize(model: str, method: Method, out: Path, *, tool: Tool = "llmcompressor", group_size: int = 128,
             samples: int = 128, max_seq_len: int = 2048, revision: str | None = None,
             kv_scales: bool = False) -> Path:
    """Writes the checkpoint to `out`; with `kv_scales`, it also carries calibrated FP8 KV-cache scales
    (for kv_cache_dtype fp8_calibrated: give it to a sweep as model.kv_scales.<method>)."""
    out = Path(out)
    if out.exists() and any(out.iterdir()):
        raise QuantizeError(f"{out}: output folder is not empty")
    if tool == "autoawq" and (method != "awq" or kv_scales):
        raise QuantizeError("AutoAWQ produces AWQ checkpoints only, without KV-cache scales; use --tool llmcompressor")
    calibrated = method != "fp8" or kv_scales
    texts = calibration_texts(samples)
    if tool == "autoawq":
        try:
            from awq import AutoAWQForCausalLM
            from transformers import AutoTokenizer
        except ImportError:
            raise QuantizeError("--tool autoawq needs autoawq: pip install autoawq") from None
        awq_model = AutoAWQForCausalLM.from_pretrained(model, revision=revision)
        tok = AutoTokenizer.from_pretrained(model, revision=revision)
        awq_model.quantize(tok, quant_config={"zero_point": True, "q_group_size": group_size, "w_bit": 4,
                                              "version": "GEMM"}, calib_data=texts)
        awq_model.save_quantized(str(out))
        tok.save_pretrained(str(out))
    else:
        recipe = recipe_for(method, group_size, kv_scales)
        from llmcompressor import oneshot

        kwargs: dict[str, Any] = {"model": model, "recipe": recipe, "output_dir": str(out)}
        if calibrated:
            from datasets import Dataset

            kwargs.update(dataset=Dataset.from_dict({"text": texts}), max_seq_length=max_seq_len,
                          num_calibration_samples=len(texts))
        oneshot(**kwargs)
    write_provenance(out, model=model, revision=revision, method=method, tool=tool, group_size=group_size,
                     texts=texts if calibrated else [], kv_scales=kv_scales)
    return out


def write_provenance(out: Path, *, model: str, revision: str | None, method: str, tool: str, group_size: int,
                     texts: list[str], kv_scales: bool = False) -> dict[str, Any]:
    digest = hashlib.sha256("\n".join(texts).encode()).hexdigest()
    prov = {"method": method, "tool": f"{tool}=={_version('llmcompressor' if tool == 'llmcompressor' else 'autoawq')}",
            "bits": {"none": 16, "fp8": 8}.get(method, 4),
            "group_size": group_size if method in ("gptq", "awq") else None,
            "scheme": WEIGHT_SCHEMES[method], "kv_cache_scheme": KV_SCHEME if kv_scales else None,
            "source_model": model, "source_revision": revision,
            "calibration": {"set": "atlas passage + eval questions", "samples": len(texts), "sha256": digest},
            "created": now_iso(), "transformers": _version("transformers"), "torch": _version("torch")}
    out.mkdir(parents=True, exist_ok=True)
    (out / PROVENANCE_FILE).write_text(json.dumps(prov, indent=2))
    return prov


def read_provenance(checkpoint: str) -> dict[str, Any] | None:
    p = Path(checkpoint) / PROVENANCE_FILE
    try:
        return json.loads(p.read_text())  # type: ignore[no-any-return]
    except (OSError, ValueError):
        return None


_HUB = {"download": True}


@contextmanager
def cache_only() -> Iterator[None]:
    """Within it, a hub checkpoint's files are read from the local Hugging Face cache only (a plan that must not
    wait on the network: `atlas sweep --dry-run`)."""
    before, _HUB["download"] = _HUB["download"], False
    try:
        yield
    finally:
        _HUB["download"] = before


def _checkpoint_file(checkpoint: str, name: str) -> Path | None:
    """A file of a checkpoint: from a local folder, else (a hub id) from the Hugging Face cache or the hub."""
    local = Path(checkpoint).expanduser()
    if local.is_dir() or checkpoint.startswith(("/", ".", "~")):  # a folder, or a path that is not there
        return local / name if (local / name).is_file() else None
    try:
        from huggingface_hub import hf_hub_download, try_to_load_from_cache

        cached = try_to_load_from_cache(checkpoint, name)
        if isinstance(cached, str):
            return Path(cached)
        return Path(hf_hub_download(checkpoint, name)) if _HUB["download"] else None
    except Exception:  # no huggingface_hub, offline, not a repo id, no such repo or file: the caller says so
        return None


def has_kv_scales(checkpoint: str) -> bool:
    """Whether vLLM would take FP8 KV-cache scales from this checkpoint: it then stores the KV cache in FP8 even
    when asked for `--kv-cache-dtype auto` (seen with vLLM 0.32: twice the KV capacity, no log line saying so)."""
    try:
        checkpoint_kv_scheme(checkpoint)
    except CheckpointError:
        return False
    return True


def checkpoint_kv_scheme(checkpoint: str) -> dict[str, Any]:
    """How a checkpoint's FP8 KV-cache scales were made (its quantization_config.kv_cache_scheme, or the scale
    tensors it holds). Raises CheckpointError when it has none: vLLM would then run FP8 with scale 1.0, the very
    configuration a 'calibrated' point must not silently become."""
    config = _checkpoint_file(checkpoint, "config.json")
    if config is None:
        raise CheckpointError(f"model.kv_scales: {checkpoint}: no config.json to read its KV-cache scales from")
    try:
        qc = json.loads(config.read_text()).get("quantization_config") or {}
    except (OSError, ValueError) as e:
        raise CheckpointError(f"model.kv_scales: {checkpoint}: unreadable config.json ({e})") from None
    if scheme := qc.get("kv_cache_scheme"):
        if scheme.get("dynamic"):
            raise CheckpointError(f"model.kv_scales: {checkpoint}: its kv_cache_scheme is dynamic, not calibrated")
        return dict(scheme)
    index = _checkpoint_file(checkpoint, "model.safetensors.index.json")
    if index is not None:
        try:
            names = json.loads(index.read_text()).get("weight_map", {})
        except (OSError, ValueError):
            names = {}
        if any(n.endswith((".k_scale", ".v_scale")) for n in names):
            return {"source": "k_scale/v_scale tensors in the checkpoint"}
    raise CheckpointError(f"model.kv_scales: {checkpoint}: carries no KV-cache scales (no quantization_config."
                          "kv_cache_scheme in config.json): vLLM would run FP8 KV with scale 1.0")
