"""vLLM (GPU) / vLLM-CPU engine: the server command line from the knobs, what its log and /metrics say, its
tokenizer endpoint, prefix-cache reset and perplexity (prompt logprobs)."""

from __future__ import annotations

import json
import re
import sys
import time
from importlib import metadata
from pathlib import Path

from atlas.engines.process import ProcessEngine
from atlas.engines.vllm.knobs import VllmKnobs, VllmKV, VllmQuant
from atlas.knobs import Dtype


def vllm_version() -> str | None:
    for dist in ("vllm", "vllm-cpu"):
        try:
            return f"{dist}=={metadata.version(dist)}"
        except metadata.PackageNotFoundError:
            continue
    return None


def build_argv(server: VllmKnobs, model_path: str, *, served_name: str, host: str, port: int,
               max_model_len: int, on_cpu: bool, calculate_kv_scales: bool = False, checkpoint: bool = False,
               pin_16bit_kv: bool = False, extra: list[str] | None = None) -> list[str]:
    """The `vllm serve` command line for one server config (list form: never through a shell).
    `checkpoint`: model_path is a quantized checkpoint, whose config tells vLLM its method (naming another
    with --quantization is an error). `pin_16bit_kv`: name the 16-bit dtype for an `auto` KV cache (a checkpoint
    that carries KV scales otherwise gets an FP8 cache). fp8_calibrated: vLLM reads the scales from a checkpoint
    that carries them, or, with `calculate_kv_scales` (vLLM before July 2026 only), computes them at start-up."""
    # The API server module rather than the `vllm` script: the script looks up the "vllm" distribution's
    # version, which vllm-cpu does not register under that name.
    argv = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", model_path, "--host", host, "--port", str(port),
            "--served-model-name", served_name, "--dtype", server.dtype.value,
            "--max-model-len", str(max_model_len), "--max-num-seqs", str(server.max_num_seqs),
            "--seed", "0", "--generation-config", "vllm",
            "--disable-uvicorn-access-log"]  # Atlas polls /metrics twice a second; keep the log for errors
    if server.quantization == VllmQuant.FP8 and not checkpoint:
        argv += ["--quantization", "fp8"]  # dynamic FP8 weights from the 16-bit model
    # A checkpoint (AWQ, GPTQ, FP8, or one with KV scales): vLLM reads the method (and picks Marlin) from it.
    if pin_16bit_kv and server.kv_cache_dtype == VllmKV.AUTO and server.dtype != Dtype.FLOAT32:
        argv += ["--kv-cache-dtype", server.dtype.value]
    if server.kv_cache_dtype in (VllmKV.FP8, VllmKV.FP8_CALIBRATED):
        argv += ["--kv-cache-dtype", "fp8"]
        if server.kv_cache_dtype == VllmKV.FP8_CALIBRATED and calculate_kv_scales:
            argv += ["--calculate-kv-scales"]
    if server.max_num_batched_tokens is not None:
        argv += ["--max-num-batched-tokens", str(server.max_num_batched_tokens)]
    if server.enable_chunked_prefill is not None:
        argv += ["--enable-chunked-prefill" if server.enable_chunked_prefill else "--no-enable-chunked-prefill"]
    argv += ["--enable-prefix-caching" if server.enable_prefix_caching else "--no-enable-prefix-caching"]
    if server.gpu_memory_utilization is not None:
        argv += ["--gpu-memory-utilization", str(server.gpu_memory_utilization)]
    if on_cpu:
        argv += ["--enforce-eager"]  # torch.compile on CPU: 265 s start-up instead of 43 s
    return argv + list(extra or [])


_KV_TOKENS = re.compile(r"KV cache size:\s*([\d,]+)\s*tokens")
_MAX_CONC = re.compile(r"Maximum concurrency for ([\d,]+) tokens per request:\s*([\d.]+)x")


def parse_capacity(lines: list[str]) -> dict:  # type: ignore[type-arg]
    """vLLM's reported KV-cache capacity (tokens) and max concurrency from its start-up log."""
    out: dict = {}  # type: ignore[type-arg]
    for line in lines:
        if m := _KV_TOKENS.search(line):
            out["kv_cache_tokens"] = int(m.group(1).replace(",", ""))
        if m := _MAX_CONC.search(line):
            out["max_concurrency"] = float(m.group(2))
            out["max_concurrency_at_tokens"] = int(m.group(1).replace(",", ""))
    return out


SCRAPED = ("vllm:num_preemptions_total", "vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc",
           "vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:prefix_cache_hits_total",
           "vllm:prefix_cache_queries_total", "vllm:prompt_tokens_total",
           "vllm:generation_tokens_total", "vllm:request_success_total")


class VllmApi(ProcessEngine):
    """What vLLM's OpenAI server offers beside completions: /tokenize, prompt logprobs, /reset_prefix_cache
    (the mock server speaks the same API)."""

    def count_tokens(self, prompt: str) -> int | None:
        """Prompt tokens as a completion request counts them (vLLM's /tokenize)."""
        answer = self._post_json("/tokenize", {"model": self.served_model, "prompt": prompt})
        count = answer.get("count") if answer else None
        return int(count) if isinstance(count, int) else None

    def perplexity(self, text: str) -> tuple[float, int] | None:
        from atlas.evaluate import perplexity

        return perplexity(self.base_url, self.served_model, text)

    def reset_prefix_cache(self, tries: int = 5, wait_s: float = 0.5) -> bool:
        """Empties the prefix cache. vLLM answers 200 with {"success": false} while blocks are still held (a
        previous point's requests finishing), so the answer is read and the reset tried again."""
        return reset_prefix_cache(self, tries, wait_s)


class VllmEngine(VllmApi):
    """`vllm serve` (the OpenAI API server module) for one server config."""

    name = "vllm"
    served_tokens_metric = "vllm:generation_tokens_total"
    scraped = SCRAPED

    def __init__(self, server: VllmKnobs, model_path: str, *, served_name: str, host: str, port: int | None,
                 max_model_len: int, on_cpu: bool, log_path: Path, startup_timeout_s: float = 900.0,
                 calculate_kv_scales: bool = False, checkpoint: bool = False, pin_16bit_kv: bool = False,
                 env: dict[str, str] | None = None, extra_args: list[str] | None = None):
        def argv(p: int) -> list[str]:
            return build_argv(server, model_path, served_name=served_name, host=host, port=p,
                              max_model_len=max_model_len, on_cpu=on_cpu, calculate_kv_scales=calculate_kv_scales,
                              checkpoint=checkpoint, pin_16bit_kv=pin_16bit_kv, extra=extra_args)

        super().__init__(argv, served_name=served_name, host=host, port=port, log_path=log_path,
                         startup_timeout_s=startup_timeout_s, env={"VLLM_SERVER_DEV_MODE": "1", **(env or {})})
        self.server = server

    def provenance(self) -> dict:  # type: ignore[type-arg]
        with open(self.log_path, errors="replace") as f:
            capacity = parse_capacity(f.readlines())
        return {**super().provenance(), "engine": vllm_version(), **capacity}


def reset_prefix_cache(engine: ProcessEngine, tries: int = 5, wait_s: float = 0.5) -> bool:
    """vLLM's POST /reset_prefix_cache, retried while it answers {"success": false}."""
    for attempt in range(tries):
        body = engine._get("/reset_prefix_cache", method="POST")
        if body is None:
            return False
        try:
            answer = json.loads(body) if body.strip() else None
        except ValueError:
            answer = None
        if not isinstance(answer, dict) or answer.get("success", True):
            return True
        if attempt < tries - 1:
            time.sleep(wait_s)
    return False
