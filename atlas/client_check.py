"""The load client's check on itself: whether the latency a point reports is the server's, or partly the
client's own delay. Each client process reads, at the start and end of its run, its CPU time and the kernel's
scheduler account of its event-loop thread (/proc/thread-self/schedstat: time spent runnable but waiting for a
CPU, and how many times it was scheduled in); each open-loop request records when the client really fired it
against when it was scheduled. Nothing is sampled while the run goes on: a timer waking the client every few ms
was tried first, and it moved the mock server's measured TTFT by ~2 ms (an observer effect on a shared host).
A point whose client fell behind (send lateness p99 over the limit, its loop waiting on average over the limit
for a CPU each time it woke, or a client process busy all the time) is invalid, with the figure:
"client-bound: send lateness p99 X ms"."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict

if TYPE_CHECKING:
    from atlas.loadgen import LoadRun

FLOOR_MS = 5.0  # never below this: above the scheduling jitter of a shared 2-core host (send lateness p99 2-4 ms)
SHARE_OF_LATENCY = 0.10  # ... and otherwise 10% of the point's median ITL or TTFT, whichever it adds to
BUSY_LIMIT = 0.95  # a client process on the CPU this share of the run's wall time is saturated
WAIT_WARNING = 0.10  # a loop runnable but off the CPU this share of the run: latency tails may carry it
SCHEDSTAT = Path("/proc/thread-self/schedstat")


def _schedstat() -> tuple[float, int] | None:
    """(seconds this thread has waited runnable for a CPU, times it was scheduled in); None off Linux."""
    try:
        _run_ns, wait_ns, slices = SCHEDSTAT.read_text().split()[:3]
        return int(wait_ns) / 1e9, int(slices)
    except (OSError, ValueError):
        return None


@dataclass
class ProcessStats:
    """One client process over one run: CPU time, wall time, and (Linux) how long its event-loop thread waited
    runnable for a CPU over how many wake-ups."""

    cpu_s: float = 0.0
    wall_s: float = 0.0
    wait_s: float | None = None
    wakeups: int | None = None

    @property
    def busy(self) -> float | None:
        return self.cpu_s / self.wall_s if self.wall_s > 0 else None

    @property
    def wait_per_wakeup_ms(self) -> float | None:
        return self.wait_s / self.wakeups * 1e3 if self.wait_s is not None and self.wakeups else None

    @property
    def wait_share(self) -> float | None:
        return self.wait_s / self.wall_s if self.wait_s is not None and self.wall_s > 0 else None


class ClientMeter:
    """Reads the process's CPU time and the loop thread's scheduler account at start() and stop(), in the
    event loop's thread."""

    def __init__(self) -> None:
        self._cpu0 = self._wall0 = 0.0
        self._sched0: tuple[float, int] | None = None

    def start(self) -> None:
        self._cpu0, self._wall0, self._sched0 = time.process_time(), time.perf_counter(), _schedstat()

    def stop(self) -> ProcessStats:
        stats = ProcessStats(cpu_s=time.process_time() - self._cpu0, wall_s=time.perf_counter() - self._wall0)
        end = _schedstat()
        if self._sched0 is not None and end is not None:
            stats.wait_s, stats.wakeups = end[0] - self._sched0[0], end[1] - self._sched0[1]
        return stats


class ClientCheck(BaseModel):
    """What the client measured of itself during a point (the worst process where several sent)."""

    model_config = ConfigDict(extra="forbid")
    procs: int = 1
    send_lateness_p50_ms: float | None = None  # open loop: fired - scheduled, over measured requests
    send_lateness_p99_ms: float | None = None
    # the send lateness judged: at the highest latency percentile the point can report with its requests (p99
    # from 100, p95 from 20, p90 from 10: atlas.metrics.min_samples_for), since a later send than that moves
    # no number the point reports
    judged_quantile: int | None = None
    send_lateness_judged_ms: float | None = None
    send_lateness_max_ms: float | None = None
    cpu_busy: float | None = None  # CPU time / wall time
    sched_wait_per_wakeup_ms: float | None = None  # the loop thread's mean wait for a CPU each time it woke
    sched_wait_share: float | None = None  # ... and the share of the run it spent so waiting
    send_limit_ms: float | None = None
    wait_limit_ms: float | None = None
    client_bound: str | None = None  # the reason, when the client's delay would show as server latency
    warning: str | None = None  # client delay short of that


