"""SGLang's OpenAI-compatible server (`python -m sglang.launch_server`): its command line from the knobs, its
/metrics (with --enable-metrics) and its prefix-cache flush."""

from __future__ import annotations

import sys
from importlib import metadata
from pathlib import Path

from atlas.engines.process import ProcessEngine
from atlas.engines.sglang.knobs import SglangKnobs, SglangKV, SglangQuant

# SGLang's names for the activation dtypes Atlas uses
_DTYPE = {"bfloat16": "bfloat16", "float16": "float16", "float32": "float32"}


def sglang_version() -> str | None:
    try:
        return f"sglang=={metadata.version('sglang')}"
    except metadata.PackageNotFoundError:
        return None


def build_argv(server: SglangKnobs, model_path: str, *, served_name: str, host: str, port: int,
               max_model_len: int, checkpoint: bool = False, extra: list[str] | None = None) -> list[str]:
    """The `sglang.launch_server` command line for one server config (list form: never through a shell).
    `checkpoint`: model_path is a quantized checkpoint, whose config names its method (AWQ, GPTQ, FP8)."""
    argv = [sys.executable, "-m", "sglang.launch_server", "--model-path", model_path, "--host", host,
            "--port", str(port), "--served-model-name", served_name, "--dtype", _DTYPE[server.dtype.value],
            "--context-length", str(max_model_len), "--random-seed", "0",
            "--max-running-requests", str(server.max_running_requests), "--enable-metrics"]
    if server.quantization == SglangQuant.FP8 and not checkpoint:
        argv += ["--quantization", "fp8"]  # dynamic FP8 weights from the 16-bit model
    if server.kv_cache_dtype != SglangKV.AUTO:
        argv += ["--kv-cache-dtype", server.kv_cache_dtype.value]
    if server.chunked_prefill_size is not None:
        argv += ["--chunked-prefill-size", str(server.chunked_prefill_size)]
    if not server.radix_cache:
        argv += ["--disable-radix-cache"]
    if server.mem_fraction_static is not None:
        argv += ["--mem-fraction-static", str(server.mem_fraction_static)]
    return argv + list(extra or [])


SCRAPED = ("sglang:num_running_reqs", "sglang:num_queue_reqs", "sglang:token_usage", "sglang:cache_hit_rate",
           "sglang:generation_tokens_total", "sglang:prompt_tokens_total")


class SglangEngine(ProcessEngine):
    name = "sglang"
    served_tokens_metric = "sglang:generation_tokens_total"
    scraped = SCRAPED

    def __init__(self, server: SglangKnobs, model_path: str, *, served_name: str, host: str, port: int | None,
                 max_model_len: int, log_path: Path, startup_timeout_s: float = 900.0, checkpoint: bool = False,
                 env: dict[str, str] | None = None, extra_args: list[str] | None = None):
        def argv(p: int) -> list[str]:
            return build_argv(server, model_path, served_name=served_name, host=host, port=p,
                              max_model_len=max_model_len, checkpoint=checkpoint, extra=extra_args)

        super().__init__(argv, served_name=served_name, host=host, port=port, log_path=log_path,
                         startup_timeout_s=startup_timeout_s, env=env)
        self.server = server

    def reset_prefix_cache(self) -> bool | None:
        """SGLang's POST /flush_cache empties the radix cache (it refuses while requests are running)."""
        if not self.server.radix_cache:
            return None
        return self._get("/flush_cache", method="POST") is not None

    def provenance(self) -> dict:  # type: ignore[type-arg]
        return {**super().provenance(), "engine": sglang_version()}
