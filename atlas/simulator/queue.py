"""A discrete-event model of continuous batching (vLLM's scheduler, simplified): each step serves one decode
token for every running sequence, then prefill chunks, within `max_num_batched_tokens`, admitting waiting
requests while fewer than `max_num_seqs` run. It drives the same request schedule the load generator
would and returns the same per-request records, so simulated and measured points share every metric
definition."""

from __future__ import annotations

import heapq
from collections import deque
from dataclasses import dataclass, field

from atlas.config import LoadPoint
from atlas.engines.registry import ServerKnobs
from atlas.knobs import LoadMode
from atlas.loadgen import LoadRun, RequestRecord, arrival_schedule
from atlas.simulator.features import Efficiencies, StepCosts

DEFAULT_BATCHED_TOKENS = 2048  # vLLM's default token budget per step with chunked prefill


@dataclass
class _Seq:
    rec: RequestRecord
    prompt: int
    prefilled: int = 0
    generated: int = 0
    times: list[float] = field(default_factory=list)


def simulate(costs: StepCosts, eff: Efficiencies, server: ServerKnobs, point: LoadPoint, *, max_model_len: int,
             prompt_tokens: int | None = None, kv_capacity_tokens: int | None = None, seed_offset: int = 0,
             max_steps: int = 2_000_000) -> LoadRun:
    prompt = prompt_tokens or point.prompt_tokens
    out = point.output_tokens
    chunked = server.chunked_prefill is not False
    budget = server.batch_tokens or (DEFAULT_BATCHED_TOKENS if chunked else max_model_len)
    budget = max(budget, 1)
    closed = point.mode == LoadMode.CLOSED
    n = point.num_requests + (point.warmup_requests if closed else 0)
    records: list[RequestRecord] = []
    arrivals: list[tuple[float, int]] = []  # (time, index)
    next_index = 0
    drain: float | None = None

    def new_request(t: float) -> None:
        nonlocal next_index
        i = next_index
        next_index += 1
        phase = "warmup" if closed and i < point.warmup_requests else "measure"
        rec = RequestRecord(index=i, phase=phase, scheduled_s=t, sent_s=t, requested_tokens=out, prompt_tokens=prompt)
        records.append(rec)
        heapq.heappush(arrivals, (t, i))

    if closed:
        assert point.concurrency is not None
        for _ in range(min(point.concurrency, n)):
            new_request(0.0)
    else:
        assert point.rate_rps is not None
        sched = arrival_schedule(point.mode, point.rate_rps, n, point.arrival_seed + seed_offset, point.burstiness)
        for t in sched.tolist():
            new_request(float(t))
        for rec in records:
            if rec.scheduled_s < point.warmup_s:
                rec.phase = "warmup"
            elif point.cooldown_s and rec.scheduled_s > float(sched[-1]) - point.cooldown_s:
                rec.phase = "cooldown"

    waiting: deque[_Seq] = deque()
    running: list[_Seq] = []
    t = 0.0
    done = 0
    for _ in range(max_steps):
        while arrivals and arrivals[0][0] <= t + 1e-12:
            _, i = heapq.heappop(arrivals)
            waiting.append(_Seq(rec=records[i], prompt=prompt))
        if not running and not waiting:
            if not arrivals:
                break
            t = arrivals[0][0]
            continue
        left = budget
        decode = [s for s in running if s.prefilled >= s.prompt][:left]
        left -= len(decode)
        prefill: list[tuple[_Seq, int]] = []
        for s in running:
            if s.prefilled < s.prompt and left > 0:
                take = min(s.prompt - s.prefilled, left) if chunked else s.prompt - s.prefilled
                if take > left:
                    continue
                prefill.append((s, take))
                left -= take
        kv_used = sum(s.prompt + s.generated for s in running)
        while waiting and len(running) < server.slots and left > 0:
            s = waiting[0]
            if kv_capacity_tokens is not None and kv_used + s.prompt + out > kv_capacity_tokens and running:
                break  # no KV blocks free: it waits (vLLM would preempt later arrivals instead)
            take = min(s.prompt, left) if chunked else s.prompt
            if take > left:
                break
            waiting.popleft()
            running.append(s)
            prefill.append((s, take))
            left -= take
            kv_used += s.prompt + out
        tokens = len(decode) + sum(k for _, k in prefill)
        ctx = sum(s.prefilled + s.generated for s in decode) + sum(s.prefilled + k for s, k in prefill)
        t += eff.step_s(costs, tokens, ctx)
        emitted = list(decode)
        for s, k in prefill:
            s.prefilled += k
            if s.prefilled >= s.prompt:
                emitted.append(s)  # the step that finishes a prompt samples its first token
        finished = []
        for s in emitted:
            s.generated += 1
            s.times.append(t)
            if s.generated >= out:
                finished.append(s)
        for s in finished:
            running.remove(s)
            r = s.rec
            r.first_token_s, r.token_times_s, r.end_s, r.done_s = s.times[0], s.times, t, t
            r.chunk_tokens = [1] * len(s.times)
            r.output_tokens = r.usage_output_tokens = len(s.times)
            r.status = "ok"
            done += 1
            if closed:
                if next_index < n:
                    new_request(t)
                elif drain is None:
                    drain = t
        if done >= n:
            break
    else:
        raise RuntimeError(f"simulation did not finish within {max_steps} steps")
    return LoadRun(point=point, records=sorted(records, key=lambda r: r.index), started_at_unix=0.0, wall_s=t,
                   offered_rate_rps=point.rate_rps if not closed else None, drain_s=drain)
