"""Async OpenAI-compatible streaming load generator.

Closed loop (N streams back to back) or open loop (Poisson / gamma arrivals from a pre-generated seeded
schedule). Latency is timed from the *scheduled* send time, so client-side queueing shows in TTFT instead of
being hidden (no coordinated omission); the queue time itself is recorded separately. Per-request records are
plain dataclasses (not pydantic) because they are built on the hot path of every streamed chunk.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING

import aiohttp
import numpy as np

from atlas.client_check import ClientMeter, ProcessStats
from atlas.client_gc import relieve
from atlas.config import LoadPoint
from atlas.knobs import LoadMode

if TYPE_CHECKING:
    from atlas.workloads.requests import PlannedRequest, RequestPlan

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
    fired_s: float | None = None  # open loop: when the client's schedule fired it (lateness = fired - scheduled)
    first_token_s: float | None = None
    token_times_s: list[float] = field(default_factory=list)  # arrival of each content chunk
    chunk_tokens: list[int] = field(default_factory=list)  # tokens carried by each content chunk
    end_s: float | None = None  # arrival of the last content chunk
    done_s: float | None = None  # stream closed
    prompt_tokens: int | None = None  # from the server's usage
    output_tokens: int = 0  # counted from the stream
    usage_output_tokens: int | None = None  # from the server's final usage
    requested_tokens: int = 0
    session: int | None = None  # sessions: which conversation, and which of its turns
    turn: int | None = None
    cached_tokens: int | None = None  # prompt tokens the server says it took from its cache (where it says)
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
    client: list[ProcessStats] = field(default_factory=list)  # each client process's check on itself
    client_name: str | None = None  # whose client sent the load when not Atlas's (an imported tool's)


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
    elif mode == LoadMode.CONSTANT:
        gaps = np.full(n, 1.0 / rate_rps)
    else:
        gaps = rng.gamma(shape=burstiness, scale=1.0 / (rate_rps * burstiness), size=n)
    gaps[0] = 0.0
    return np.cumsum(gaps)


class _Client:
    def __init__(self, session: aiohttp.ClientSession, url: str, model: str, point: LoadPoint,
                 clock: Callable[[], float]):
        self.session, self.url, self.model, self.point, self.clock = session, url, model, point, clock

    async def send(self, rec: RequestRecord, prompt: str, answer: list[str] | None = None) -> None:
        """Sends one request and records its stream; `answer` collects the streamed text (sessions)."""
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
                        await self._read_stream(resp, rec, answer)
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
            relieve()  # memory stays bounded with the collector off (atlas.client_gc)

    async def _read_stream(self, resp: aiohttp.ClientResponse, rec: RequestRecord,
                           answer: list[str] | None = None) -> None:
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
                details = usage.get("prompt_tokens_details")
                if isinstance(details, dict) and details.get("cached_tokens") is not None:
                    rec.cached_tokens = int(details["cached_tokens"])  # OpenAI's field (vLLM, newer llama.cpp)
            timings = msg.get("timings")
            if isinstance(timings, dict) and timings.get("cache_n") is not None:
                rec.cached_tokens = int(timings["cache_n"])  # llama-server: prompt tokens reused from the slot
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
            if answer is not None:
                answer.append(text)
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


def fixed_plan(prompts: list[str], point: LoadPoint, counted: bool = True,
               warnings: list[str] | None = None) -> RequestPlan:
    """The plan of a point without a workload: these prompts, each `prompt_tokens` in, `output_tokens` out."""
    from atlas.workloads.requests import PlannedRequest, RequestPlan

    return RequestPlan("fixed", [PlannedRequest(p, point.output_tokens, point.prompt_tokens) for p in prompts],
                       counted=counted, warnings=warnings or [])


async def run_load(base_url: str, model: str, point: LoadPoint, *, seed_offset: int = 0,
                   fresh_connections: bool = False, prompts: list[str] | None = None,
                   plan: RequestPlan | None = None, procs: int | None = None,
                   headers: dict[str, str] | None = None) -> LoadRun:
    """Drive one load point against an OpenAI-compatible /v1/completions endpoint. `fresh_connections`:
    one TCP connection per request, for servers that close kept-alive connections (llama-server).
    `plan`: the requests to send (atlas.workloads.requests); else `prompts` (one per request, the point's
    fixed lengths), else seeded word prompts. `procs`: client processes (None: chosen from the offered load and
    the cores here, atlas.loadgen_procs); each sends its deterministic share of the schedule on one clock.
    `headers`: sent with every request (an endpoint's Authorization; held in memory only)."""
    from atlas.loadgen_procs import auto_procs, run_shares

    n = requests_of(point)
    if plan is None:
        if prompts is None:
            prompts = make_prompts(n, point.prompt_tokens, point.prompt_seed + seed_offset)
        elif len(prompts) != n:
            raise ValueError(f"{len(prompts)} prompts for {n} requests")
        plan = fixed_plan(prompts, point)
    job = schedule(point, plan, seed_offset)
    k = procs if procs is not None else auto_procs(point, job)
    shares = job.partition(k)
    started = time.time()
    done = await run_shares(base_url, model, point, shares, fresh_connections, headers)
    records = sorted((r for d in done for r in d.records), key=lambda r: r.index)
    drains = [d.drain_s for d in done if d.drain_s is not None]
    return LoadRun(point=point, records=records, started_at_unix=started, wall_s=max(d.wall_s for d in done),
                   offered_rate_rps=job.offered, drain_s=min(drains) if drains else None,
                   client=[d.stats for d in done])


Group = list[tuple[int, "PlannedRequest"]]  # (index in the plan, request): one request, or a session's turns


@dataclass
class Share:
    """What one client process sends: its groups (with their send times, open loop) and its part of the
    point's streams (closed loop) or of its in-flight cap (open loop)."""

    mode: str  # closed | sessions (open-loop sessions) | open
    sessions: bool
    groups: list[Group]
    starts: list[float] | None
    horizon: float
    concurrency: int | None
    max_in_flight: int | None


@dataclass
class Job:
    mode: str
    sessions: bool
    groups: list[Group]
    starts: list[float] | None
    horizon: float
    offered: float | None
    concurrency: int | None
    max_in_flight: int | None

    def partition(self, procs: int) -> list[Share]:
        """Group g goes to process g mod k (deterministic); streams and the in-flight cap are split so they add
        up to the point's. k is at most the groups, the streams and the cap."""
        k = max(1, min(procs, len(self.groups) or 1, self.concurrency or procs, self.max_in_flight or procs))

        def part(total: int | None, j: int) -> int | None:
            return None if total is None else total // k + (1 if j < total % k else 0)

        return [Share(self.mode, self.sessions, self.groups[j::k],
                      self.starts[j::k] if self.starts is not None else None, self.horizon,
                      part(self.concurrency, j), part(self.max_in_flight, j)) for j in range(k)]


def schedule(point: LoadPoint, plan: RequestPlan, seed_offset: int = 0) -> Job:
    """The point's requests as groups, with each group's send time (open loop), on the run's clock."""
    reqs = plan.requests
    cap = point.max_in_flight
    if point.mode == LoadMode.CLOSED:
        assert point.concurrency is not None
        groups = _by_session(reqs) if plan.sessions else [[(i, r)] for i, r in enumerate(reqs)]
        return Job("closed", plan.sessions, groups, None, 0.0, None, point.concurrency, None)
    if plan.sessions:
        assert point.rate_rps is not None
        groups = _by_session(reqs)
        starts = arrival_schedule(point.mode, point.rate_rps * len(groups) / len(reqs), len(groups),
                                  point.arrival_seed + seed_offset, point.burstiness).tolist()
        return Job("sessions", True, groups, starts, starts[-1] if starts else 0.0, point.rate_rps, None, cap)
    if point.mode == LoadMode.TRACE:
        sched = np.array([r.arrival_s or 0.0 for r in reqs])
        span = float(sched[-1] - sched[0]) if len(sched) > 1 else 0.0
        offered = (len(sched) - 1) / span if span > 0 else None
    else:
        assert point.rate_rps is not None
        sched = arrival_schedule(point.mode, point.rate_rps, len(reqs), point.arrival_seed + seed_offset,
                                 point.burstiness)
        offered = point.rate_rps
    starts = sched.tolist()
    return Job("open", False, [[(i, r)] for i, r in enumerate(reqs)], starts, starts[-1] if starts else 0.0,
               offered, None, cap)


@dataclass
class ShareDone:
    records: list[RequestRecord]
    drain_s: float | None
    wall_s: float
    stats: ProcessStats


async def run_share(base_url: str, model: str, point: LoadPoint, share: Share, fresh_connections: bool,
                    t0: float, headers: dict[str, str] | None = None) -> ShareDone:
    """Sends one share, its clock starting at `t0` (time.perf_counter(), one clock for every process)."""
    def clock() -> float:
        return time.perf_counter() - t0

    if (wait := -clock()) > 0:
        await asyncio.sleep(wait)
    meter = ClientMeter()
    meter.start()
    limit = share.concurrency if share.mode == "closed" else (share.max_in_flight or 0)
    connector = aiohttp.TCPConnector(limit=limit or 0, force_close=fresh_connections)
    timeout = aiohttp.ClientTimeout(total=point.request_timeout_s)
    url = base_url.rstrip("/") + "/v1/completions"
    gate: AbstractAsyncContextManager[object] = (asyncio.Semaphore(share.max_in_flight) if share.max_in_flight
                                                 else contextlib.nullcontext())
    drain = None
    async with aiohttp.ClientSession(connector=connector, timeout=timeout, headers=headers) as session:
        client = _Client(session, url, model, point, clock)
        if share.mode == "closed":
            assert share.concurrency is not None
            records, drain = await _closed_loop(client, point, share.groups, clock, share.sessions,
                                                share.concurrency)
        elif share.mode == "sessions":
            assert share.starts is not None
            records = await _open_sessions(client, point, share.groups, share.starts, share.horizon, clock, gate)
        else:
            assert share.starts is not None
            records = await _open_loop(client, point, share.groups, share.starts, share.horizon, clock, gate)
    wall = clock()
    return ShareDone(records, drain, wall, meter.stop())


def _record(i: int, phase: str, scheduled: float, req: PlannedRequest) -> RequestRecord:
    return RequestRecord(index=i, phase=phase, scheduled_s=scheduled, requested_tokens=req.output_tokens,
                         session=req.session, turn=req.turn)


async def _closed_loop(client: _Client, point: LoadPoint, groups: list[Group], clock: Callable[[], float],
                       sessions: bool, concurrency: int) -> tuple[list[RequestRecord], float]:
    """`concurrency` streams, each sending its next request when the previous one ends; with `sessions`, each
    stream runs whole sessions, a turn as soon as the previous answer is in."""
    records: list[RequestRecord] = []
    next_group = 0
    first_idle: list[float] = []

    async def worker() -> None:
        nonlocal next_group
        while next_group < len(groups):
            turns = groups[next_group]
            next_group += 1
            conv = _Conversation() if sessions else None
            for i, req in turns:
                rec = _record(i, "warmup" if i < point.warmup_requests else "measure", clock(), req)
                records.append(rec)
                if conv is None:
                    await client.send(rec, req.prompt)
                    continue
                answer: list[str] = []
                await client.send(rec, conv.prompt(req), answer)
                if rec.status != "ok":
                    break  # the conversation cannot go on without its answer; later turns are not sent
                conv.answered(answer)
        first_idle.append(clock())

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    # Steady state ends when the first stream runs out of work; throughput is counted up to then.
    records.sort(key=lambda r: r.index)
    return records, min(first_idle)


def _by_session(reqs: list[PlannedRequest]) -> list[list[tuple[int, PlannedRequest]]]:
    """(index, request) of each session's turns, sessions in plan order."""
    out: dict[int | None, list[tuple[int, PlannedRequest]]] = {}
    for i, r in enumerate(reqs):
        out.setdefault(r.session, []).append((i, r))
    return list(out.values())


class _Conversation:
    """The text a session has said so far; each turn's prompt is all of it, then the turn."""

    def __init__(self) -> None:
        self.text = ""

    def prompt(self, req: PlannedRequest) -> str:
        from atlas.workloads.requests import SESSION_TURN

        self.text += (req.system if req.turn == 0 else "") + SESSION_TURN.format(text=req.prompt)
        return self.text

    def answered(self, answer: list[str]) -> None:
        self.text += "".join(answer) + "\n"


def _phase(t: float, point: LoadPoint, horizon: float) -> str:
    if t < point.warmup_s:
        return "warmup"
    if point.cooldown_s and t > horizon - point.cooldown_s:
        return "cooldown"
    return "measure"


async def _open_sessions(client: _Client, point: LoadPoint, sessions: list[Group], starts: list[float],
                         horizon: float, clock: Callable[[], float],
                         gate: AbstractAsyncContextManager[object]) -> list[RequestRecord]:
    """Sessions start at their scheduled times (rate_rps / mean turns per session, on the point's arrival
    process); each later turn is scheduled its think time after the previous answer ends, and its latency runs
    from then."""
    records: list[RequestRecord] = []

    async def run_session(turns: Group, start: float) -> None:
        conv = _Conversation()
        at = start
        for i, req in turns:
            if req.turn:
                at = clock() + req.think_s
            delay = at - clock()
            if delay > 0:
                await asyncio.sleep(delay)
            rec = _record(i, _phase(at, point, horizon), at, req)
            rec.fired_s = clock()
            records.append(rec)
            answer: list[str] = []
            async with gate:
                await client.send(rec, conv.prompt(req), answer)
            if rec.status != "ok":
                break
            conv.answered(answer)

    await asyncio.gather(*(run_session(turns, t) for turns, t in zip(sessions, starts, strict=True)))
    records.sort(key=lambda r: r.index)
    return records


async def _open_loop(client: _Client, point: LoadPoint, groups: list[Group], starts: list[float], horizon: float,
                     clock: Callable[[], float], gate: AbstractAsyncContextManager[object]) -> list[RequestRecord]:
    records = [_record(i, _phase(t, point, horizon), t, req) for t, ((i, req),) in zip(starts, groups, strict=True)]

    async def fire(rec: RequestRecord, prompt: str) -> None:
        rec.fired_s = clock()  # the client's own lateness: fired - scheduled (a capped wait comes after)
        async with gate:
            await client.send(rec, prompt)

    tasks = []
    for rec, ((_, req),) in zip(records, groups, strict=True):
        delay = rec.scheduled_s - clock()
        if delay > 0:
            await asyncio.sleep(delay)  # lateness here is counted: latency runs from the schedule
        tasks.append(asyncio.create_task(fire(rec, req.prompt)))
    await asyncio.gather(*tasks)
    return records
