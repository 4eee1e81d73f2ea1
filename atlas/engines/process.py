"""An OpenAI-compatible server run as a subprocess in its own process group: readiness checked with a
real completion request, the whole group killed on stop, the log kept for failure reasons."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections import deque
from pathlib import Path

from atlas.engines.base import EngineError, port_is_free, reason_from_log


class ProcessEngine:
    """One server process; use as a context manager."""

    name = "process"

    def __init__(self, argv: list[str], *, served_name: str, host: str, port: int, log_path: Path,
                 startup_timeout_s: float = 900.0, env: dict[str, str] | None = None):
        self.argv = argv
        self.base_url = f"http://{host}:{port}"
        self.served_model = served_name
        self.host, self.port = host, port
        self.log_path = log_path
        self.startup_timeout_s = startup_timeout_s
        self.env = {**os.environ, **(env or {})}
        self.proc: subprocess.Popen[bytes] | None = None
        self.ready_s: float | None = None

    # lifecycle -------------------------------------------------------------------------------------------
    def __enter__(self) -> ProcessEngine:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        if not port_is_free(self.host, self.port):
            raise EngineError(f"port {self.port} on {self.host} is already in use", kind="port")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "wb")
        t0 = time.monotonic()
        try:
            self.proc = subprocess.Popen(self.argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         env=self.env, start_new_session=True)
        except OSError as e:
            raise EngineError(f"cannot start {self.argv[0]}: {e.strerror}", kind="launch") from None
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
                raise EngineError(reason_from_log(tail, f"{self.name} exited with code {code} before it was ready"),
                                  tail[-60:])
            if time.monotonic() - t0 > self.startup_timeout_s:
                tail = self.log_tail(60)
                raise EngineError(f"not ready within {self.startup_timeout_s:g} s (hung start-up)", tail, kind="timeout")
            if self._probe():
                return
            time.sleep(1.0)

    def _probe(self) -> bool:
        """Ready means a real one-token completion succeeds, not only that the port answers."""
        body = json.dumps({"model": self.served_model, "prompt": "Hello", "max_tokens": 1,
                           "temperature": 0}).encode()
        req = urllib.request.Request(self.base_url + "/v1/completions", data=body,
                                     headers={"Content-Type": "application/json", "X-Atlas-Probe": "1"})
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
        from atlas.engines.vllm import SCRAPED, parse_prometheus

        text = self._get("/metrics")
        return parse_prometheus(text, SCRAPED) if text else {}

    def reset_prefix_cache(self, tries: int = 5, wait_s: float = 0.5) -> bool:
        """Empties the engine's prefix cache. vLLM answers 200 with {"success": false} while blocks are still
        held (a previous point's requests finishing), so the answer is read and the reset tried again."""
        for attempt in range(tries):
            body = self._get("/reset_prefix_cache", method="POST")
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

    def provenance(self) -> dict:  # type: ignore[type-arg]
        return {"engine": self.name, "argv": self.argv[1:], "ready_s": self.ready_s}
