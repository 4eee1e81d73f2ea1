"""Async OpenAI-compatible streaming load generator.

Closed loop (N streams back to back) or open loop (Poisson / gamma arrivals from a pre-generated seeded
schedule). Latency is timed from the *scheduled* send time, so client-side queueing shows in TTFT instead of
being hidden (no coordinated omission); the queue time itself is recorded separately. Per-request records are
plain dataclasses (not pydantic) because they are built on the hot path of every streamed chunk.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

import aiohttp
import numpy as np

from atlas.config import LoadPoint
from atlas.knobs import LoadMode

# Short common English words: about one tokenizer token each for BPE vocabularies.
WORDS = ("the of and to in is for on that by this with you it not or be are from at as your all have new more "
          "an was we will home can us about if page my has search free but our one other do no information time "
          "they site he up may what which their news out use any there see only so his when contact here "
          "business who web also now help get view online first been would how were me some these click its like "
          "service than find price date back top people had list name just over state year day into email two "
          "health world next used go work last most products music buy data make them should product system post "
          "her city add policy number such please available copyright support message after best software then "
          "jan good video well where info rights public books high school through each links she review years "
          "order very privacy book items company read group need many user said does set under general research").split()
PROMPT_HEAD = "Continue this list of words: "


@dataclass
class RequestRecord:
    index: int
    phase: str  # warmup | measure | cooldown
    scheduled_s: float  # seconds since the run started
    sent_s: float | None = None
    first_token_s: float | None = None
    token_times_s: list[float] = field(default_factory=list)  # arrival of each content chunk
    chunk_tokens: list[int] = field(default_factory=list)  # tokens carried by each content chunk
    end_s: float | None = None  # arrival of the last content chunk
    done_s: float | None = None  # stream closed
    prompt_tokens: int | None = None  # from the server's usage
    output_tokens: int = 0  # counted from the stream
    usage_output_tokens: int | None = None  # from the server's final usage
    requested_tokens: int = 0
    status: str = "pending"  # ok | http_<code> | timeout | connection_error | incomplete_stream | protocol_error
    error: str | None = None

    def to_json(self) -> dict:  # type: ignore[type-arg]
        return asdict(self)


@dataclass
class LoadRun:
    point: LoadPoint
    records: list[RequestRecord]
    started_at_unix: float
    wall_s: float
    offered_rate_rps: float | None
    drain_s: float | None = None  # closed loop: when the first stream ran out of work (steady state ends)


def run_sync(coro):  # type: ignore[no-untyped-def]
    """Run a load coroutine to completion on uvloop where installed: its faster I/O path halves the
    client's own share of measured latency (0.6 vs 1.0 ms of TTFT at 256 streams, benchmarks/)."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coro)
    return uvloop.run(coro)


def make_prompts(n: int, prompt_tokens: int, seed: int) -> list[str]:
    rng = np.random.default_rng(seed)
    words = np.array(WORDS)
    out = []
    for _ in range(n):
        picks = words[rng.integers(0, len(words), size=max(1, prompt_tokens - 8))]
        out.append(PROMPT_HEAD + " ".join(picks.tolist()))
    return out


def arrival_schedule(mode: LoadMode, rate_rps: float, n: int, seed: int, burstiness: float = 1.0) -> np.ndarray:
    """Send times (s) for n requests at `rate_rps`; the first one at 0. Same arguments, same bytes."""
    if mode == LoadMode.CLOSED:
        raise ValueError("a closed loop has no arrival schedule")
    rng = np.random.default_rng(seed)
    if mode == LoadMode.POISSON:
        gaps = rng.exponential(1.0 / rate_rps, size=n)
    else:
        gaps = rng.gamma(shape=burstiness, scale=1.0 / (rate_rps * burstiness), size=n)
    gaps[0] = 0.0
    return np.cumsum(gaps)


