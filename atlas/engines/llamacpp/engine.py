"""llama.cpp engine: `llama-server` (built from the sources llama-cpp-python 0.3.36 vendors) serving one GGUF
with continuous batching over `--parallel` slots, behind the same OpenAI-compatible API the load generator
measures vLLM with."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from atlas.engines.base import EngineError
from atlas.engines.llamacpp.gguf import GgufError, llama_cpp_version, perplexity
from atlas.engines.llamacpp.knobs import LlamaCppKnobs, cache_type
from atlas.engines.process import ProcessEngine

SERVER_ENV = "ATLAS_LLAMA_SERVER"


def server_dir() -> Path:
    """Where scripts/setup.sh puts llama-server and the shared libraries it was linked with."""
    return Path(sys.prefix) / "lib" / "atlas-llama-server"


def server_binary() -> Path:
    path = Path(os.environ.get(SERVER_ENV) or server_dir() / "llama-server")
    if not (path.is_file() and os.access(path, os.X_OK)):
        raise EngineError(f"llama-server not found at {path}: run scripts/setup.sh (it builds llama-cpp-python "
                          f"0.3.36 with its server) or set {SERVER_ENV}", kind="launch")
    return path


def build_argv(server: LlamaCppKnobs, gguf: str, *, binary: str, served_name: str, host: str, port: int,
               max_model_len: int, threads: int | None = None, extra: list[str] | None = None,
               slot_dir: str | None = None) -> list[str]:
    """The llama-server command line for one server config (list form: never through a shell)."""
    slots = server.max_num_seqs
    kv = cache_type(server.kv_cache_dtype)
    argv = [binary, "--model", gguf, "--host", host, "--port", str(port), "--alias", served_name,
            # the context is shared by the slots: each gets max_model_len tokens
            "--ctx-size", str(max_model_len * slots), "--parallel", str(slots),
            "--cache-type-k", kv, "--cache-type-v", kv,
            "--flash-attn", "on",  # a quantized V cache needs flash attention; on for every config alike
            "--metrics", "--no-webui", "--seed", "0"]
    # the prompt cache as the knob says (llama-server's default is on: a repeated prompt is not prefilled). On:
    # each slot reuses its last prompt's KV; the host-memory cache stays off and the slot-save path exists so
    # that POST /slots/N?action=erase can empty every slot before a point (a point starts cold, as on vLLM)
    if server.enable_prefix_caching:
        argv += ["--cache-prompt", "--cache-ram", "0"] + (["--slot-save-path", slot_dir] if slot_dir else [])
    else:
        argv += ["--no-cache-prompt", "--cache-ram", "0"]
    if server.max_num_batched_tokens is not None:
        argv += ["--batch-size", str(server.max_num_batched_tokens)]
    if server.n_ubatch is not None:
        argv += ["--ubatch-size", str(server.n_ubatch)]
    if threads is not None:
        argv += ["--threads", str(threads)]
    return argv + list(extra or [])


SCRAPED = ("llamacpp:requests_processing", "llamacpp:requests_deferred", "llamacpp:n_decode_total",
           "llamacpp:n_busy_slots_per_decode", "llamacpp:kv_cache_usage_ratio", "llamacpp:kv_cache_tokens",
           "llamacpp:tokens_predicted_total", "llamacpp:prompt_tokens_total")


UNCACHED_FLAG = "--no-cache-prompt"


def audit(result: Any) -> str | None:
    """Why a stored llama.cpp result cannot stand for its config: measured before Atlas turned llama-server's
    prompt cache off for a config that says it is off (its c>1 and later points replayed cached prompts)."""
    argv = (result.provenance.engine.get("argv") if result.provenance else None) or []
    if result.source != "measured" or result.config.server.enable_prefix_caching or not argv:
        return None
    if UNCACHED_FLAG in argv:
        return None
    return ("measured with llama-server's prompt cache on (no --no-cache-prompt in its argv) while the config says "
            "prefix caching off: repeated prompts were not prefilled; re-measure it")


def server_version(binary: Path) -> str | None:
    env = {**os.environ, "LD_LIBRARY_PATH": _lib_path(binary)}
    try:
        p = subprocess.run([str(binary), "--version"], capture_output=True, text=True, timeout=30, env=env)
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = [ln.strip() for ln in (p.stdout + p.stderr).splitlines() if ln.strip().startswith("version")]
    return lines[0] if lines else None


def _lib_path(binary: Path) -> str:
    return os.pathsep.join(filter(None, [str(binary.parent), os.environ.get("LD_LIBRARY_PATH", "")]))


class LlamaCppEngine(ProcessEngine):
    """`llama-server` for one server config; perplexity through llama.cpp's library on the same GGUF."""

    name = "llama-server"
    # llama-server closes kept-alive connections after a streamed answer; a reused one fails to send
    fresh_connections = True

    served_tokens_metric = "llamacpp:tokens_predicted_total"

    scraped = SCRAPED

    def __init__(self, server: LlamaCppKnobs, gguf: str, *, served_name: str, host: str, port: int | None,
                 max_model_len: int, log_path: Path, startup_timeout_s: float = 300.0,
                 env: dict[str, str] | None = None, extra_args: list[str] | None = None,
                 gguf_provenance: dict | None = None):  # type: ignore[type-arg]
        binary = server_binary()

        self.slot_dir = log_path.parent / f"{log_path.stem}.slots"

        def argv(p: int) -> list[str]:
            return build_argv(server, gguf, binary=str(binary), served_name=served_name, host=host, port=p,
                              max_model_len=max_model_len, extra=extra_args, slot_dir=str(self.slot_dir))

        super().__init__(argv, served_name=served_name, host=host, port=port, log_path=log_path,
                         startup_timeout_s=startup_timeout_s, env={"LD_LIBRARY_PATH": _lib_path(binary), **(env or {})})
        self.server, self.gguf, self.binary = server, gguf, binary
        self.gguf_provenance = gguf_provenance or {}

    def count_tokens(self, prompt: str) -> int | None:
        """llama-server's /tokenize, with the special tokens a completion request adds (BOS)."""
        answer = self._post_json("/tokenize", {"content": prompt, "add_special": True})
        tokens = answer.get("tokens") if answer else None
        return len(tokens) if isinstance(tokens, list) else None

    def start(self) -> None:
        if self.server.enable_prefix_caching:
            self.slot_dir.mkdir(parents=True, exist_ok=True)  # llama-server requires it to exist
        super().start()

    def reset_prefix_cache(self) -> bool | None:
        """Erases every slot's cached prompt (POST /slots/N?action=erase); None when the cache is off."""
        if not self.server.enable_prefix_caching:
            return None
        done = [self._post_json(f"/slots/{i}?action=erase", {}) for i in range(self.server.max_num_seqs)]
        return all(isinstance(d, dict) and "n_erased" in d for d in done)

    def perplexity(self, text: str) -> tuple[float, int]:
        from atlas.quality import QualityError

        kv = cache_type(self.server.kv_cache_dtype)
        try:
            return perplexity(Path(self.gguf), text, kv, kv)
        except GgufError as e:
            raise QualityError(f"perplexity: {e}") from None

    def provenance(self) -> dict:  # type: ignore[type-arg]
        return {**super().provenance(),
                "engine": f"llama-server ({server_version(self.binary) or 'unknown version'}, from "
                          f"{llama_cpp_version() or 'llama-cpp-python'})", "gguf": self.gguf_provenance}
