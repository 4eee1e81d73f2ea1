"""Load generation over several client processes, so that the client is never what sets the latency: each
process runs one asyncio loop over its deterministic share of the point's schedule (group g to process g mod k),
all on one clock (time.perf_counter is the host's monotonic clock, the same in every process: each counts its
schedule from the same t0), and their records are merged by request index. One process runs in this process
(no spawn); more are spawned, made ready (imports, connection pool), then released together at t0. Each
process's garbage collector is quiet for its run (atlas.client_gc).

How many: enough that no process carries more than CHUNKS_PER_PROC streamed chunks/s, REQUESTS_PER_PROC
requests/s or STREAMS_PER_PROC streams (what one process sustains with its timing within 1 ms, measured by
benchmarks/loadgen_overhead.py), and at most the cores here less one; `--client-procs` overrides."""

from __future__ import annotations

import asyncio
import math
import multiprocessing as mp
import os
import time
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING, Any

from atlas.client_gc import quiet_gc

if TYPE_CHECKING:
    from atlas.config import LoadPoint
    from atlas.loadgen import Job, Share, ShareDone

CHUNKS_PER_PROC = 6_000.0
REQUESTS_PER_PROC = 1_000.0
STREAMS_PER_PROC = 256
READY_TIMEOUT_S = 120.0  # a spawned client process imports Atlas's load generator within this
START_LEAD_S = 0.05  # t0 lies this far after the last process said it was ready


class LoadClientError(RuntimeError):
    pass


def cores_here() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def auto_procs(point: LoadPoint, job: Job, cores: int | None = None) -> int:
    """Client processes for this point: by its streams (closed loop) or its offered request and chunk rates
    (open loop, the mean answer length of its requests), at most the cores here less one (at least 1)."""
    cap = max(1, (cores or cores_here()) - 1)
    reqs = [r for g in job.groups for _, r in g]
    if not reqs:
        return 1
    if job.mode == "closed":
        need = math.ceil((job.concurrency or 1) / STREAMS_PER_PROC)
    else:
        rate = job.offered or 0.0
        mean_out = sum(r.output_tokens for r in reqs) / len(reqs)
        need = max(math.ceil(rate * mean_out / CHUNKS_PER_PROC), math.ceil(rate / REQUESTS_PER_PROC),
                   math.ceil((point.max_in_flight or 0) / STREAMS_PER_PROC))
    return max(1, min(cap, need))


async def run_shares(base_url: str, model: str, point: LoadPoint, shares: list[Share],
                     fresh_connections: bool, headers: dict[str, str] | None = None) -> list[ShareDone]:
    """Each share sent by its own client process (the first here when there is only one); `headers` reach the
    children through their pipes, never through a file or their command lines."""
    from atlas.loadgen import run_share

    if len(shares) == 1:
        with quiet_gc():  # entered before the clock starts: its one collection is not in the run
            return [await run_share(base_url, model, point, shares[0], fresh_connections, time.perf_counter(),
                                     headers)]
    ctx = mp.get_context("spawn")  # not fork: the caller may hold threads (samplers, engine log readers)
    procs: list[Any] = []
    conns: list[Connection] = []
    try:
        for share in shares:
            parent, child = ctx.Pipe()
            p = ctx.Process(target=_client_process, args=(child,), daemon=True, name="atlas-load-client")
            p.start()
            child.close()
            parent.send((base_url, model, point, share, fresh_connections, headers))
            procs.append(p)
            conns.append(parent)
        for k, c in enumerate(conns):
            await asyncio.to_thread(_receive, c, procs[k], READY_TIMEOUT_S, "ready")
        t0 = time.perf_counter() + START_LEAD_S
        for c in conns:
            c.send(t0)
        horizon = max(s.horizon for s in shares)
        limit = START_LEAD_S + horizon + point.request_timeout_s * max(1, len(shares[0].groups)) + 60.0
        return list(await asyncio.gather(*(asyncio.to_thread(_receive, c, p, limit, "done")
                                           for c, p in zip(conns, procs, strict=True))))
    finally:
        for p in procs:
            p.join(timeout=5)
            if p.is_alive():
                p.kill()
        for c in conns:
            c.close()


def _receive(conn: Connection, proc: Any, timeout: float, expect: str) -> Any:
    if not conn.poll(timeout):
        raise LoadClientError(f"load client process {proc.pid} sent nothing within {timeout:g} s")
    try:
        kind, payload = conn.recv()
    except EOFError:
        raise LoadClientError(f"load client process {proc.pid} exited (code {proc.exitcode})") from None
    if kind == "error":
        raise LoadClientError(f"load client process {proc.pid}: {payload}")
    if kind != expect:
        raise LoadClientError(f"load client process {proc.pid} said {kind!r}, expected {expect!r}")
    return payload


def _client_process(conn: Connection) -> None:
    """A spawned client: takes its share, says ready, waits for t0, sends, and returns its records."""
    try:
        from atlas.loadgen import run_share, run_sync

        base_url, model, point, share, fresh, headers = conn.recv()
        with quiet_gc():
            conn.send(("ready", None))
            t0 = conn.recv()
            done = run_sync(run_share(base_url, model, point, share, fresh, t0, headers))
        conn.send(("done", done))
    except BaseException as e:  # noqa: BLE001 - reported to the parent, which fails the point with it
        try:
            conn.send(("error", f"{type(e).__name__}: {e}"))
        except OSError:
            pass
    finally:
        conn.close()
