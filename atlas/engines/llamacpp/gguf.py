"""GGUF weights for the llama.cpp engine: an F16 export of the source model, and every other weight type
made from that F16 file with llama.cpp's own quantize function; cached by the source's hash, each file's
sha256 kept for provenance."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING

from atlas.engines.embedded import EMBEDDED_DIST, EMBEDDED_GGUF, cache_dir, gguf_path, sha256_file
from atlas.engines.llamacpp.knobs import GgufType

if TYPE_CHECKING:
    from atlas.config import ModelSpec

FTYPES: dict[GgufType, str] = {
    GgufType.F16: "LLAMA_FTYPE_MOSTLY_F16",
    GgufType.Q8_0: "LLAMA_FTYPE_MOSTLY_Q8_0",
    GgufType.Q6_K: "LLAMA_FTYPE_MOSTLY_Q6_K",
    GgufType.Q4_K_M: "LLAMA_FTYPE_MOSTLY_Q4_K_M",
    GgufType.Q4_0: "LLAMA_FTYPE_MOSTLY_Q4_0",
    GgufType.Q3_K_M: "LLAMA_FTYPE_MOSTLY_Q3_K_M",
    GgufType.Q2_K: "LLAMA_FTYPE_MOSTLY_Q2_K",
}


class GgufError(RuntimeError):
    """A GGUF file that cannot be found or made; one line."""


def llama_cpp_version() -> str | None:
    try:
        return f"llama-cpp-python=={metadata.version('llama-cpp-python')}"
    except metadata.PackageNotFoundError:
        return None


def source_gguf(model: ModelSpec) -> tuple[Path, dict]:  # type: ignore[type-arg]
    """The GGUF the variants are made from, and what is known of where it came from."""
    if model.source == "embedded":
        return gguf_path(), {"source_package": f"{EMBEDDED_DIST}=={metadata.version(EMBEDDED_DIST)}",
                             "gguf_file": EMBEDDED_GGUF, "license": "Apache-2.0"}
    if model.source == "path" and model.path and model.path.endswith(".gguf"):
        p = Path(model.path).expanduser()
        if not p.is_file():
            raise GgufError(f"model.path {model.path}: no such GGUF file")
        digest = sha256_file(p)
        if model.sha256 is None:
            raise GgufError(f"model.path {model.path} is not pinned: add `sha256: {digest}` to the spec's model "
                            "(after checking where the file came from)")
        if digest != model.sha256:
            raise GgufError(f"model.path {model.path}: sha256 {digest} is not the pinned {model.sha256}")
        return p, {"gguf_file": str(p), "pinned_sha256": digest}
    raise GgufError(f"llamacpp serves GGUF files: model.source must be 'embedded' or 'path' "
                    f"with a .gguf file (got source={model.source!r}, path={model.path!r})")


def _run_worker(*args: str, timeout_s: float = 1800) -> dict:  # type: ignore[type-arg]
    cmd = [sys.executable, "-m", "atlas.engines.llamacpp.gguf_worker", *args]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise GgufError(f"llama.cpp {args[0]} did not finish within {timeout_s:g} s") from None
    if p.returncode != 0 or not p.stdout.strip():
        lines = [ln for ln in (p.stderr or "").splitlines() if ln.strip()]
        raise GgufError(f"llama.cpp {args[0]} failed (exit {p.returncode}): {lines[-1] if lines else 'no output'}")
    return json.loads(p.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def variants_dir(src: Path, src_sha: str) -> Path:
    return cache_dir() / "gguf" / f"{src.stem}-{src_sha[:12]}"


def variant(src: Path, quant: GgufType, src_sha: str | None = None,
            on_make: Callable[[GgufType], None] | None = None) -> tuple[Path, dict]:  # type: ignore[type-arg]
    """The `quant` variant of `src` (made once, then reused) and its provenance, sha256 included; `on_make`
    hears of each file that has to be made first."""
    if quant not in FTYPES:
        raise GgufError(f"quantization {quant.value!r} is not a GGUF weight type ({', '.join(q.value for q in FTYPES)})")
    src_sha = src_sha or sha256_file(src)
    dest = variants_dir(src, src_sha) / f"{quant.value}.gguf"
    marker = dest.with_suffix(".json")
    try:
        prov = json.loads(marker.read_text())
        if dest.is_file() and prov.get("size") == dest.stat().st_size:
            return dest, prov
    except (OSError, ValueError):
        pass
    if quant == GgufType.F16:
        base, base_sha, made_from = src, src_sha, "source"
    else:
        base, base_prov = variant(src, GgufType.F16, src_sha, on_make)
        base_sha, made_from = base_prov["sha256"], "f16"
    if on_make is not None:
        on_make(quant)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}.tmp")
    try:
        done = _run_worker("quantize", str(base), str(tmp), FTYPES[quant])
        prov = {"type": quant.value, "ftype": FTYPES[quant], "made_from": made_from, "input_sha256": base_sha,
                "source_sha256": src_sha, "sha256": sha256_file(tmp), "size": tmp.stat().st_size,
                "quantize_s": done.get("seconds"), "made_with": llama_cpp_version()}
        os.replace(tmp, dest)
    finally:
        tmp.unlink(missing_ok=True)
    marker.write_text(json.dumps(prov, indent=2))
    return dest, prov


def perplexity(model: Path, text: str, type_k: str, type_v: str) -> tuple[float, int]:
    """exp(mean NLL) of `text` under the GGUF with this KV-cache type (llama.cpp's own evaluation)."""
    tmp = cache_dir() / "tmp"
    tmp.mkdir(parents=True, exist_ok=True)
    text_file = tmp / f"passage-{os.getpid()}.txt"
    text_file.write_text(text, encoding="utf-8")
    try:
        out = _run_worker("perplexity", str(model), str(text_file), type_k, type_v, timeout_s=900)
    finally:
        text_file.unlink(missing_ok=True)
    return float(out["perplexity"]), int(out["tokens"])