class _Client:
    def __init__(self, session: aiohttp.ClientSession, url: str, model: str, point: LoadPoint,
                 clock: Callable[[], float]):
        self.session, self.url, self.model, self.point, self.clock = session, url, model, point, clock

    async def send(self, rec: RequestRecord, prompt: str) -> None:
        body = {"model": self.model, "prompt": prompt, "max_tokens": rec.requested_tokens,
                "min_tokens": rec.requested_tokens, "ignore_eos": True, "temperature": 0.0, "stream": True,
                "stream_options": {"include_usage": True, "continuous_usage_stats": True}}
        rec.sent_s = self.clock()
        # X-Atlas-Sent: the send time on the host's monotonic clock; real servers ignore it, the mock server
        # in atlas.engines.mock counts its injected delays from it.
        headers = {"X-Atlas-Sent": repr(time.perf_counter())}
        try:
            for attempt in (0, 1):
                try:
                    async with self.session.post(self.url, json=body, headers=headers) as resp:
                        if resp.status != 200:
                            rec.status = f"http_{resp.status}"
                            rec.error = (await resp.text())[:300]
                            return
                        await self._read_stream(resp, rec)
                        return
                except (aiohttp.ClientOSError, aiohttp.ServerDisconnectedError) as e:
                    # A pooled keep-alive connection the server had already closed (llama-server does): the
                    # request never got an answer, so it is sent once more on a fresh connection, its clock
                    # still running from the scheduled send. A refused connection (server down) is not retried.
                    if attempt == 0 and rec.first_token_s is None and not isinstance(e, aiohttp.ClientConnectorError):
                        continue
                    raise
        except TimeoutError:
            rec.status, rec.error = "timeout", f"no complete answer within {self.point.request_timeout_s:g} s"
        except aiohttp.ClientPayloadError as e:
            rec.status, rec.error = "incomplete_stream", str(e)[:300]
        except aiohttp.ClientError as e:
            rec.status, rec.error = "connection_error", f"{type(e).__name__}: {e}"[:300]
        finally:
            rec.done_s = self.clock()

    async def _read_stream(self, resp: aiohttp.ClientResponse, rec: RequestRecord) -> None:
        clock = self.clock
        done = False
        async for raw in resp.content:
            now = clock()
            line = raw.strip()
            if not line.startswith(b"data:"):
                continue
            data = line[5:].strip()
            if data == b"[DONE]":
                done = True
                break
            try:
                msg = json.loads(data)
            except ValueError:
                rec.status, rec.error = "protocol_error", f"bad SSE payload: {data[:80]!r}"
                return
            if "error" in msg:
                rec.status, rec.error = "server_error", str(msg["error"])[:300]
                return
            usage = msg.get("usage") or None
            choices = msg.get("choices") or []
            text = choices[0].get("text", "") if choices else ""
            if usage:
                rec.prompt_tokens = usage.get("prompt_tokens", rec.prompt_tokens)
            if not choices:  # the final usage-only chunk
                if usage:
                    rec.usage_output_tokens = usage.get("completion_tokens")
                continue
            if usage and usage.get("completion_tokens") is not None:
                # a running total: per chunk (vLLM's continuous usage) or only on the last chunk (llama-server),
                # so what it adds is the total minus the tokens counted so far
                total = int(usage["completion_tokens"])
                n = total - rec.output_tokens
                if choices[0].get("finish_reason"):
                    rec.usage_output_tokens = total
            else:
                n = 1 if text else 0
            if n <= 0:
                continue
            if rec.first_token_s is None:
                rec.first_token_s = now
            rec.token_times_s.append(now)
            rec.chunk_tokens.append(n)
            rec.output_tokens += n
            rec.end_s = now
        if not done:
            rec.status, rec.error = "incomplete_stream", "stream ended before [DONE]"
        elif rec.output_tokens == 0:
            rec.status, rec.error = "empty_output", "stream finished with no tokens"
        else:
            rec.status = "ok"


def requests_of(point: LoadPoint) -> int:
    """How many requests one run of the point sends (closed loop: its warm-up requests too)."""
    return point.num_requests + (point.warmup_requests if point.mode == LoadMode.CLOSED else 0)


