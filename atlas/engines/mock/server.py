"""A mock OpenAI-compatible server on loopback with injected timing and faults, for proving the load
generator and the quality gate against known ground truth.

Each stream emits its first token `ttft_ms` after the request arrives and then one chunk every `itl_ms`
on an absolute schedule (no drift); with `itl_per_running_ms` each other stream in flight adds that much to
every gap, a service curve whose capacity under an SLO is known in closed form (tests/integration/
test_capacity_mock.py). Faults: an HTTP 503 rate, a global stall of `stall_s` seconds when
request number `stall_at_request` arrives, usage counts off by `usage_delta`, streams cut short, and the
whole process exiting after `die_after_requests`. With `prefix_cache` on, the mock keeps vLLM's kind of prefix
cache (full blocks of `block_tokens` words, keyed by everything before them; emptied by /reset_prefix_cache),
counts its hits and queries in vLLM's /metrics names, says `cached_tokens` in the usage, and adds
`prefill_ms_per_token` to the TTFT for each prompt token it did not find cached, so a workload's prefix reuse
has a known effect. Chat answers come from the eval sets: correct
('oracle'), wrong on a fraction (`degrade`), fast garbage, or empty. GET /atlas_mock/timing says how late its
chunks left against their schedule since the last call (the mock's own timing error, which a client measured
against it must not be charged with); its start-up heap is frozen before it serves, out of the collector's way.
"""

from __future__ import annotations

import argparse
import array
import asyncio
import gc
import hashlib
import heapq
import itertools
import json
import os
import random
import time
from dataclasses import dataclass, fields
from typing import Any

from aiohttp import web

from atlas.quality import QualityError, builtin_sets, load_set


@dataclass
class MockOptions:
    ttft_ms: float = 20.0
    itl_ms: float = 10.0
    itl_per_running_ms: float = 0.0  # each other stream being answered adds this to every gap (a service curve)
    tokens_per_chunk: int = 1
    error_rate: float = 0.0
    seed: int = 0
    stall_at_request: int = 0  # 0: never
    stall_s: float = 0.0
    usage_delta: int = 0
    cut_stream_rate: float = 0.0
    die_after_requests: int = 0  # 0: never
    answers: str = "oracle"  # oracle | garbage | empty | hostile
    degrade: float = 0.0  # fraction of eval items answered wrongly (oracle mode)
    logprob: float = -2.0  # per prompt token, for perplexity
    model: str = "mock"
    reset_busy: int = 0  # the first N prefix-cache resets answer {"success": false}, as vLLM does while busy
    startup_delay_s: float = 0.0  # sleep before binding the port, as a real engine loads its model first
    prefix_cache: bool = False
    block_tokens: int = 16
    prefill_ms_per_token: float = 0.0  # added to the TTFT per prompt token not found in the prefix cache
    api_key_env: str = ""  # the /v1 routes and /tokenize want "Bearer <this variable's value>", as `vllm --api-key`
    version: str = ""  # what /version reports ("": no /version, as llama-server has none)


