"""vLLM (GPU) / vLLM-CPU engine: builds `vllm serve` argv from the knobs, runs it as a subprocess in its own
process group, checks readiness with a real completion request, and kills the whole group on stop."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections import deque
from importlib import metadata
from pathlib import Path

from atlas.config import ServerKnobs
from atlas.engines.base import EngineError, port_is_free, reason_from_log
from atlas.knobs import KVCacheDtype, Quantization


def vllm_version() -> str | None:
    for dist in ("vllm", "vllm-cpu"):
        try:
            return f"{dist}=={metadata.version(dist)}"
        except metadata.PackageNotFoundError:
            continue
    return None


def build_argv(server: ServerKnobs, model_path: str, *, served_name: str, host: str, port: int,
               max_model_len: int, on_cpu: bool, extra: list[str] | None = None) -> list[str]:
    """The `vllm serve` command line for one server config (list form: never through a shell)."""
    # The API server module rather than the `vllm` script: the script looks up the "vllm" distribution's
    # version, which vllm-cpu does not register under that name.
    argv = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", model_path, "--host", host, "--port", str(port),
            "--served-model-name", served_name, "--dtype", server.dtype.value,
            "--max-model-len", str(max_model_len), "--max-num-seqs", str(server.max_num_seqs),
            "--seed", "0", "--generation-config", "vllm"]
    if server.quantization == Quantization.FP8:
        argv += ["--quantization", "fp8"]  # dynamic FP8 from a 16-bit checkpoint, or an FP8 checkpoint
    # AWQ / GPTQ: model_path is the quantized checkpoint; vLLM reads the method (and picks Marlin) from it.
    if server.kv_cache_dtype in (KVCacheDtype.FP8, KVCacheDtype.FP8_CALIBRATED):
        argv += ["--kv-cache-dtype", "fp8"]
        if server.kv_cache_dtype == KVCacheDtype.FP8_CALIBRATED:
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


def parse_prometheus(text: str, names: tuple[str, ...]) -> dict[str, float]:
    """Sum of each named metric's samples (all label sets) from Prometheus text exposition."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name in names:
            try:
                out[name] = out.get(name, 0.0) + float(line.rsplit(" ", 1)[1])
            except ValueError:
                continue
    return out


SCRAPED = ("vllm:num_preemptions_total", "vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc",
           "vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:prefix_cache_hits_total")


class VllmEngine:
    """One `vllm serve` process; use as a context manager."""

    def __init__(self, server: ServerKnobs, model_path: str, *, served_name: str, host: str, port: int,
                 max_model_len: int, on_cpu: bool, log_path: Path, startup_timeout_s: float = 900.0,
                 env: dict[str, str] | None = None, extra_args: list[str] | None = None):
        self.server = server
        self.argv = build_argv(server, model_path, served_name=served_name, host=host, port=port,
                               max_model_len=max_model_len, on_cpu=on_cpu, extra=extra_args)
        self.base_url = f"http://{host}:{port}"
        self.served_model = served_name
        self.host, self.port = host, port
        self.log_path = log_path
        self.startup_timeout_s = startup_timeout_s
        self.env = {**os.environ, "VLLM_SERVER_DEV_MODE": "1", **(env or {})}
        self.proc: subprocess.Popen[bytes] | None = None
        self.ready_s: float | None = None

    # lifecycle -------------------------------------------------------------------------------------------
    def __enter__(self) -> VllmEngine:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        if not port_is_free(self.host, self.port):
            raise EngineError(f"port {self.port} on {self.host} is already in use")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "wb")
        t0 = time.monotonic()
        try:
            self.proc = subprocess.Popen(self.argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         env=self.env, start_new_session=True)
        except OSError as e:
            raise EngineError(f"cannot start {self.argv[0]}: {e.strerror}") from None
        finally:
            log.close()
        try:
            self._wait_ready(t0)
        except BaseException:
            self.stop()
            raise
        self.ready_s = time.monotonic() - t0

    def _wait_ready(self, t0: float) -> None:
        while True:
            assert self.proc is not None
            code = self.proc.poll()
            if code is not None:
                tail = self.log_tail(200)
                raise EngineError(reason_from_log(tail, f"vllm serve exited with code {code} before it was ready"),
                                  tail[-60:])
            if time.monotonic() - t0 > self.startup_timeout_s:
                tail = self.log_tail(60)
                raise EngineError(f"not ready within {self.startup_timeout_s:g} s (hung start-up)", tail)
            if self._probe():
                return
            time.sleep(1.0)

    def _probe(self) -> bool:
        """Ready means a real one-token completion succeeds, not only that the port answers."""
        body = json.dumps({"model": self.served_model, "prompt": "Hello", "max_tokens": 1,
                           "temperature": 0}).encode()
        req = urllib.request.Request(self.base_url + "/v1/completions", data=body,
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                return r.status == 200 and bool(json.loads(r.read()).get("choices"))
        except (urllib.error.URLError, ConnectionError, TimeoutError, ValueError, OSError):
            return False

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self) -> None:
        if self.proc is None:
            return
        try:
            pgid = os.getpgid(self.proc.pid)
        except ProcessLookupError:
            pgid = None
        if pgid is not None:
            for sig, wait_s in ((signal.SIGTERM, 30.0), (signal.SIGKILL, 10.0)):
                try:
                    os.killpg(pgid, sig)
                except ProcessLookupError:
                    break
                try:
                    self.proc.wait(timeout=wait_s)
                    # the leader is gone; make sure no worker of its group survives it
                    os.killpg(pgid, signal.SIGKILL)
                except ProcessLookupError:
                    break
                except subprocess.TimeoutExpired:
                    continue
                break
        self.proc.wait(timeout=10)
        deadline = time.monotonic() + 15
        while not port_is_free(self.host, self.port) and time.monotonic() < deadline:
            time.sleep(0.2)
        self.proc = None

    # observation -----------------------------------------------------------------------------------------
    def log_tail(self, n: int = 60) -> list[str]:
        try:
            with open(self.log_path, errors="replace") as f:
                return [line.rstrip("\n") for line in deque(f, maxlen=n)]
        except OSError:
            return []

    def _get(self, path: str, method: str = "GET") -> str | None:
        req = urllib.request.Request(self.base_url + path, method=method)
        try:
            with urllib.request.urlopen(req, timeout=10) as r:
                return r.read().decode(errors="replace")
        except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
            return None

    def scrape_metrics(self) -> dict[str, float]:
        text = self._get("/metrics")
        return parse_prometheus(text, SCRAPED) if text else {}

    def reset_prefix_cache(self) -> bool:
        return self._get("/reset_prefix_cache", method="POST") is not None

    def provenance(self) -> dict:  # type: ignore[type-arg]
        with open(self.log_path, errors="replace") as f:
            capacity = parse_capacity(f.readlines())
        return {"engine": vllm_version(), "argv": self.argv[1:], "ready_s": self.ready_s, **capacity}
