"""The load client's check on itself: whether the latency a point reports is the server's, or partly the
client's own delay. Each client process samples its event loop's wake-up lateness and its own CPU time while it
runs; each open-loop request records when the client really fired it against when it was scheduled. A point
whose client fell behind (send lateness or loop lag p99 over the limit, or a client process busy all the time)
is invalid, with the figure: "client-bound: send lateness p99 X ms"."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict

if TYPE_CHECKING:
    from atlas.loadgen import LoadRun

LAG_INTERVAL_S = 0.01  # how often each client process's event loop is sampled
FLOOR_MS = 5.0  # never below this: above the idle scheduling jitter of a shared 2-core host (p99 2-4 ms)
SHARE_OF_LATENCY = 0.10  # ... and otherwise 10% of the point's median ITL or TTFT, whichever is smaller
BUSY_LIMIT = 0.95  # a client process on the CPU this share of the run's wall time is saturated


@dataclass
class ProcessStats:
    """One client process over one run: its event loop's wake-up lateness samples and its CPU time."""

    lag_ms: list[float] = field(default_factory=list)
    cpu_s: float = 0.0
    wall_s: float = 0.0

    @property
    def busy(self) -> float | None:
        return self.cpu_s / self.wall_s if self.wall_s > 0 else None


class LoopMonitor:
    """Sleeps LAG_INTERVAL_S at a time and records how late each wake-up came: a loop busy with other work (or
    a process starved of CPU) wakes late, and so does every chunk it reads and every request it sends."""

    def __init__(self) -> None:
        self.stats = ProcessStats()
        self._task: asyncio.Task[None] | None = None
        self._cpu0 = self._wall0 = 0.0

    async def _sample(self) -> None:
        while True:
            t = time.perf_counter()
            await asyncio.sleep(LAG_INTERVAL_S)
            self.stats.lag_ms.append(max(0.0, (time.perf_counter() - t - LAG_INTERVAL_S) * 1e3))

    def start(self) -> None:
        self._cpu0, self._wall0 = time.process_time(), time.perf_counter()
        self._task = asyncio.get_running_loop().create_task(self._sample())

    def stop(self) -> ProcessStats:
        if self._task is not None:
            self._task.cancel()
        self.stats.cpu_s = time.process_time() - self._cpu0
        self.stats.wall_s = time.perf_counter() - self._wall0
        return self.stats


class ClientCheck(BaseModel):
    """What the client measured of itself during a point (the busiest process where several sent)."""

    model_config = ConfigDict(extra="forbid")
    procs: int = 1
    send_lateness_p50_ms: float | None = None  # open loop: fired - scheduled, over measured requests
    send_lateness_p99_ms: float | None = None
    send_lateness_max_ms: float | None = None
    loop_lag_p90_ms: float | None = None  # event-loop wake-up lateness, all client processes pooled
    loop_lag_p99_ms: float | None = None
    loop_lag_max_ms: float | None = None
    cpu_busy: float | None = None  # the busiest client process: CPU time / wall time
    send_limit_ms: float | None = None
    lag_limit_ms: float | None = None
    client_bound: str | None = None  # the reason, when the client's delay would show as server latency
    warning: str | None = None  # a tail of client delay short of that


def _pct(values: Sequence[float], q: float) -> float | None:
    if not values:
        return None
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


def limit_ms(latency_p50_ms: float | None) -> float:
    """The client's delay allowed: FLOOR_MS, or 10% of the median latency it would add to."""
    return max(FLOOR_MS, SHARE_OF_LATENCY * latency_p50_ms) if latency_p50_ms and latency_p50_ms > 0 else FLOOR_MS


def check_client(run: LoadRun, ttft_p50_ms: float | None, itl_p50_ms: float | None) -> ClientCheck:
    """The run's client check. Client-bound (the point invalid) when the client sent late (send lateness p99
    over 10% of the median TTFT, which it adds to), its loop ran late most of the time (lag p90 over 10% of
    the median ITL: a loop that cannot keep up, not a host's scheduling hiccup), or a client process was busy
    all the time; a late tail of the loop alone (p99) is a warning: the host took the CPU from the client now and
    then (an engine on the same cores does), and latency tails may carry that much of the client's delay."""
    late = [(r.fired_s - r.scheduled_s) * 1e3 for r in run.records
            if r.phase == "measure" and r.fired_s is not None]
    lags = [v for p in run.client for v in p.lag_ms]
    busy = [b for b in (p.busy for p in run.client) if b is not None]
    send_lim, lag_lim = limit_ms(ttft_p50_ms), limit_ms(itl_p50_ms if itl_p50_ms else ttft_p50_ms)
    out = ClientCheck(procs=max(1, len(run.client)), send_lateness_p50_ms=_pct(late, 0.5),
                      send_lateness_p99_ms=_pct(late, 0.99), send_lateness_max_ms=max(late) if late else None,
                      loop_lag_p90_ms=_pct(lags, 0.9), loop_lag_p99_ms=_pct(lags, 0.99),
                      loop_lag_max_ms=max(lags) if lags else None, cpu_busy=max(busy) if busy else None,
                      send_limit_ms=send_lim, lag_limit_ms=lag_lim)
    why = []
    if out.send_lateness_p99_ms is not None and out.send_lateness_p99_ms > send_lim:
        why.append(f"send lateness p99 {out.send_lateness_p99_ms:.1f} ms > {send_lim:.1f}")
    if out.loop_lag_p90_ms is not None and out.loop_lag_p90_ms > lag_lim:
        why.append(f"event-loop lag p90 {out.loop_lag_p90_ms:.1f} ms > {lag_lim:.1f}")
    if out.cpu_busy is not None and out.cpu_busy >= BUSY_LIMIT:
        why.append(f"a client process {out.cpu_busy:.0%} busy")
    procs = f"{out.procs} client process{'es' if out.procs > 1 else ''}"
    if why:
        out.client_bound = f"client-bound: {', '.join(why)} ({procs}; --client-procs raises it)"
    elif out.loop_lag_p99_ms is not None and out.loop_lag_p99_ms > lag_lim:
        out.warning = (f"client delay: its event loop woke up to {out.loop_lag_p99_ms:.1f} ms late (p99, {procs}): "
                       f"latency tails may carry that much of the client's own delay")
    return out
