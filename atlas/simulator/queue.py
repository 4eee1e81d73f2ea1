"""A discrete-event model of continuous batching: at each step the engine's own scheduler (its adapter's,
atlas.simulator.scheduler) picks the decode tokens and prompt chunks, and prices the step. It drives the same request schedule the load generator
would and returns the same per-request records, so simulated and measured points share every metric
definition. A workload other than fixed is simulated from its own request list (atlas.workloads.requests,
planned without an engine: token counts are the planned lengths, estimated for file text): each request's
prompt and output length, a trace's arrivals, and with prefix caching on the prompt tokens an earlier
request already sent (scaled by `reuse`, the measured share of them the engine hit) are not prefilled.
Sessions are simulated as their requests in order, not as dependent turns."""

from __future__ import annotations

import heapq
from collections import deque

import numpy as np

from atlas.config import LoadPoint
from atlas.engines.registry import ServerKnobs
from atlas.knobs import LoadMode
from atlas.loadgen import LoadRun, RequestRecord, arrival_schedule
from atlas.plan import RunConfig
from atlas.simulator.features import Efficiencies, StepCosts
from atlas.simulator.scheduler import ChunkedScheduler, SimSeq


def scheduler_for(server: ServerKnobs, max_model_len: int, kv_capacity_tokens: int | None) -> ChunkedScheduler:
    """The engine's own step scheduler (its adapter's), configured from the server knobs."""
    from atlas.engines.registry import adapter

    return adapter(server.engine).scheduler(server, max_model_len, kv_capacity_tokens)  # type: ignore[no-any-return]


_PLANS: dict[str, list[tuple[int, int, int, float | None]]] = {}


def request_list(point: LoadPoint, n: int, seed_offset: int, max_model_len: int) -> list[tuple[int, int, int, float | None]]:
    """(prompt tokens, output tokens, shared prompt tokens, arrival) of each request of a workload point (kept:
    the fit simulates each point many times)."""
    from atlas.workloads.requests import plan_requests

    key = f"{point.model_dump_json()}|{n}|{seed_offset}|{max_model_len}"
    if key not in _PLANS:
        plan = plan_requests(point, n, seed_offset, max_model_len, None)
        _PLANS[key] = [(r.prompt_tokens or 1, r.output_tokens, r.shared_tokens, r.arrival_s) for r in plan.requests]
    return _PLANS[key]


def mean_lengths(cfg: RunConfig) -> tuple[float, float]:
    """Mean prompt and output tokens of a config's requests (its workload's planned list)."""
    lp = cfg.load
    if lp.workload is None:
        return float(lp.prompt_tokens), float(lp.output_tokens)
    reqs = request_list(lp, lp.num_requests, 0, cfg.model.max_model_len)
    return sum(r[0] for r in reqs) / len(reqs), sum(r[1] for r in reqs) / len(reqs)


def simulate(costs: StepCosts, eff: Efficiencies, server: ServerKnobs, point: LoadPoint, *, max_model_len: int,
             prompt_tokens: int | None = None, kv_capacity_tokens: int | None = None, seed_offset: int = 0,
             max_steps: int = 2_000_000, reuse: float = 1.0) -> LoadRun:
    closed = point.mode == LoadMode.CLOSED
    n = point.num_requests + (point.warmup_requests if closed else 0)
    reqs: list[tuple[int, int, int, float | None]]
    if point.workload is None:
        reqs = [(prompt_tokens or point.prompt_tokens, point.output_tokens, 0, None)] * n
    else:
        reqs = request_list(point, n, seed_offset, max_model_len)
        n = len(reqs)
    cache = server.prefix_caching
    sched = scheduler_for(server, max_model_len, kv_capacity_tokens)
    records: list[RequestRecord] = []
    arrivals: list[tuple[float, int]] = []  # (time, index)
    next_index = 0
    drain: float | None = None

    def new_request(t: float) -> None:
        nonlocal next_index
        i = next_index
        next_index += 1
        phase = "warmup" if closed and i < point.warmup_requests else "measure"
        rec = RequestRecord(index=i, phase=phase, scheduled_s=t, sent_s=t, requested_tokens=reqs[i][1],
                            prompt_tokens=reqs[i][0])
        records.append(rec)
        heapq.heappush(arrivals, (t, i))

    if closed:
        assert point.concurrency is not None
        # where the engine's scheduler says so, the first requests reach it one after another (its first step
        # starts with one prompt and the rest join the next) rather than all at one instant
        for k in range(min(point.concurrency, n)):
            new_request(k * sched.arrival_gap_s)
    else:
        if point.mode == LoadMode.TRACE:
            times = np.array([a or 0.0 for _, _, _, a in reqs])
        else:
            assert point.rate_rps is not None
            times = arrival_schedule(point.mode, point.rate_rps, n, point.arrival_seed + seed_offset,
                                     point.burstiness)
        for t in times.tolist():
            new_request(float(t))
        for rec in records:
            if rec.scheduled_s < point.warmup_s:
                rec.phase = "warmup"
            elif point.cooldown_s and rec.scheduled_s > float(times[-1]) - point.cooldown_s:
                rec.phase = "cooldown"

    waiting: deque[SimSeq] = deque()
    running: list[SimSeq] = []
    t = 0.0
    done = 0
    for _ in range(max_steps):
        while arrivals and arrivals[0][0] <= t + 1e-12:
            _, i = heapq.heappop(arrivals)
            p, o, shared, _ = reqs[i]
            hit = min(p - 1, round(shared * reuse)) if cache else 0
            waiting.append(SimSeq(rec=records[i], prompt=p, out=o, prefilled=max(0, hit)))
        if not running and not waiting:
            if not arrivals:
                break
            t = arrivals[0][0]
            continue
        step = sched.plan(running, waiting)
        if not step.tokens:
            raise RuntimeError(f"{server.label()}: a waiting request can never be scheduled (KV cache too small)")
        t += sched.step_s(costs, eff, step)
        emitted = list(step.decode)
        for s, k in step.prefill:
            s.prefilled += k
            if not s.in_prefill:
                emitted.append(s)  # the step that finishes a prompt samples its next token
        finished = []
        for s in emitted:
            s.generated += 1
            s.times.append(t)
            if s.generated >= s.out:
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
                    # sent on the last token; where the engine's loop takes the next step at once (llama-server,
                    # vLLM: arrival_gap_s > 0) the request, still being read and tokenized, waits for the one after
                    new_request(t + sched.arrival_gap_s)
                elif drain is None:
                    drain = t
        if done >= n:
            break
    else:
        raise RuntimeError(f"simulation did not finish within {max_steps} steps")
    return LoadRun(point=point, records=sorted(records, key=lambda r: r.index), started_at_unix=0.0, wall_s=t,
                   offered_rate_rps=point.rate_rps if not closed else None, drain_s=drain)
