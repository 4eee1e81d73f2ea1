"""The load client's garbage collector, A/B: the same open-loop point (Poisson, about 256 streams in flight,
TTFT 60 ms and ITL 100 ms injected by the mock server) sent by one client process with Python's own collector
(before) and with Atlas's quiet collector (atlas.client_gc: collect, freeze, off for the run). Each arm is a
process of its own that lives for all its runs, as a sweep does (one arm's full collections would otherwise reset
the other's count towards its next one); the arms take turns, run by run. Prints per run and per arm: the
client's verdict on itself, its send lateness p50 / p99 / max, the TTFT error p99 against the injected 60 ms, and
the collections that ran inside the run (how many, the longest, the full ones; gc.callbacks), and whether other
programs took the host's CPUs meanwhile (atlas.host_check, as a sweep judges a point: such runs are left out of
the summary).

    .venv/bin/python benchmarks/client_gc.py [--pairs 10] [--requests 520] [--rate 132]
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import multiprocessing as mp
import statistics
import tempfile
import time
from multiprocessing.connection import Connection
from pathlib import Path

TTFT_MS, ITL_MS = 60.0, 100.0


class Pauses:
    """Each collection's generation and length, from gc.callbacks; mark / end: where the run's clock started
    (after the quiet guard's own collection) and where its guard was left."""

    def __init__(self) -> None:
        self.seen: list[tuple[int, float]] = []
        self.mark = self.end = 0
        self._t = 0.0
        gc.callbacks.append(self._cb)

    def _cb(self, phase: str, info: dict) -> None:  # type: ignore[type-arg]
        if phase == "start":
            self._t = time.perf_counter()
        else:
            self.seen.append((info["generation"], (time.perf_counter() - self._t) * 1e3))

    def around(self, guard):  # type: ignore[no-untyped-def]
        @contextlib.contextmanager
        def enter():  # type: ignore[no-untyped-def]
            with guard():
                self.mark = len(self.seen)
                try:
                    yield
                finally:
                    self.end = len(self.seen)

        return enter


def arm_process(conn: Connection, arm: str, url: str, requests: int, rate: float) -> None:
    import atlas.loadgen_procs as procs
    from atlas.config import LoadPoint
    from atlas.knobs import LoadMode
    from atlas.loadgen import run_load, run_sync
    from atlas.metrics import summarize_load, ttft_ms

    pauses = Pauses()
    procs.quiet_gc = pauses.around(procs.quiet_gc if arm == "quiet" else contextlib.nullcontext)  # type: ignore
    lp = LoadPoint(mode=LoadMode.POISSON, rate_rps=rate, num_requests=requests, output_tokens=20, min_requests=4,
                   min_duration_s=0.1, repeats=1)
    while conn.recv() == "run":
        run = run_sync(run_load(url, "mock", lp, procs=1))
        inside = pauses.seen[pauses.mark:pauses.end]
        c = summarize_load(run, intervals=False).client
        err = sorted(ttft_ms(r) - TTFT_MS for r in run.records if r.status == "ok")
        conn.send({"bound": c.client_bound is not None, "p50": c.send_lateness_p50_ms,
                   "p99": c.send_lateness_p99_ms, "max": c.send_lateness_max_ms,
                   "ttft99": err[int(0.99 * (len(err) - 1))] if err else float("nan"), "gcs": len(inside),
                   "gc_max": max((ms for _, ms in inside), default=0.0),
                   "full": sum(1 for g, _ in inside if g == 2)})


def main() -> None:
    from atlas.engines.mock.engine import MockEngine
    from atlas.engines.mock.server import MockOptions
    from atlas.host_check import check_host, snapshot

    ap = argparse.ArgumentParser()
    ap.add_argument("--pairs", type=int, default=10)
    ap.add_argument("--requests", type=int, default=520)
    ap.add_argument("--rate", type=float, default=132.0, help="req/s (x 20 chunks x 100 ms: ~256 streams at 132)")
    args = ap.parse_args()
    arms: dict[str, list[dict]] = {"python": [], "quiet": []}  # type: ignore[type-arg]
    ctx = mp.get_context("spawn")
    with tempfile.TemporaryDirectory() as d:
        eng = MockEngine(MockOptions(ttft_ms=TTFT_MS, itl_ms=ITL_MS), Path(d) / "mock.log")
        eng.start()
        conns, workers = {}, []
        try:
            for arm in arms:
                parent, child = ctx.Pipe()
                p = ctx.Process(target=arm_process, args=(child, arm, eng.base_url, args.requests, args.rate))
                p.start()
                conns[arm] = parent
                workers.append(p)
            for i in range(args.pairs):
                for arm in (("python", "quiet") if i % 2 == 0 else ("quiet", "python")):
                    before = snapshot()
                    conns[arm].send("run")
                    row = conns[arm].recv()
                    after = snapshot()
                    host = check_host(before, after) if before and after else None
                    row["busy"] = host is not None and host.host_busy is not None
                    row["taken"] = host.taken_share if host else 0.0
                    arms[arm].append(row)
                    print(f"{i:2d} {arm:6s} {'client-bound' if row['bound'] else 'on time':12s} send lateness "
                          f"{row['p50']:.2f} / {row['p99']:.2f} / {row['max']:.1f} ms, TTFT error p99 "
                          f"{row['ttft99']:+.2f} ms, {row['gcs']} collections in the run (longest "
                          f"{row['gc_max']:.1f} ms, {row['full']} full)"
                          f"{'; HOST BUSY' if row['busy'] else ''} (others took {row['taken']:.0%})", flush=True)
        finally:
            for c in conns.values():
                c.send("stop")
            for p in workers:
                p.join(10)
            eng.stop()
    for arm, every in arms.items():
        rows = [r for r in every if not r["busy"]]
        print(f"{arm}: {len(every) - len(rows)} of {len(every)} runs left out, the host busy (atlas.host_check)")
        if not rows:
            continue
        p99 = [r["p99"] for r in rows]
        print(f"{arm}: {sum(r['bound'] for r in rows)}/{len(rows)} client-bound; send lateness p99 median "
              f"{statistics.median(p99):.2f} ms (range {min(p99):.2f}-{max(p99):.2f}), max median "
              f"{statistics.median(r['max'] for r in rows):.1f} ms; TTFT error p99 median "
              f"{statistics.median(r['ttft99'] for r in rows):+.2f} ms; collections in a run median "
              f"{statistics.median(r['gcs'] for r in rows):g}, longest {max(r['gc_max'] for r in rows):.1f} ms, "
              f"runs with a full one {sum(1 for r in rows if r['full'])}")


if __name__ == "__main__":
    main()
