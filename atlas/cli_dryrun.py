"""Prints `atlas sweep --dry-run`: the plan, each engine command line, memory fit, skips, and the estimate."""

from __future__ import annotations

import shlex
from pathlib import Path

from rich.console import Console

from atlas.config import SweepSpec
from atlas.dryrun import plan_servers, skipped_reasons
from atlas.estimate import SweepEstimate, estimate, fmt_duration
from atlas.hardware import GpuSpec
from atlas.plan import PlannedRun, SkippedRun


def sweep_estimate(spec: SweepSpec, gpu: GpuSpec, items: list[PlannedRun | SkippedRun], results: Path,
                   artifact: object | None, price_provider: str | None, resume: bool) -> SweepEstimate:
    """The estimate of what this sweep will measure (with --resume, less what it keeps)."""
    done: set[str] = set()
    folder = results / spec.name
    if resume and folder.is_dir():
        from atlas.results import ResultStore

        store = ResultStore(results, spec.name)
        done = {i.run_id for i in items if isinstance(i, PlannedRun) and store.is_complete(i.run_id, i.config,
                                                                                        spec.measurement_settings())}
    return estimate(spec, gpu, items, artifact=artifact, results_dir=folder, price_provider=price_provider, done=done)


def print_dry_run(console: Console, spec: SweepSpec, gpu: GpuSpec, items: list[PlannedRun | SkippedRun],
                  est: SweepEstimate) -> None:
    plans = plan_servers(spec, gpu, items)
    times = {s.label: s for s in est.servers}
    planned = sum(isinstance(i, PlannedRun) for i in items)
    say = lambda text: console.print(text, highlight=False, markup=False, soft_wrap=True)  # noqa: E731
    say(f"dry run of {spec.name} on {gpu.key}: {len(items)} points, {planned} planned on {len(plans)} server "
        f"configs, {len(items) - planned} skipped; nothing was started")
    for n, p in enumerate(plans, 1):
        t = times.get(p.label)
        say(f"\n[{n}/{len(plans)}] {p.engine} {p.label}: {len(p.points)} load points ({', '.join(p.points)})")
        if p.argv is not None:
            say("  command: " + shlex.join(p.argv))
        if p.prepare:
            say(f"  first:   {p.prepare}")
        if p.problem:
            say(f"  cannot start as planned here: {p.problem}")
        say(f"  memory:  {p.memory.verdict}")
        if t is not None:
            parts = [f"start-up {t.startup_s:.0f} s ({t.startup_basis})"]
            if t.quality_s or t.quality_basis:
                parts.append(f"quality {fmt_duration(t.quality_s)}" + (f" ({t.quality_basis})" if t.quality_basis else ""))
            pts = sum(x.seconds or 0.0 for x in t.points)
            basis = sorted({x.basis for x in t.points})
            parts.append(f"load points {fmt_duration(pts)} ({'; '.join(basis)})")
            if t.capacity_s:
                parts.append(f"capacity search up to {fmt_duration(t.capacity_s)}")
            say(f"  time:    {fmt_duration(t.seconds)} = " + " + ".join(parts))
    skips = skipped_reasons(items)
    if skips:
        say("\nskipped:")
        for reason, labels in skips.items():
            say(f"  {len(labels)} server configs: {reason}")
    say("\n" + est.line())
    for a in est.assumptions:
        say(f"  assumed: {a}")