class Pacer:
    """Wakes every waiting stream when its time comes. The event loop's timers are coarse (epoll waits whole
    milliseconds), so the last 2 ms before a deadline are spun through with zero-length sleeps; one task spins
    for all streams, never a stream each: when each stream spun through its own last 2 ms, some fifty spun at
    once at 512 streams x 25 chunks/s, and the mock's own lateness p99 was 23-50 ms (3 runs, 2026-12-07, the
    2-core development host); with one pacer 6-10 ms (benchmarks/loadgen_overhead.py, interleaved)."""

    SPIN_S = 0.002

    def __init__(self) -> None:
        self.heap: list[tuple[float, int, asyncio.Future[None]]] = []
        self.order = itertools.count()
        self.task: asyncio.Task[None] | None = None
        self.nap: asyncio.Future[None] | None = None  # the pacer's sleep, cut short by an earlier deadline
        self.nap_until = 0.0

    async def at(self, t: float) -> None:
        """Returns at time t (time.perf_counter()) or just after."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[None] = loop.create_future()
        heapq.heappush(self.heap, (t, next(self.order), fut))
        if self.task is None or self.task.done():
            self.task = loop.create_task(self._run())
        elif self.nap is not None and t < self.nap_until and not self.nap.done():
            self.nap.set_result(None)
        await fut

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        heap = self.heap
        while heap:
            now = time.perf_counter()
            while heap and heap[0][0] <= now:
                fut = heapq.heappop(heap)[2]
                if not fut.done():  # a cancelled stream's wait is dropped
                    fut.set_result(None)
            if not heap:
                break
            ahead = heap[0][0] - now
            if ahead <= self.SPIN_S:
                await asyncio.sleep(0)
                continue
            self.nap, self.nap_until = loop.create_future(), heap[0][0] - self.SPIN_S
            timer = loop.call_later(ahead - self.SPIN_S, _wake, self.nap)
            await self.nap
            timer.cancel()
        self.nap = None


def _wake(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


class MockServer:
    def __init__(self, opts: MockOptions):
        self.opts = opts
        self.rng = random.Random(opts.seed)
        self.count = 0
        self.running = 0  # streams being answered now
        self.generated = 0  # tokens generated for requests (not for readiness probes)
        self.resets = 0
        self.paused_until = 0.0
        self.blocks: set[int] = set()  # prefix-cache blocks: hash of every word up to the block's end
        self.cache_hits = 0
        self.cache_queries = 0
        self.prompt_tokens = 0
        self.started = time.time()  # what /metrics says as process_start_time_seconds (prometheus_client's)
        # how late each streamed chunk left against its schedule (ms): the mock's own timing error, which a
        # client measured against it would otherwise take for its own (GET /atlas_mock/timing)
        self.late_ms = array.array("d")
        self.pacer = Pacer()
        self.answers: dict[str, tuple[str, str, list[str] | None]] = {}
        for name in builtin_sets():
            for it in load_set(name):
                self.answers[it.question] = (it.kind, it.answer, it.choices)
        try:  # HumanEval, when its package is installed: the oracle answers with the reference solution
            for it in load_set("humaneval"):
                self.answers[it.question] = (it.kind, it.answer, it.choices)
        except QualityError:
            pass

    def app(self) -> web.Application:
        app = web.Application(middlewares=[self._auth] if self.opts.api_key_env else [])
        if self.opts.version:
            app.router.add_get("/version", self.version)
        app.router.add_post("/v1/completions", self.completions)
        app.router.add_post("/v1/chat/completions", self.chat)
        app.router.add_get("/v1/models", self.models)
        app.router.add_get("/health", self.health)  # as vLLM's (GuideLLM and AIPerf probe it before a run)
        app.router.add_get("/metrics", self.metrics)
        app.router.add_post("/reset_prefix_cache", self.reset_prefix_cache)
        app.router.add_post("/tokenize", self.tokenize)
        app.router.add_get("/atlas_mock/timing", self.timing)
        app.on_startup.append(_freeze_heap)
        return app

    @web.middleware
    async def _auth(self, request: web.Request, handler: Any) -> web.StreamResponse:
        key = os.environ.get(self.opts.api_key_env, "")
        guarded = request.path.startswith("/v1") or request.path == "/tokenize"
        if guarded and (not key or request.headers.get("Authorization") != f"Bearer {key}"):
            return web.json_response({"error": "Unauthorized"}, status=401)
        return await handler(request)  # type: ignore[no-any-return]

    async def version(self, request: web.Request) -> web.Response:
        return web.json_response({"version": self.opts.version})

    async def tokenize(self, request: web.Request) -> web.Response:
        """vLLM's /tokenize shape; the mock's tokenizer is one token per whitespace-separated word."""
        body = await request.json()
        n = prompt_tokens_of(str(body.get("prompt", "")))
        return web.json_response({"count": n, "tokens": list(range(n)), "max_model_len": 4096})

    async def reset_prefix_cache(self, request: web.Request) -> web.Response:
        self.resets += 1
        ok = self.resets > self.opts.reset_busy
        if ok:
            self.blocks.clear()
        return web.json_response({"success": ok})

    def cached_prefix(self, prompt: str) -> int:
        """Prompt tokens found in the prefix cache (whole blocks from the start, as vLLM finds them); the
        prompt's full blocks are cached afterwards. 0 when the cache is off."""
        words = prompt.split()
        if not self.opts.prefix_cache:
            return 0
        b = max(1, self.opts.block_tokens)
        hit, h, missed = 0, 0, False
        for end in range(b, len(words) + 1, b):
            h = hash((h, tuple(words[end - b:end])))
            if not missed and h in self.blocks:
                hit = end
            else:
                missed = True
                self.blocks.add(h)
        return hit

    async def models(self, request: web.Request) -> web.Response:
        return web.json_response({"data": [{"id": self.opts.model, "root": self.opts.model, "max_model_len": 4096,
                                            "owned_by": "atlas-mock"}]})

    async def health(self, request: web.Request) -> web.Response:
        return web.Response(status=200)

    async def metrics(self, request: web.Request) -> web.Response:
        return web.Response(text=f"vllm:num_requests_running {self.running}\nvllm:num_preemptions_total 0\n"
                                 f"vllm:generation_tokens_total {self.generated}\n"
                                 f"vllm:prompt_tokens_total {self.prompt_tokens}\n"
                                 f"vllm:prefix_cache_hits_total {self.cache_hits}\n"
                                 f"vllm:prefix_cache_queries_total {self.cache_queries}\n"
                                 f"atlas_mock_requests_total {self.count}\n"
                                 f"process_start_time_seconds {self.started:.2f}\n")

    async def timing(self, request: web.Request) -> web.Response:
        """How late the chunks streamed since the last call left against their schedule (ms), then forgets them."""
        late, self.late_ms = sorted(self.late_ms), array.array("d")
        q = {f"p{p}": late[min(len(late) - 1, int(len(late) * p / 100))] if late else None for p in (50, 90, 99)}
        return web.json_response({"chunks": len(late), **q, "max": late[-1] if late else None})

    def _admit(self, request: web.Request) -> web.Response | None:
        if request.headers.get("X-Atlas-Probe"):
            return None  # readiness probes are never counted or faulted
        self.count += 1
        if self.opts.die_after_requests and self.count > self.opts.die_after_requests:
            print("RuntimeError: injected crash after", self.opts.die_after_requests, "requests", flush=True)
            os._exit(3)
        if self.opts.stall_at_request and self.count == self.opts.stall_at_request:
            self.paused_until = time.perf_counter() + self.opts.stall_s
        if self.opts.error_rate and self.rng.random() < self.opts.error_rate:
            return web.json_response({"error": {"message": "overloaded (injected)"}}, status=503)
        return None

    async def _wait_until(self, t: float) -> float:
        """Sleep to absolute time t; a stall that covers t moves it to the stall's end. Returns the time
        the token actually goes out, from which the rest of the stream's schedule continues (the wait itself:
        Pacer)."""
        while True:
            now = time.perf_counter()
            if self.paused_until > now and t < self.paused_until:
                t = self.paused_until
            if t <= now:
                return t
            await self.pacer.at(t)

    async def completions(self, request: web.Request) -> web.StreamResponse:
        # The client may say when it sent the request (X-Atlas-Sent: its time.perf_counter(), the host's
        # monotonic clock, shared by processes on one machine); the injected TTFT then counts from there, so
        # it is what the client should observe and the rest is the client's own timing error.
        arrival = time.perf_counter()
        try:
            arrival = min(arrival, float(request.headers.get("X-Atlas-Sent", arrival)))
        except ValueError:
            pass
        refused = self._admit(request)
        if refused is not None:
            return refused
        body = await request.json()
        n_tokens = int(body.get("max_tokens", 16))
        prompt = str(body.get("prompt", ""))
        prompt_tokens = prompt_tokens_of(prompt)
        if body.get("prompt_logprobs") is not None and not body.get("stream"):
            lp = [None] + [{str(i): {"logprob": self.opts.logprob, "rank": 1}} for i in range(prompt_tokens - 1)]
            return web.json_response({"object": "text_completion",
                                      "choices": [{"index": 0, "text": " x", "prompt_logprobs": lp}],
                                      "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": 1}})
        if not body.get("stream"):
            if not request.headers.get("X-Atlas-Probe"):
                self.generated += n_tokens  # counted as a server counts every request's tokens
            return web.json_response({"object": "text_completion", "choices": [{"index": 0, "text": " tok" * n_tokens}],
                                      "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": n_tokens}})
        cached = self.cached_prefix(prompt)
        self.prompt_tokens += prompt_tokens
        if self.opts.prefix_cache:
            self.cache_queries += prompt_tokens
            self.cache_hits += cached
        self.running += 1
        try:
            return await self._stream(request, arrival, n_tokens, prompt_tokens, cached)
        finally:
            self.running -= 1

    async def _stream(self, request: web.Request, arrival: float, n_tokens: int,
                      prompt_tokens: int, cached: int = 0) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        cut_at = n_tokens // 2 if self.opts.cut_stream_rate and self.rng.random() < self.opts.cut_stream_rate else -1
        k = self.opts.tokens_per_chunk
        t = arrival + (self.opts.ttft_ms + self.opts.prefill_ms_per_token * (prompt_tokens - cached)) / 1e3
        sent = 0
        while sent < n_tokens:
            t = await self._wait_until(t)
            emit = time.perf_counter()
            self.late_ms.append((emit - t) * 1e3)
            step = min(k, n_tokens - sent)
            sent += step
            self.generated += step
            # atlas_mock: when the request arrived and this chunk left, on the shared monotonic clock
            # "object" as vLLM writes it (AIPerf reads a chunk's text only from a text_completion object)
            chunk = {"object": "text_completion", "choices": [{"index": 0, "text": " tok" * step}],
                     "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": sent},
                     "atlas_mock": {"arrival": arrival, "emit": emit}}
            await resp.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
            if sent >= cut_at >= 0:
                request.transport.close()  # type: ignore[union-attr]
                return resp
            t += (self.opts.itl_ms + self.opts.itl_per_running_ms * max(0, self.running - 1)) / 1e3
        counts: dict[str, object] = {"prompt_tokens": prompt_tokens, "completion_tokens": sent + self.opts.usage_delta}
        if self.opts.prefix_cache:
            counts["prompt_tokens_details"] = {"cached_tokens": cached}
        usage = {"object": "text_completion", "choices": [], "usage": counts}
        await resp.write(b"data: " + json.dumps(usage).encode() + b"\n\ndata: [DONE]\n\n")
        await resp.write_eof()
        return resp

    def _answer(self, prompt: str) -> str:
        if self.opts.answers == "empty":
            return ""
        if self.opts.answers == "hostile":  # model output that tries to break out of the report's HTML
            return "</script><script>window.__atlas_pwned=1</script><img src=x onerror=alert(1)> Answer: 7"
        if self.opts.answers == "garbage":
            return "".join(self.rng.choice("\ufffd\x00\x01#@%") for _ in range(40))
        question = next((q for q in self.answers if q in prompt), None)
        if question is None:
            return "I do not know."
        kind, answer, choices = self.answers[question]
        h = int(hashlib.sha256(question.encode()).hexdigest()[:8], 16) / 0xFFFFFFFF
        if kind == "code":
            body = "    return None\n" if h < self.opts.degrade else answer
            return f"Here is the function.\n```python\n{question}{body}```\n"
        if h < self.opts.degrade:  # deterministically wrong on this fraction of items
            answer = str(int(answer) + 1) if kind == "numeric" else "ABCD"[("ABCD".index(answer) + 1) % len(choices or "ABCD")]
        return f"Let me think. The result follows.\nAnswer: {answer}"

    async def chat(self, request: web.Request) -> web.Response:
        refused = self._admit(request)
        if refused is not None:
            return refused
        body = await request.json()
        prompt = " ".join(str(m.get("content", "")) for m in body.get("messages", []))
        await asyncio.sleep(self.opts.ttft_ms / 1e3)
        return web.json_response({"object": "chat.completion", "choices": [{"index": 0, "message": {"role": "assistant",
                                                                       "content": self._answer(prompt)}}],
                                  "usage": {"prompt_tokens": 10, "completion_tokens": 10}})