def _pct(values: Sequence[float], q: float) -> float | None:
    if not values:
        return None
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


def limit_ms(latency_p50_ms: float | None) -> float:
    """The client's delay allowed: FLOOR_MS, or 10% of the median latency it would add to."""
    return max(FLOOR_MS, SHARE_OF_LATENCY * latency_p50_ms) if latency_p50_ms and latency_p50_ms > 0 else FLOOR_MS


def _worst(values: Sequence[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return max(known) if known else None


def check_client(run: LoadRun, ttft_p50_ms: float | None, itl_p50_ms: float | None) -> ClientCheck:
    """The run's client check. Client-bound (the point invalid) when the client sent late (send lateness, at the
    highest percentile the point reports, over 10% of the median TTFT, which it adds to), its loop waited on average more than 10% of the median ITL
    for a CPU each time it woke (every chunk it read carried that much), or a client process was busy all the
    time. A loop off the CPU over WAIT_WARNING of the run, short of that, is a warning: latency tails may carry
    the client's delay (an engine on the same cores takes the CPU now and then)."""
    late = [(r.fired_s - r.scheduled_s) * 1e3 for r in run.records
            if r.phase == "measure" and r.fired_s is not None]
    send_lim, wait_lim = limit_ms(ttft_p50_ms), limit_ms(itl_p50_ms if itl_p50_ms else ttft_p50_ms)
    out = ClientCheck(procs=max(1, len(run.client)), send_lateness_p50_ms=_pct(late, 0.5),
                      send_lateness_p99_ms=_pct(late, 0.99), send_lateness_max_ms=max(late) if late else None,
                      cpu_busy=_worst([p.busy for p in run.client]),
                      sched_wait_per_wakeup_ms=_worst([p.wait_per_wakeup_ms for p in run.client]),
                      sched_wait_share=_worst([p.wait_share for p in run.client]),
                      send_limit_ms=send_lim, wait_limit_ms=wait_lim)
    if late:
        from atlas.metrics import min_samples_for

        q = next((q for q in (99, 95, 90) if len(late) >= min_samples_for(q)), 50)
        out.judged_quantile, out.send_lateness_judged_ms = q, _pct(late, q / 100)
    why = []
    if out.send_lateness_judged_ms is not None and out.send_lateness_judged_ms > send_lim:
        why.append(f"send lateness p{out.judged_quantile} {out.send_lateness_judged_ms:.1f} ms > {send_lim:.1f}")
    if out.sched_wait_per_wakeup_ms is not None and out.sched_wait_per_wakeup_ms > wait_lim:
        why.append(f"its loop waited {out.sched_wait_per_wakeup_ms:.1f} ms for a CPU per wake-up > {wait_lim:.1f}")
    if out.cpu_busy is not None and out.cpu_busy >= BUSY_LIMIT:
        why.append(f"a client process {out.cpu_busy:.0%} busy")
    procs = f"{out.procs} client process{'es' if out.procs > 1 else ''}"
    if why:
        out.client_bound = (f"client-bound ({run.client_name}'s own client): {', '.join(why)}" if run.client_name else
                            f"client-bound: {', '.join(why)} ({procs}; more with --client-procs where cores are free)")
    elif out.sched_wait_share is not None and out.sched_wait_share > WAIT_WARNING:
        out.warning = (f"client delay: its event loop waited for a CPU {out.sched_wait_share:.0%} of the run "
                       f"({out.sched_wait_per_wakeup_ms or 0:.2f} ms per wake-up, {procs}): latency tails may "
                       f"carry the client's own delay")
    return out
