"""Atlas command line: each command parses, calls one library function, and prints."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table

from atlas.config import SpecError, SweepSpec, load_spec
from atlas.engines.base import EngineError
from atlas.engines.embedded import EmbeddedModelError
from atlas.frontier import FrontierError, parse_constraint, parse_objective
from atlas.hardware import CONFIG_DIR, HardwareError, get_gpu
from atlas.plan import SkippedRun, expand
from atlas.quality import QualityError
from atlas.results import ResultError, RunResult

app = typer.Typer(add_completion=False, no_args_is_help=True, help="Atlas: a Pareto atlas of LLM inference optimizations.")
console = Console()
err = Console(stderr=True)
USER_ERRORS = (SpecError, HardwareError, ResultError, FrontierError, QualityError, EmbeddedModelError, EngineError)


def _fail(e: Exception) -> None:
    err.print(f"[bold red]error:[/] {e}", highlight=False, soft_wrap=True)
    raise typer.Exit(2)


def default_spec(gpu: str) -> Path:
    return CONFIG_DIR / ("cpu-smollm2.yaml" if gpu == "cpu" else "qwen2.5-7b.yaml")


@app.command()
def sweep(spec: Path = typer.Argument(None, help="sweep YAML; default: the embedded default for --gpu cpu"),
          gpu: str = typer.Option("cpu", help="cpu, l4, a100-40, a100-80, h100, h100-pcie, h200"),
          results: Path = typer.Option(Path("results"), help="results root; points go to RESULTS/<sweep>/"),
          resume: bool = typer.Option(False, help="keep finished points whose config is unchanged"),
          prices: str = typer.Option(None, "--price-provider", help="provider in configs/prices.yaml")) -> None:
    """Measure every point of a sweep and write one result file per point."""
    from atlas.sweep import Sweeper, SweepEvent

    try:
        s = load_spec(spec or default_spec(gpu))
        s = s.model_copy(update={"gpu": gpu})
        g = get_gpu(gpu)
        columns = (TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                   TextColumn("ETA"), TimeRemainingColumn(), TextColumn("{task.fields[current]}"))
        with Progress(*columns, console=console, transient=False) as bar:
            task = bar.add_task(s.name, total=None, current="")

            def on_event(e: SweepEvent) -> None:
                bar.update(task, total=e.total, completed=e.done, current=e.message[:70])
                if e.kind == "point" and e.status not in ("ok", None):
                    bar.console.print(f"  [yellow]{e.status}[/] {e.message}", highlight=False)
                elif e.kind in ("server", "quality"):
                    bar.console.print(f"  {e.message}", highlight=False)

            report = Sweeper(s, g, results, resume=resume, progress=on_event, price_provider=prices).run()
    except USER_ERRORS as e:
        _fail(e)
    counts = ", ".join(f"{k} {v}" for k, v in sorted(report.counts().items()))
    console.print(f"{len(report.results)} points in {report.wall_s:.0f} s ({counts}) -> {report.results_dir}")


def _site(results_dir: Path, out: Path, objectives: list[str], slo: list[str], show: bool) -> None:
    from atlas.frontier import compute_frontier
    from atlas.report.site import DEFAULT_OBJECTIVES, build_site
    from atlas.results import load_results
    from atlas.table import results_frame

    try:
        objs = [parse_objective(o) for o in objectives] if objectives else DEFAULT_OBJECTIVES
        cons = [parse_constraint(c) for c in slo]
        results, errors = load_results(results_dir)
    except USER_ERRORS as e:
        _fail(e)
    for e in errors:
        err.print(f"[yellow]warning:[/] {e}", highlight=False, soft_wrap=True)
    if not results:
        _fail(ResultError(f"{results_dir}: no readable result files"))
    by_sweep: dict[str, list[RunResult]] = {}
    for r in results:
        by_sweep.setdefault(r.sweep, []).append(r)
    for name, rs in sorted(by_sweep.items()):
        index = build_site(rs, out / name, title=f"Atlas — {name}", objectives=objs, constraints=cons,
                           load_errors=errors)
        if show:
            fr = compute_frontier(results_frame(rs), objs, cons)
            t = Table(title=f"{name}: Pareto frontier ({int(fr['on_frontier'].sum())} of {len(fr)} points)")
            for c in ["label", *[o.metric for o in objs]]:
                t.add_column(c)
            for _, row in fr[fr["on_frontier"]].iterrows():
                t.add_row(str(row["label"]), *[f"{row[o.metric]:.4g}" for o in objs])
            console.print(t)
            excluded = fr[~fr["eligible"]]
            if len(excluded):
                console.print(f"{len(excluded)} points kept out (failed, skipped, invalid, quality-gated or over the SLO);"
                              " see the report for each reason.")
        console.print(f"report: {index}")


@app.command()
def frontier(results_dir: Path = typer.Argument(Path("results")),
             out: Path = typer.Option(Path("reports"), help="report root; one site per sweep"),
             objective: list[str] = typer.Option([], help="METRIC:min|max, repeatable; default cost, p50 TPOT, accuracy"),
             slo: list[str] = typer.Option([], help="METRIC<=V or METRIC>=V, repeatable, e.g. ttft_p99_ms<=500")) -> None:
    """Compute the Pareto frontier of measured results and write the HTML report."""
    _site(results_dir, out, objective, slo, show=True)


@app.command()
def report(results_dir: Path = typer.Argument(Path("results")), out: Path = typer.Option(Path("reports")),
           objective: list[str] = typer.Option([]), slo: list[str] = typer.Option([])) -> None:
    """Write the static HTML report site only."""
    _site(results_dir, out, objective, slo, show=False)


@app.command()
def validate(spec: Path, gpu: str = typer.Option(None, help="check feasibility on this GPU (default: the spec's)")) -> None:
    """Check a sweep YAML and show how many points it plans and skips."""
    try:
        s = load_spec(spec)
        g = get_gpu(gpu or s.gpu)
    except USER_ERRORS as e:
        _fail(e)
    items = expand(s, g)
    skipped = [i for i in items if isinstance(i, SkippedRun)]
    console.print(f"{spec}: valid; {len(items)} points on {g.key} ({len(items) - len(skipped)} planned, "
                  f"{len(skipped)} skipped)")
    for reason in sorted({i.reason for i in skipped}):
        console.print(f"  skipped: {reason}", highlight=False)


@app.command()
def schema(what: str = typer.Argument("sweep", help="sweep or result")) -> None:
    """Print the JSON schema of a sweep spec or a result file."""
    models = {"sweep": SweepSpec, "result": RunResult}
    if what not in models:
        _fail(ValueError(f"unknown schema {what!r}; choose sweep or result"))
    console.print_json(json.dumps(models[what].model_json_schema()))


if __name__ == "__main__":
    app()
