"""How much load the client sustains, and how exact its timing is, against the mock server on its own core,
for each number of client processes asked (the client processes share every other core). Prints: max request
rate (1-token answers), max streamed chunk rate, and at 256 (and more) concurrent streams the TTFT/ITL timing
error, the send lateness and the client's own verdict on itself (atlas.client_check: a point it would mark
client-bound is flagged so), beside the mock server's own account of how late its chunks left against their
schedule (GET /atlas_mock/timing), so that an error the mock made is not taken for the client's. (Its CPU share
would not say it: the mock spins through the last 2 ms before each chunk is due, so it looks busy at any load.)

    .venv/bin/python benchmarks/loadgen_overhead.py [--procs 1,2,4] [--streams 256,512,1024]

The mock server is one Python process on one core: where its own lateness is most of the error, the figure is
the mock's ceiling, not the client's; on a 2-core host the client has one core whatever --procs says.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import urllib.request
from pathlib import Path

from atlas.config import LoadPoint
from atlas.engines.mock.engine import MockEngine
from atlas.engines.mock.server import MockOptions
from atlas.knobs import LoadMode
from atlas.loadgen import run_load, run_sync
from atlas.metrics import itl_ms, summarize_load, ttft_ms

CORES = sorted(os.sched_getaffinity(0))


def point(c: int, n: int, tokens: int, warm: int) -> LoadPoint:
    return LoadPoint(mode=LoadMode.CLOSED, concurrency=c, num_requests=n, warmup_requests=warm, output_tokens=tokens,
                     min_requests=1, min_duration_s=0, repeats=1, request_timeout_s=600)


def with_mock(opts: MockOptions, fn):  # type: ignore[no-untyped-def]
    with tempfile.TemporaryDirectory() as d:
        eng = MockEngine(opts, Path(d) / "mock.log")
        eng.start()
        try:
            if len(CORES) > 1 and eng.proc is not None:
                os.sched_setaffinity(eng.proc.pid, {CORES[-1]})
            return fn(eng.base_url)
        finally:
            eng.stop()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--procs", default="1", help="client process counts to measure, e.g. 1,2,4")
    ap.add_argument("--streams", default="256,512,1024", help="in-flight streams for the timing error")
    args = ap.parse_args()
    client_cores = set(CORES[:-1]) if len(CORES) > 1 else set(CORES)
    os.sched_setaffinity(0, client_cores)  # spawned client processes inherit it
    print(f"client on cores {sorted(client_cores)}, mock server on core {CORES[-1]}")
    for procs in (int(v) for v in args.procs.split(",")):
        measure(procs, [int(v) for v in args.streams.split(",")])


def measure(procs: int, streams: list[int]) -> None:
    print(f"--- {procs} client process{'es' if procs > 1 else ''}")

    def rate(url: str) -> None:
        run = run_sync(run_load(url, "mock", point(64, 3000, 1, 64), procs=procs))
        ok = [r for r in run.records if r.phase == "measure" and r.status == "ok"]
        span = max(r.done_s for r in ok) - min(r.scheduled_s for r in ok)
        print(f"max request rate (1-token streams, 64 in flight): {len(ok) / span:,.0f} req/s "
              f"({len(ok) / span / procs:,.0f} per process)")

    with_mock(MockOptions(ttft_ms=0, itl_ms=0), rate)

    def chunks(url: str) -> None:
        run = run_sync(run_load(url, "mock", point(128, 512, 64, 128), procs=procs))
        ok = [r for r in run.records if r.phase == "measure" and r.status == "ok"]
        span = max(r.end_s for r in ok) - min(r.scheduled_s for r in ok)
        total = sum(len(r.token_times_s) for r in ok) / span
        print(f"max streamed chunk rate (128 streams x 64 chunks, zero delay): {total:,.0f} chunks/s "
              f"({total / procs:,.0f} per process)")

    with_mock(MockOptions(ttft_ms=0, itl_ms=0), chunks)

    # Timing error: Poisson arrivals that keep `c` streams in flight (a closed loop would re-send in
    # lock-step and every chunk would arrive in one burst). Each stream: TTFT 60 ms, then 47 x 40 ms.
    for c in streams:
        def timing(url: str, c: int = c) -> None:
            rate = c / 1.94
            p = LoadPoint(mode=LoadMode.POISSON, rate_rps=rate, num_requests=int(rate * 4), output_tokens=48,
                          warmup_s=1.5, cooldown_s=0.5, min_requests=1, min_duration_s=0, repeats=1,
                          request_timeout_s=600)
            run = run_sync(run_load(url, "mock", p, procs=procs))
            mock = json.loads(urllib.request.urlopen(url.rstrip("/") + "/atlas_mock/timing", timeout=30).read())
            ok = [r for r in run.records if r.phase == "measure" and r.status == "ok"]
            t = sorted(ttft_ms(r) - 60.0 for r in ok)
            gaps = sorted(v - 40.0 for r in ok for v in itl_ms(r))
            late = sorted((r.sent_s - r.scheduled_s) * 1e3 for r in ok)
            check = summarize_load(run, intervals=False).client
            verdict = (check.client_bound or check.warning or "client on time") if check else "-"
            print(f"{c:5d} streams ({rate:.0f} req/s, {c * 25:,} chunks/s): TTFT error p50 {t[len(t) // 2]:+.2f} ms "
                  f"p99 {t[int(len(t) * .99)]:+.2f} ms; ITL error p50 {gaps[len(gaps) // 2]:+.2f} ms "
                  f"p99 {gaps[int(len(gaps) * .99)]:+.2f} ms; send lateness p50 {statistics.median(late):.2f} ms "
                  f"p99 {late[int(len(late) * .99)]:.2f} ms; ok {len(ok)}; self-check: {verdict}; "
                  f"the mock's own lateness p50 {mock['p50']:.2f} ms p99 {mock['p99']:.2f} ms")

        with_mock(MockOptions(ttft_ms=60, itl_ms=40), timing)


if __name__ == "__main__":
    main()
