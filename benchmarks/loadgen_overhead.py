"""How much load one client core sustains, and how exact its timing is, against the mock server on the
other core. Prints: max request rate (1-token answers), max streamed chunk rate, and the TTFT/ITL timing
error at 256 (and more) concurrent streams.

    .venv/bin/python benchmarks/loadgen_overhead.py
"""

from __future__ import annotations

import os
import statistics
import tempfile
from pathlib import Path

from atlas.config import LoadPoint
from atlas.engines.mock.engine import MockEngine
from atlas.engines.mock.server import MockOptions
from atlas.knobs import LoadMode
from atlas.loadgen import run_load, run_sync
from atlas.metrics import itl_ms, ttft_ms

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
    if len(CORES) > 1:
        os.sched_setaffinity(0, {CORES[0]})  # the client: one core
    print(f"client on core {CORES[0]}, mock server on core {CORES[-1]}")

    def rate(url: str) -> None:
        run = run_sync(run_load(url, "mock", point(64, 3000, 1, 64)))
        ok = [r for r in run.records if r.phase == "measure" and r.status == "ok"]
        span = max(r.done_s for r in ok) - min(r.scheduled_s for r in ok)
        print(f"max request rate (1-token streams, 64 in flight): {len(ok) / span:,.0f} req/s")

    with_mock(MockOptions(ttft_ms=0, itl_ms=0), rate)

    def chunks(url: str) -> None:
        run = run_sync(run_load(url, "mock", point(128, 512, 64, 128)))
        ok = [r for r in run.records if r.phase == "measure" and r.status == "ok"]
        span = max(r.end_s for r in ok) - min(r.scheduled_s for r in ok)
        print(f"max streamed chunk rate (128 streams x 64 chunks, zero delay): "
              f"{sum(len(r.token_times_s) for r in ok) / span:,.0f} chunks/s")

    with_mock(MockOptions(ttft_ms=0, itl_ms=0), chunks)

    # Timing error: Poisson arrivals that keep `c` streams in flight (a closed loop would re-send in
    # lock-step and every chunk would arrive in one burst). Each stream: TTFT 60 ms, then 47 x 40 ms.
    for c in (256, 512, 1024):
        def timing(url: str, c: int = c) -> None:
            rate = c / 1.94
            p = LoadPoint(mode=LoadMode.POISSON, rate_rps=rate, num_requests=int(rate * 4), output_tokens=48,
                          warmup_s=1.5, cooldown_s=0.5, min_requests=1, min_duration_s=0, repeats=1,
                          request_timeout_s=600)
            run = run_sync(run_load(url, "mock", p))
            ok = [r for r in run.records if r.phase == "measure" and r.status == "ok"]
            t = sorted(ttft_ms(r) - 60.0 for r in ok)
            gaps = sorted(v - 40.0 for r in ok for v in itl_ms(r))
            q = statistics.median((r.sent_s - r.scheduled_s) * 1e3 for r in ok)
            print(f"{c:5d} streams ({rate:.0f} req/s, {c * 25:,} chunks/s): TTFT error p50 {t[len(t) // 2]:+.2f} ms "
                  f"p99 {t[int(len(t) * .99)]:+.2f} ms; ITL error p50 {gaps[len(gaps) // 2]:+.2f} ms "
                  f"p99 {gaps[int(len(gaps) * .99)]:+.2f} ms; client send lateness p50 {q:.2f} ms; ok {len(ok)}")

        with_mock(MockOptions(ttft_ms=60, itl_ms=40), timing)


if __name__ == "__main__":
    main()
