"""`atlas quantize`: produce an AWQ / GPTQ / FP8 checkpoint from a 16-bit model with llm-compressor (or
AutoAWQ), calibrated on text that ships with Atlas (no dataset download), and write the provenance that
results then carry (`atlas-quantize.json` in the checkpoint folder)."""

from __future__ import annotations

import hashlib
import json
from importlib import metadata
from pathlib import Path
from typing import Any, Literal

from atlas.provenance import now_iso
from atlas.quality import builtin_sets, load_set, passage

PROVENANCE_FILE = "atlas-quantize.json"
Method = Literal["awq", "gptq", "fp8"]
Tool = Literal["llmcompressor", "autoawq"]


class QuantizeError(RuntimeError):
    pass


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


def recipe_for(method: Method, group_size: int) -> Any:
    """The llm-compressor modifier for a method (imported lazily: the package needs a GPU stack)."""
    try:
        from llmcompressor.modifiers.quantization import GPTQModifier, QuantizationModifier
    except ImportError:
        raise QuantizeError("atlas quantize needs llm-compressor: pip install llmcompressor") from None
    if method == "fp8":  # per-channel FP8 weights, dynamic per-token FP8 activations: no calibration needed
        return QuantizationModifier(targets="Linear", scheme="FP8_DYNAMIC", ignore=["lm_head"])
    if method == "gptq":
        if group_size != 128:
            raise QuantizeError("llm-compressor's W4A16 scheme uses group size 128")
        return GPTQModifier(targets="Linear", scheme="W4A16", ignore=["lm_head"])
    from llmcompressor.modifiers.awq import AWQModifier

    return AWQModifier(targets=["Linear"], scheme="W4A16_ASYM", ignore=["lm_head"])


def quantize(model: str, method: Method, out: Path, *, tool: Tool = "llmcompressor", group_size: int = 128,
             samples: int = 128, max_seq_len: int = 2048, revision: str | None = None) -> Path:
    out = Path(out)
    if out.exists() and any(out.iterdir()):
        raise QuantizeError(f"{out}: output folder is not empty")
    if tool == "autoawq" and method != "awq":
        raise QuantizeError("AutoAWQ produces AWQ checkpoints only; use --tool llmcompressor for gptq / fp8")
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
        recipe = recipe_for(method, group_size)
        from llmcompressor import oneshot

        kwargs: dict[str, Any] = {"model": model, "recipe": recipe, "output_dir": str(out)}
        if method != "fp8":
            from datasets import Dataset

            kwargs.update(dataset=Dataset.from_dict({"text": texts}), max_seq_length=max_seq_len,
                          num_calibration_samples=len(texts))
        oneshot(**kwargs)
    write_provenance(out, model=model, revision=revision, method=method, tool=tool, group_size=group_size,
                     texts=texts if method != "fp8" else [])
    return out


def write_provenance(out: Path, *, model: str, revision: str | None, method: str, tool: str, group_size: int,
                     texts: list[str]) -> dict[str, Any]:
    digest = hashlib.sha256("\n".join(texts).encode()).hexdigest()
    prov = {"method": method, "tool": f"{tool}=={_version('llmcompressor' if tool == 'llmcompressor' else 'autoawq')}",
            "bits": 8 if method == "fp8" else 4, "group_size": None if method == "fp8" else group_size,
            "scheme": {"fp8": "FP8_DYNAMIC", "gptq": "W4A16", "awq": "W4A16_ASYM"}[method],
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
