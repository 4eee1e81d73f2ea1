"""An endpoint Atlas did not start: checked before the first point (it answers, the key is accepted, the model
is served and long enough), fingerprinted from what it says about itself, and checked again before and after
every point, so a redeployment between points fails the point instead of mixing two servers. It is never
stopped, reset or configured; the API key is read from the environment and sent, never written."""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from typing import Any

from atlas.engines.base import EngineError
from atlas.engines.llamacpp.engine import SCRAPED as LLAMACPP_SCRAPED
from atlas.engines.prometheus import parse_prometheus
from atlas.engines.sglang.engine import SCRAPED as SGLANG_SCRAPED
from atlas.engines.vllm.engine import SCRAPED as VLLM_SCRAPED

NOT_STARTED = "external endpoint, not started by Atlas"
# the /metrics families Atlas reads, by the counter of generated tokens that identifies the server
FAMILIES = (("vllm", "vllm:generation_tokens_total", VLLM_SCRAPED),
            ("sglang", "sglang:generation_tokens_total", SGLANG_SCRAPED),
            ("llama.cpp", "llamacpp:tokens_predicted_total", LLAMACPP_SCRAPED))
# /metrics is read this many times before the first point, each on a new connection: replicas behind a load
# balancer answer from different processes (two replicas picked at random answer all 8 from one: p = 1/128)
REPLICA_READS = 8
PROCESS_START = "process_start_time_seconds"  # prometheus_client's, in vLLM's /metrics (one API server); not SGLang's


class _Http:
    """GET/POST against the endpoint with its headers; answers (status, body), status 0 for no answer."""

    def __init__(self, url: str, headers: dict[str, str], timeout_s: float):
        self.url, self.headers, self.timeout_s = url, headers, timeout_s
        self.server_header: str | None = None

    def call(self, path: str, body: dict[str, Any] | None = None) -> tuple[int, str]:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.url + path, data=data, headers={
            **self.headers, **({"Content-Type": "application/json"} if data else {})})
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s) as r:
                self.server_header = r.headers.get("Server") or self.server_header
                return r.status, r.read(1 << 22).decode(errors="replace")
        except urllib.error.HTTPError as e:
            return e.code, e.read(2000).decode(errors="replace")
        except (urllib.error.URLError, ConnectionError, TimeoutError, OSError) as e:
            return 0, str(getattr(e, "reason", e))

    def json(self, path: str, body: dict[str, Any] | None = None) -> Any:
        status, text = self.call(path, body)
        if status != 200:
            return None
        try:
            return json.loads(text)
        except ValueError:
            return None


