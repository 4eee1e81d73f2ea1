"""`atlas publish`: many sweeps' results as one static site (atlas.report.publish)."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console
from rich.markup import escape

console = Console(soft_wrap=True)
err = Console(stderr=True)


def publish_cmd(results: list[Path] = typer.Argument(..., help="results folders: results/ (every sweep in it) or "
                                                               "results/<sweep>, as many as you like"),
                out: Path = typer.Option(Path("site"), help="the site's folder (replaced whole when done)"),
                compare_: list[str] = typer.Option([], "--compare", help=(
                    "BASELINE:NEW, repeatable: also compare these two atlases (by sweep name); atlases of the same "
                    "model, GPU and engine are compared with the one before them anyway")),
                title: str = typer.Option("Atlas", help="the index page's title")) -> None:
    """One static site over many sweeps: an index of every atlas (model, GPU, engine, date, frontier size, best
    configuration under its SLO), each atlas's report, compare pages; plotly.js once, relative links only."""
    from atlas.report.publish import PublishError, publish

    asked = []
    for c in compare_:
        old, sep, new = c.partition(":")
        if not sep or not old or not new:
            err.print(f"[bold red]error:[/] --compare {escape(c)}: expected BASELINE:NEW", highlight=False)
            raise typer.Exit(2)
        asked.append((old, new))
    try:
        site = publish(results, out, asked=asked, title=title)
    except (PublishError, OSError) as e:
        err.print(f"[bold red]error:[/] {escape(str(e))}", highlight=False, soft_wrap=True)
        raise typer.Exit(2) from None
    for n in site.notes:
        err.print(f"[yellow]note:[/] {escape(n)}", highlight=False, soft_wrap=True)
    for a in site.atlases:
        best = "; ".join(f"{b['gpu']}: {b['label']}" for b in a.best) or "none eligible"
        console.print(f"{a.name}: {', '.join(a.models)} on {', '.join(a.gpus)} ({', '.join(a.engines)}), "
                      f"{a.date or 'undated'}, {a.points} points, frontier {a.frontier}; best {best}",
                      highlight=False, markup=False)
    console.print(f"{len(site.compares)} comparisons; site: {site.index}")
