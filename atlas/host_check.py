"""Whether other programs took the CPUs a point's engine and client needed. Atlas compares within one run
because its hosts are shared; a point measured while something else ran on them carries that program's load in
its latency, and the client's own check (atlas.client_check) sees only the client's delay. Around a point's load
the sweep reads the kernel's account of the CPUs it may run on (/proc/stat's per-CPU lines for the process's
affinity: a container's cpuset, not the whole machine; busy, idle, and stolen by the hypervisor) and the CPU time
of Atlas's own processes: itself and the other members of its process group but its ancestors (the command as a
shell started it, or what one launcher started in one group, e.g. a test's search workers), with every descendant
of those (the engine it started in its own session, the client processes). What neither Atlas's processes nor the
idle time explains ran elsewhere: it took CPU from the point where the CPUs had none idle for it. A point that lost
more than LIMIT of the CPU time it could have had is invalid, "host busy: ...", with the figures; above WARN, a
warning. Time the hypervisor stole is recorded and warned of above STEAL_WARN of the CPUs, never a verdict: on this
project's 2-core VMs it is 10-25% of an I/O-bound point's own CPU time (the vCPUs' wake-ups from idle) and under 1%
of two busy loops', so it says how the VM wakes, not that another program ran. Nothing is sampled while the load
runs (two reads of /proc per point). Off Linux: no check."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, ConfigDict

PROC = Path("/proc")
LIMIT = 0.10  # a point that lost over 10% of the CPU time it could use is not the config's figure
WARN = 0.03
STEAL_WARN = 0.10  # of the CPUs' time
MIN_TAKEN_CORES = 0.05  # below this much CPU taken (a twentieth of a core), jiffy rounding, not another program
_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


@dataclass(frozen=True)
class CpuSnapshot:
    wall_s: float
    busy_s: float  # all CPUs: user, nice, system, irq, softirq (guest time is inside user)
    idle_s: float  # idle and iowait
    steal_s: float  # runnable but run by the hypervisor for another machine
    ours_s: dict[int, float]  # per process of Atlas's: its CPU time and that of children it reaped
    cpus: int


def _cpu_lines(cpus: set[int] | None) -> list[float] | None:
    """Seconds per state (user nice system idle iowait irq softirq steal) summed over the CPUs this process may
    run on (a container's cpuset; /proc/stat counts the whole machine's), or over all of them off Linux's
    affinity call."""
    try:
        with open(PROC / "stat") as f:
            lines = [ln.split() for ln in f if ln.startswith("cpu")]
    except OSError:
        return None
    rows = [ln for ln in lines if ln[0] != "cpu" and (cpus is None or int(ln[0][3:]) in cpus)]
    if not rows:
        rows = [ln for ln in lines if ln[0] == "cpu"]
    if not rows:
        return None
    return [sum(int(r[i]) for r in rows if len(r) > i) / _TICK for i in range(1, 9)]


def _affinity() -> set[int] | None:
    try:
        return set(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return None


def _procs() -> dict[int, tuple[int, int, float]]:
    """pid -> (parent pid, process group, CPU seconds: own and reaped children's) of every process readable now."""
    out: dict[int, tuple[int, int, float]] = {}
    for d in PROC.iterdir():
        if not d.name.isdigit():
            continue
        try:
            raw = (d / "stat").read_text()
        except OSError:
            continue  # exited meanwhile
        rest = raw[raw.rindex(")") + 2:].split()  # the name may hold spaces and parentheses
        utime, stime, cutime, cstime = (int(v) for v in rest[11:15])
        out[int(d.name)] = (int(rest[1]), int(rest[2]), (utime + stime + cutime + cstime) / _TICK)
    return out


def _tree(procs: dict[int, tuple[int, int, float]], root: int) -> dict[int, float]:
    """CPU seconds of `root`, the other members of its process group but its ancestors, and every descendant
    of those (an ancestor's other children, a launcher's, are someone else's unless in the group)."""
    children: dict[int, list[int]] = {}
    for pid, (ppid, _, _) in procs.items():
        children.setdefault(ppid, []).append(pid)
    ancestors, pid = set(), root
    while pid in procs and pid not in ancestors:
        ancestors.add(pid)
        pid = procs[pid][0]
    ancestors.discard(root)
    group = procs[root][1] if root in procs else None
    out, todo = {}, [root, *(pid for pid, (_, pgrp, _) in procs.items() if pgrp == group and pid not in ancestors)]
    while todo:
        pid = todo.pop()
        if pid in procs and pid not in out:
            out[pid] = procs[pid][2]
            todo += children.get(pid, [])
    return out


def snapshot(root: int | None = None) -> CpuSnapshot | None:
    """The CPUs' account and Atlas's tree's CPU time now (`root`: the tree's top, this process by default)."""
    cpus = _affinity()
    line = _cpu_lines(cpus)
    if line is None:
        return None
    user, nice, system, idle, iowait, irq, softirq, steal = line
    return CpuSnapshot(wall_s=time.monotonic(), busy_s=user + nice + system + irq + softirq, idle_s=idle + iowait,
                       steal_s=steal, ours_s=_tree(_procs(), root or os.getpid()),
                       cpus=len(cpus) if cpus else os.cpu_count() or 1)


class HostCheck(BaseModel):
    """What the host's CPUs did during a point's load, in cores (CPU seconds per second of wall time)."""

    model_config = ConfigDict(extra="forbid")
    cpus: int
    wall_s: float
    ours_cores: float  # Atlas's process tree: engine, client, Atlas
    others_cores: float  # every other program on the host
    idle_cores: float
    steal_cores: float
    taken_cores: float  # what the other programs took from the point (see the module docstring)
    taken_share: float  # taken / (ours + taken): the share of the CPU time the point could have had
    host_busy: str | None = None  # the reason, when the point is not the config's figure
    warning: str | None = None


def check_host(before: CpuSnapshot, after: CpuSnapshot) -> HostCheck:
    wall = max(1e-9, after.wall_s - before.wall_s)
    ours = sum(t - before.ours_s.get(pid, 0.0) for pid, t in after.ours_s.items())
    ours = max(0.0, ours)
    busy, idle, steal = (after.busy_s - before.busy_s, after.idle_s - before.idle_s, after.steal_s - before.steal_s)
    others = max(0.0, busy - ours)
    taken = max(0.0, others - idle)  # the others ran on idle CPUs first; the rest competed with the point
    share = taken / (ours + taken) if ours + taken > 0 else 0.0
    out = HostCheck(cpus=after.cpus, wall_s=round(wall, 3), ours_cores=round(ours / wall, 3),
                    others_cores=round(others / wall, 3), idle_cores=round(idle / wall, 3),
                    steal_cores=round(steal / wall, 3), taken_cores=round(taken / wall, 3), taken_share=round(share, 4))
    stolen = steal / (wall * out.cpus)
    if taken / wall >= MIN_TAKEN_CORES:
        what = (f"other programs used {out.others_cores:.2f} of {out.cpus} cores while {out.idle_cores:.2f} sat "
                f"idle: {share:.0%} of the CPU time this point could use")
        if share > LIMIT:
            out.host_busy = f"host busy: {what} (> {LIMIT:.0%}); measure on a quiet host"
        elif share > WARN:
            out.warning = f"host busy: {what}"
    if out.host_busy is None and stolen > STEAL_WARN:
        out.warning = "; ".join(filter(None, [out.warning, f"the hypervisor stole {stolen:.0%} of the CPUs' time"]))
    return out
