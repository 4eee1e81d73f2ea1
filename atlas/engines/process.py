"""An OpenAI-compatible server run as a subprocess, and the proof that what answers is that subprocess.

Each launch gets a token in its environment (inherited by every process it spawns), a port Atlas chose
(unless the spec pins one), a per-launch served model name, a guard process that stops the launch if Atlas
dies, and a pid file beside the results that a later run uses to stop a launch nobody stopped. Before it is
used, and again after each load point, `verify()` checks that the listener on the port belongs to the launch
and that it serves this launch's model name; readiness is a real completion request.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import time
import urllib.error
import urllib.request
from collections import deque
from collections.abc import Callable
from pathlib import Path

from atlas.engines import procs
from atlas.engines.base import EngineError, reason_from_log
from atlas.engines.guard import start_guard
from atlas.engines.prometheus import parse_prometheus
from atlas.redact import Redactor

ArgvFor = Callable[[int], list[str]]
def launch_name(model_id: str) -> str:
    """The model name one launch serves under: a server answering for another name is another launch."""
    return f"{model_id}@atlas-{secrets.token_hex(4)}"


PORT_TRIES = 3  # an unpinned port taken by another program between choosing and binding: choose again


class ProcessEngine:
    """One server process; use as a context manager. `argv`: the command line, or a function of the port
    (then `port=None` lets Atlas choose a free one, and choose again if another program takes it)."""

    name = "process"
    served_tokens_metric: str | None = None  # a /metrics counter of generated tokens: what the engine served
    scraped: tuple[str, ...] = ()  # the /metrics names sampled while load runs
    started_by_atlas = True
    fresh_connections = False  # one TCP connection per request (for servers that close kept-alive ones)
    stop_grace_s = 20.0  # SIGTERM, then SIGKILL for what is still running after this

    def __init__(self, argv: list[str] | ArgvFor, *, served_name: str, host: str, port: int | None,
                 log_path: Path, startup_timeout_s: float = 900.0, env: dict[str, str] | None = None):
        self._argv_for: ArgvFor | None = argv if callable(argv) else None
        if port is None and self._argv_for is None:
            raise ValueError("a fixed command line needs its port")
        self.pinned = port is not None
        self.host = host
        self.port = port if port is not None else procs.free_port(host)
        self.argv = self._argv_for(self.port) if self._argv_for else list(argv)  # type: ignore[arg-type]
        self.served_model = served_name
        self.log_path = log_path
        self.startup_timeout_s = startup_timeout_s
        self.env = {**os.environ, **(env or {})}
        self.redactor = Redactor.of(self.argv, env or {})
        self.token = ""
        self.proc: subprocess.Popen[bytes] | None = None
        self._guard: subprocess.Popen[bytes] | None = None
        self.ready_s: float | None = None

    @property
    def request_headers(self) -> dict[str, str]:
        """Sent with every request to this engine (none: an engine Atlas starts needs no key)."""
        return {}

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def pidfile(self) -> Path:
        return self.log_path.with_suffix(".pid")

    # lifecycle -------------------------------------------------------------------------------------------
    def __enter__(self) -> ProcessEngine:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        for attempt in range(1 if self.pinned else PORT_TRIES):
            if attempt:
                self.port = procs.free_port(self.host)
                assert self._argv_for is not None
                self.argv = self._argv_for(self.port)
            try:
                self._start_once()
                return
            except EngineError as e:
                if e.kind != "port" or self.pinned or attempt == PORT_TRIES - 1:
                    raise

    def _start_once(self) -> None:
        if why := procs.bind_error(self.host, self.port):
            raise EngineError(why + ("" if not self.pinned else " (the spec pins this port)"), kind="port")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self.token = secrets.token_hex(8)
        t0 = time.monotonic()
        try:
            # the guard first: whatever happens from here on, the launch is stopped if Atlas dies
            self._guard = start_guard(self.token, self.pidfile, self.stop_grace_s)
            self._write_pidfile(None)
            with open(self.log_path, "wb") as log:
                self.proc = subprocess.Popen(self.argv, stdout=log, stderr=subprocess.STDOUT,
                                             stdin=subprocess.DEVNULL, start_new_session=True,
                                             env={**self.env, procs.LAUNCH_ENV: self.token})
            self._write_pidfile(self.proc.pid)
            self._wait_ready(t0)
        except OSError as e:
            self.stop()
            raise EngineError(f"cannot start {self.argv[0]}: {e.strerror}", kind="launch") from None
        except BaseException:
            self.stop()
            raise
        self.ready_s = time.monotonic() - t0

    def _write_pidfile(self, leader: int | None) -> None:
        info = {"token": self.token, "atlas_pid": os.getpid(), "atlas_started": procs.start_ticks(os.getpid()),
                "leader_pid": leader, "port": self.port,
                "program": os.path.basename(self.argv[0]), "started_unix": time.time()}
        self.pidfile.write_text(json.dumps(info))

    def _wait_ready(self, t0: float) -> None:
        while True:
            assert self.proc is not None
            code = self.proc.poll()
            if code is not None:
                tail = self.log_tail(200)
                if any("address already in use" in line.lower() for line in tail):
                    raise EngineError(f"port {self.port} was taken by another program before {self.name} "
                                      f"could bind it", tail[-60:], kind="port")
                raise EngineError(reason_from_log(tail, f"{self.name} exited with code {code} before it was ready"),
                                  tail[-60:])
            if time.monotonic() - t0 > self.startup_timeout_s:
                tail = self.log_tail(60)
                raise EngineError(f"not ready within {self.startup_timeout_s:g} s (hung start-up)", tail, kind="timeout")
            owners = procs.listener_pids(self.port)
            if owners and (why := self._foreign(owners)):
                # another program answers on the port this engine was to serve: never measure it
                raise EngineError(why, self.log_tail(60), kind="port")
            if owners and self._probe():
                if why := self.verify():
                    raise EngineError(why, self.log_tail(60), kind="port")
                return
            time.sleep(0.5)

    def _probe(self) -> bool:
        """Ready means a real one-token completion succeeds, not only that the port answers."""
        body = json.dumps({"model": self.served_model, "prompt": "Hello", "max_tokens": 1,
                           "temperature": 0}).encode()
        req = urllib.request.Request(self.base_url + "/v1/completions", data=body,
                                     headers={"Content-Type": "application/json", "X-Atlas-Probe": "1",
                                              **self.request_headers})
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                return r.status == 200 and bool(json.loads(r.read()).get("choices"))
        except urllib.error.HTTPError as e:
            if e.code in (401, 403):  # it would refuse every request of the sweep: fail now, not at the timeout
                raise EngineError(f"{self.name} answers HTTP {e.code} without an API key (an --api-key in "
                                  "extra_engine_args?): an engine Atlas starts is measured without one",
                                  self.log_tail(60)) from None
            return False
        except (urllib.error.URLError, ConnectionError, TimeoutError, ValueError, OSError):
            return False

    def verify(self) -> str | None:
        """Why what answers on this engine's port is not this launch (None: it is): the listening socket
        must belong to a process of the launch, and the server must list this launch's model name."""
        if not self.alive():
            return f"{self.name} is not running"
        owners = procs.listener_pids(self.port)
        if owners is None:
            return "cannot verify who serves the port: /proc is not available (Atlas verifies engines on Linux)"
        if not owners:
            return f"nothing listens on port {self.port}"
        if why := self._foreign(owners):
            return why
        body = self._get("/v1/models")
        try:
            ids = [m.get("id") for m in json.loads(body or "")["data"]]
        except (ValueError, KeyError, TypeError, AttributeError):
            return f"the server on port {self.port} gave no model list (/v1/models)"
        if self.served_model not in ids:
            return f"the server on port {self.port} serves {ids}, not this launch's {self.served_model!r}"
        return None

    def _foreign(self, owners: set[int]) -> str | None:
        """Why the listeners on the port are not this launch's processes (None: one of them is)."""
        if owners & procs.launch_pids(self.token):
            return None
        return f"port {self.port} is served by {procs.describe(owners)}, not by the {self.name} Atlas started"

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self) -> None:
        """Stops every process of the launch (found by its token, so a reaped leader hides none of its
        children), reaps the leader, scrubs secrets from the log, and dismisses the guard."""
        if self.token:
            procs.kill_launch(self.token, term_wait_s=self.stop_grace_s)
        if self.proc is not None:
            try:
                self.proc.kill()  # the leader itself, in case it was never seen through /proc
            except OSError:
                pass
            self.proc.wait(timeout=10)
            self.proc = None
        if self._guard is not None:
            try:
                assert self._guard.stdin is not None
                self._guard.stdin.write(b"q")
                self._guard.stdin.close()
            except (OSError, ValueError):
                pass
            self._guard.wait(timeout=10)
            self._guard = None
        self.pidfile.unlink(missing_ok=True)
        self.redactor.scrub_file(self.log_path)

    # observation -----------------------------------------------------------------------------------------
    def log_tail(self, n: int = 60) -> list[str]:
        try:
            with open(self.log_path, errors="replace") as f:
                return [self.redactor.text(line.rstrip("\n")) for line in deque(f, maxlen=n)]
        except OSError:
            return []

    def _get(self, path: str, method: str = "GET") -> str | None:
        req = urllib.request.Request(self.base_url + path, method=method, headers=self.request_headers)
        try:
            with urllib.request.urlopen(req, timeout=10) as r:
                return r.read().decode(errors="replace")
        except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
            return None

    def _post_json(self, path: str, body: dict) -> dict | None:  # type: ignore[type-arg]
        req = urllib.request.Request(self.base_url + path, data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json", **self.request_headers})
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                answer = json.loads(r.read())
        except (urllib.error.URLError, ConnectionError, TimeoutError, OSError, ValueError):
            return None
        return answer if isinstance(answer, dict) else None

    def scrape_metrics(self) -> dict[str, float]:
        """This engine's /metrics, the names in `scraped` summed over their label sets."""
        text = self._get("/metrics") if self.scraped else None
        return parse_prometheus(text, self.scraped) if text else {}

    def count_tokens(self, prompt: str) -> int | None:
        """Prompt tokens of the served model's tokenizer as a completion request counts them; None when the
        engine cannot say (its adapter overrides this where it has a tokenizer endpoint)."""
        return None

    def perplexity(self, text: str) -> tuple[float, int] | None:
        """(perplexity, tokens scored) of `text` under the served model; None when the engine cannot compute it."""
        return None

    def reset_prefix_cache(self) -> bool | None:
        """Empties the engine's prefix cache: True when done, False when it failed, None when it has none."""
        return None

    def provenance(self) -> dict:  # type: ignore[type-arg]
        return {"engine": self.name, "argv": self.redactor.argv(self.argv[1:]), "ready_s": self.ready_s,
                "port": self.port, "port_chosen_by": "spec" if self.pinned else "atlas"}


def stop_stale_launches(folder: Path) -> list[str]:
    """Stops engines that an earlier Atlas run started under `folder` (pid files `*.pid`) and that outlived
    it; a launch whose Atlas is still running (another sweep) is left alone. Returns what was stopped."""
    stopped = []
    for pidfile in sorted(folder.glob("*.pid")) if folder.is_dir() else []:
        try:
            info = json.loads(pidfile.read_text())
            token, owner = str(info["token"]), int(info["atlas_pid"])
        except (OSError, ValueError, KeyError, TypeError):
            pidfile.unlink(missing_ok=True)
            continue
        if owner == os.getpid() or (procs.pid_alive(owner) and procs.start_ticks(owner) == info.get("atlas_started")):
            continue  # its Atlas is still running (this one, or another sweep beside it)
        if found := procs.kill_launch(token):
            stopped.append(f"{info.get('program', 'engine')} (pids {', '.join(map(str, sorted(found)))}) "
                           f"left running by Atlas pid {owner}")
        pidfile.unlink(missing_ok=True)
    return stopped