async def _freeze_heap(_app: web.Application) -> None:
    """Before serving: what the server holds from start-up (its imports, its app) is collected once and frozen,
    never scanned again, so the collector's full passes stay short: one of 77.5 ms had delayed every chunk due
    meanwhile (TTFT error max +77 ms at 256 streams), 3-7 ms after (the client's own collector:
    atlas.client_gc)."""
    gc.collect()
    gc.freeze()


def prompt_tokens_of(prompt: str) -> int:
    return max(1, len(prompt.split()))


def main(argv: list[str] | None = None) -> None:
    # no abbreviations: `--api-key X` (a real engine's flag in a spec's extra_engine_args) must not become
    # --api-key-env
    ap = argparse.ArgumentParser(description=__doc__, allow_abbrev=False)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    for f in fields(MockOptions):
        kind = (lambda v: v.lower() in ("1", "true", "yes")) if isinstance(f.default, bool) else type(f.default)
        ap.add_argument(f"--{f.name.replace('_', '-')}", type=kind, default=f.default)
    ns = vars(ap.parse_args(argv))
    host, port = ns.pop("host"), ns.pop("port")
    opts = MockOptions(**ns)
    # The default event loop, not uvloop: uvloop's timers have millisecond granularity, which would add up
    # to a millisecond of error to every injected delay.
    time.sleep(opts.startup_delay_s)
    web.run_app(MockServer(opts).app(), host=host, port=port, print=None, access_log=None)


if __name__ == "__main__":
    main()