async def run_load(base_url: str, model: str, point: LoadPoint, *, seed_offset: int = 0,
                   fresh_connections: bool = False, prompts: list[str] | None = None) -> LoadRun:
    """Drive one load point against an OpenAI-compatible /v1/completions endpoint. `fresh_connections`:
    one TCP connection per request, for servers that close kept-alive connections (llama-server).
    `prompts`: the texts to send (one per request; e.g. fitted to the served tokenizer), else word prompts."""
    n = requests_of(point)
    if prompts is None:
        prompts = make_prompts(n, point.prompt_tokens, point.prompt_seed + seed_offset)
    elif len(prompts) != n:
        raise ValueError(f"{len(prompts)} prompts for {n} requests")
    t0 = time.perf_counter()

    def clock() -> float:
        return time.perf_counter() - t0

    limit = point.concurrency if point.mode == LoadMode.CLOSED else (point.max_in_flight or 0)
    connector = aiohttp.TCPConnector(limit=limit or 0, force_close=fresh_connections)
    timeout = aiohttp.ClientTimeout(total=point.request_timeout_s)
    url = base_url.rstrip("/") + "/v1/completions"
    started = time.time()
    records: list[RequestRecord] = []
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        client = _Client(session, url, model, point, clock)
        drain = None
        if point.mode == LoadMode.CLOSED:
            records, drain = await _closed_loop(client, point, prompts, clock)
            offered = None
        else:
            assert point.rate_rps is not None
            sched = arrival_schedule(point.mode, point.rate_rps, n, point.arrival_seed + seed_offset,
                                     point.burstiness)
            records = await _open_loop(client, point, prompts, sched, clock)
            offered = point.rate_rps
    return LoadRun(point=point, records=records, started_at_unix=started, wall_s=clock(), offered_rate_rps=offered,
                   drain_s=drain)


async def _closed_loop(client: _Client, point: LoadPoint, prompts: list[str],
                       clock: Callable[[], float]) -> tuple[list[RequestRecord], float]:
    assert point.concurrency is not None
    records: list[RequestRecord] = []
    next_index = 0
    first_idle: list[float] = []

    async def worker() -> None:
        nonlocal next_index
        while next_index < len(prompts):
            i = next_index
            next_index += 1
            phase = "warmup" if i < point.warmup_requests else "measure"
            rec = RequestRecord(index=i, phase=phase, scheduled_s=clock(), requested_tokens=point.output_tokens)
            records.append(rec)
            await client.send(rec, prompts[i])
        first_idle.append(clock())

    await asyncio.gather(*(worker() for _ in range(point.concurrency)))
    # Steady state ends when the first stream runs out of work; throughput is counted up to then.
    records.sort(key=lambda r: r.index)
    return records, min(first_idle)


async def _open_loop(client: _Client, point: LoadPoint, prompts: list[str], sched: np.ndarray,
                     clock: Callable[[], float]) -> list[RequestRecord]:
    horizon = float(sched[-1]) if len(sched) else 0.0
    gate = asyncio.Semaphore(point.max_in_flight) if point.max_in_flight else None
    records = []
    for i, t in enumerate(sched.tolist()):
        phase = "measure"
        if t < point.warmup_s:
            phase = "warmup"
        elif point.cooldown_s and t > horizon - point.cooldown_s:
            phase = "cooldown"
        records.append(RequestRecord(index=i, phase=phase, scheduled_s=t, requested_tokens=point.output_tokens))

    async def fire(rec: RequestRecord, prompt: str) -> None:
        if gate is None:
            await client.send(rec, prompt)
            return
        async with gate:
            await client.send(rec, prompt)

    tasks = []
    for rec, prompt in zip(records, prompts, strict=True):
        delay = rec.scheduled_s - clock()
        if delay > 0:
            await asyncio.sleep(delay)  # lateness here is counted: latency runs from the schedule
        tasks.append(asyncio.create_task(fire(rec, prompt)))
    await asyncio.gather(*tasks)
    return records
