"""`atlas compare`: two result folders matched by configuration, printed, written as an offline page, and
gated (exit 1 with a line per regression the --fail-on rules catch)."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

console = Console(soft_wrap=True)
err = Console(stderr=True)


def compare_cmd(baseline: Path = typer.Argument(..., help="the baseline's results folder (results/<sweep>)"),
                new: Path = typer.Argument(..., help="the new results folder"),
                out: Path = typer.Option(None, help="page folder (default: reports/compare-<baseline>-<new>/)"),
                fail_on: list[str] = typer.Option([], "--fail-on", help=(
                    "METRIC:+N% or METRIC:-N, repeatable: exit 1 when a matched point's metric moved that way by "
                    "more (and significantly), e.g. tpot_p50_ms:+5%, accuracy:-0.02")),
                threshold: float = typer.Option(5.0, help="changes smaller than this % are unchanged"),
                all_metrics: bool = typer.Option(False, "--all", help="print every metric, not only the moved")) -> None:
    """Compare two result folders: per configuration, each metric's change and its significance, what differs
    in their provenance, and how the frontier moved."""
    from atlas.compare import CompareError, compare
    from atlas.gate import GateError, gate, parse_fail_on
    from atlas.report.compare_page import write_compare_page
    from atlas.results import ResultError

    try:
        rules = [parse_fail_on(x) for x in fail_on]
        c = compare(baseline, new, threshold / 100.0)
    except (CompareError, GateError, ResultError, OSError) as e:
        err.print(f"[bold red]error:[/] {escape(str(e))}", highlight=False, soft_wrap=True)
        raise typer.Exit(2) from None
    failures = gate(c, rules) if rules else None
    console.print(f"{len(c.matched)} configurations matched; {len(c.only_baseline)} only in {baseline}, "
                  f"{len(c.only_new)} only in {new}")
    for line in c.provenance:
        console.print(f"  measured differently: {escape(line)}", highlight=False)
    t = Table("configuration", "metric", "baseline", "new", "change", "verdict", "test")
    for p in c.judged():
        row = p.label if p in c.matched else f"{p.label} (at capacity)"
        if p.old_status != p.new_status:
            t.add_row(escape(row), "status", p.old_status, p.new_status, "", "", escape("; ".join(p.new_reasons)))
        for x in p.changes:
            if all_metrics or x.verdict in ("regression", "improvement"):
                change = f"{x.relative * 100:+.1f}%" if x.relative is not None else f"{x.change:+.4g}"
                style = {"regression": "red", "improvement": "green"}.get(x.verdict, "")
                t.add_row(escape(row), x.metric, f"{x.old:.4g}", f"{x.new:.4g}", change,
                          f"[{style}]{x.verdict}[/]" if style else x.verdict, escape(x.test))
    console.print(t)
    console.print(f"frontier: entered {len(c.frontier_entered)}, left {len(c.frontier_left)}")
    for label in c.frontier_entered:
        console.print(f"  + {escape(label)}", highlight=False)
    for label in c.frontier_left:
        console.print(f"  - {escape(label)}", highlight=False)
    if c.capacities:
        console.print(f"{len(c.capacities)} capacities matched; frontier at capacity: entered "
                      f"{len(c.capacity_frontier_entered)}, left {len(c.capacity_frontier_left)}")
        for label in c.capacity_frontier_entered:
            console.print(f"  + {escape(label)}", highlight=False)
        for label in c.capacity_frontier_left:
            console.print(f"  - {escape(label)}", highlight=False)
    where = out or Path("reports") / f"compare-{baseline.name}-{new.name}"
    try:
        page = write_compare_page(c, where, failures, [r.describe() for r in rules])
    except OSError as e:
        err.print(f"[bold red]error:[/] {escape(str(e))}", highlight=False, soft_wrap=True)
        raise typer.Exit(2) from None
    console.print(f"page: {page}")
    if failures:
        for line in failures:
            err.print(f"regression: {escape(line)}", highlight=False, soft_wrap=True)
        raise typer.Exit(1)