class ExternalEngine:
    """The Engine protocol over an endpoint someone else runs."""

    started_by_atlas = False

    def __init__(self, url: str, served_model: str | None, *, api_key_env: str | None, max_model_len: int,
                 timeout_s: float = 15.0):
        self.url, self.wanted, self.api_key_env, self.max_model_len = url, served_model, api_key_env, max_model_len
        self.timeout_s = timeout_s
        self._model: str | None = None
        self._fingerprint: dict[str, Any] | None = None
        self._about: dict[str, Any] = {}
        self._family: tuple[str, str | None, tuple[str, ...]] = ("unknown", None, ())
        self._tokenize: str | None = None  # "vllm" | "llama.cpp" | "none": the /tokenize shape that answered
        self._notes: list[str] = []
        self._http = _Http(url, {}, timeout_s)

    # -- identity ---------------------------------------------------------------------------------------
    @property
    def served_model(self) -> str:
        return self._model or self.wanted or ""

    @property
    def base_url(self) -> str:
        return self.url

    @property
    def fresh_connections(self) -> bool:
        """llama-server closes kept-alive connections (measured: 2 of 24 requests at 4 streams failed to
        connect when they were reused), so a llama.cpp endpoint gets one connection per request, as Atlas's own."""
        return self._family[0] == "llama.cpp" or "llama.cpp" in (self._http.server_header or "")

    @property
    def served_tokens_metric(self) -> str | None:
        return self._family[1]

    @property
    def request_headers(self) -> dict[str, str]:
        """What every request carries: the bearer token read from api_key_env (only in memory)."""
        if not self.api_key_env:
            return {}
        key = os.environ.get(self.api_key_env, "")
        return {"Authorization": f"Bearer {key}"} if key else {}

    def start(self) -> None:
        """Checks the endpoint instead of starting anything; EngineError (one line) when it cannot be measured."""
        if self.api_key_env and not os.environ.get(self.api_key_env):
            raise EngineError(f"api_key_env: the environment variable {self.api_key_env} is not set (or empty) here",
                              kind="launch")
        self._http = _Http(self.url, self.request_headers, self.timeout_s)
        status, text = self._http.call("/v1/models")
        if status == 0:
            raise EngineError(f"{self.url} does not answer: {text}", kind="launch")
        if status in (401, 403):
            why = ("refused the API key from " + self.api_key_env if self.api_key_env
                   else "needs an API key: name its environment variable in the spec's api_key_env")
            raise EngineError(f"{self.url}/v1/models: HTTP {status}: the endpoint {why}", kind="launch")
        listed = self._models(status, text)
        ids = [m["id"] for m in listed]
        if self.wanted is None and len(ids) != 1:
            raise EngineError(f"{self.url} serves {len(ids)} models ({', '.join(ids)[:300]}): name one with --model",
                              kind="launch")
        model = self.wanted or ids[0]
        if model not in ids:
            raise EngineError(f"{self.url} does not serve {model!r}; it lists {', '.join(ids)[:300]}", kind="launch")
        self._model = model
        entry = next(m for m in listed if m["id"] == model)
        served_len = entry.get("max_model_len")
        if isinstance(served_len, int) and served_len < self.max_model_len:
            raise EngineError(f"{self.url} serves {model} with max_model_len {served_len}, less than the spec's "
                              f"model.max_model_len {self.max_model_len}: lower it in the spec", kind="launch")
        metrics_status, metrics = self._http.call("/metrics")
        for family in FAMILIES:
            if metrics_status == 200 and f"\n{family[1]}" in "\n" + metrics:
                self._family = family
                break
        start = self._one_server() if metrics_status == 200 else None
        self._fingerprint = self._identity(entry, start)
        self._about = {"models": listed[:20], "version": self._fingerprint["version"],
                       "metrics": (f"{self._family[0]} counters" if self._family[1] else
                                   "present, without a generated-token counter Atlas knows") if metrics_status == 200
                                  else f"none (HTTP {metrics_status or 'no answer'})",
                       "server_header": self._http.server_header}
        if not self._family[1]:
            self._notes.append("no generated-token counter in /metrics: other clients' traffic cannot be seen")

    def _models(self, status: int, text: str) -> list[dict[str, Any]]:
        try:
            data = json.loads(text)["data"] if status == 200 else None
        except (ValueError, KeyError, TypeError):
            data = None
        if not isinstance(data, list) or not all(isinstance(m, dict) and isinstance(m.get("id"), str) for m in data):
            raise EngineError(f"{self.url}/v1/models: HTTP {status}: not an OpenAI model list: {text[:200]!r}",
                              kind="launch")
        return [{k: m[k] for k in ("id", "root", "max_model_len", "owned_by") if k in m} for m in data]

    def _identity(self, entry: dict[str, Any], start: float | None = None) -> dict[str, Any]:
        """What must not change between points: the model entry, the version and, where /metrics says it, when
        the server process started (a restart, or another replica answering, changes it); `start`: already read."""
        out = {"model": entry, "version": self._version()}
        start = start if start is not None else self._process_start()
        return {**out, "process_start": start} if start is not None else out

    def _process_start(self) -> float | None:
        status, text = self._http.call("/metrics")
        return parse_prometheus(text, (PROCESS_START,)).get(PROCESS_START) if status == 200 else None

    def _one_server(self) -> float | None:
        """EngineError when /metrics answers from more than one server process (replicas behind one URL): their
        throughput is several servers' at one server's price, and their counters judge nothing. Seen by the
        process start time (vLLM) or by the generated-token counter going down between two reads (SGLang, llama.cpp)."""
        counter = self._family[1]
        names = (PROCESS_START, counter) if counter else (PROCESS_START,)
        starts: set[float] = set()
        counts: list[float] = []
        for _ in range(REPLICA_READS):
            status, text = self._http.call("/metrics")
            got = parse_prometheus(text, names) if status == 200 else {}
            if PROCESS_START in got:
                starts.add(got[PROCESS_START])
            if counter and counter in got:
                counts.append(got[counter])
        down = any(b < a for a, b in zip(counts, counts[1:], strict=False))
        if len(starts) > 1 or down:
            why = (f"{len(starts)} different {PROCESS_START} in {REPLICA_READS} reads" if len(starts) > 1
                   else f"its {counter} went down between two of {REPLICA_READS} reads")
            raise EngineError(f"{self.url}/metrics answers from more than one server ({why}): replicas behind one "
                              "URL; give Atlas one replica's URL (it measures, prices and compares one server)",
                              kind="launch")
        if not starts:
            self._notes.append(f"no {PROCESS_START} in /metrics: replicas behind one URL are seen only when a "
                               "counter goes down")
        return next(iter(starts), None)  # the one process's start time (the fingerprint's), or None

    def _version(self) -> dict[str, Any] | None:
        """/version (vLLM, SGLang), else the build and slots in llama-server's /props; None where neither is."""
        version = self._http.json("/version")
        if isinstance(version, dict):
            return version
        props = self._http.json("/props")
        if isinstance(props, dict) and "build_info" in props:
            return {"version": props["build_info"], "total_slots": props.get("total_slots")}
        return None

    def verify(self) -> str | None:
        """Why what answers now is not what was measured before (gone, another model, another version)."""
        status, text = self._http.call("/v1/models")
        if status != 200:
            return f"{self.url}/v1/models: {'HTTP ' + str(status) if status else text}: the endpoint stopped answering"
        try:
            entry = next(m for m in self._models(status, text) if m["id"] == self.served_model)
        except StopIteration:
            return f"{self.url} no longer serves {self.served_model!r}"
        except EngineError as e:
            return e.reason
        now = self._identity(entry)
        if now == self._fingerprint:
            return None
        was = self._fingerprint or {}
        if {k: v for k, v in now.items() if k != "process_start"} == {k: v for k, v in was.items() if k != "process_start"}:
            return (f"{self.url} answers from another server process since the sweep checked it ({PROCESS_START} "
                    f"{was.get('process_start')}, now {now.get('process_start')}): restarted between points, or one "
                    "of several replicas behind the URL")
        return (f"{self.url} changed since the sweep checked it (was {json.dumps(was)[:200]}, "
                f"now {json.dumps(now)[:200]}): redeployed between points")

    def alive(self) -> bool:
        return self._http.call("/v1/models")[0] == 200

    def stop(self) -> None:
        """Nothing: the endpoint is its owner's."""

    def log_tail(self, n: int = 60) -> list[str]:
        """No log of ours: what Atlas noticed about the endpoint (why it is gone, if it is)."""
        status, text = self._http.call("/v1/models")
        gone = [] if status == 200 else [f"EndpointError: {self.url}/v1/models: "
                                         f"{'HTTP ' + str(status) if status else text}"]
        return [*self._notes, *gone][-n:]

    def provenance(self) -> dict[str, Any]:
        return {"engine": "external", "started_by_atlas": False, "note": NOT_STARTED, "url": self.url,
                "served_model": self.served_model, "api_key_env": self.api_key_env, **self._about}

    # -- measurements ------------------------------------------------------------------------------------
    def scrape_metrics(self) -> dict[str, float]:
        names = self._family[2]
        if not names:
            return {}
        status, text = self._http.call("/metrics")
        return parse_prometheus(text, names) if status == 200 else {}

    def count_tokens(self, prompt: str) -> int | None:
        """The served tokenizer's count through /tokenize (vLLM's shape, else llama.cpp's); None without one."""
        if self._tokenize in (None, "vllm"):
            answer = self._http.json("/tokenize", {"model": self.served_model, "prompt": prompt})
            if isinstance(answer, dict) and isinstance(answer.get("count"), int):
                self._tokenize = "vllm"
                return int(answer["count"])
        if self._tokenize in (None, "llama.cpp"):
            answer = self._http.json("/tokenize", {"content": prompt})
            if isinstance(answer, dict) and isinstance(answer.get("tokens"), list):
                self._tokenize = "llama.cpp"
                return len(answer["tokens"])
        if self._tokenize is None:
            self._tokenize = "none"
        return None

    def perplexity(self, text: str) -> tuple[float, int] | None:
        return None  # needs prompt logprobs the endpoint may not give

    def reset_prefix_cache(self) -> bool | None:
        return None  # never touched: its cache serves its owner's traffic too
