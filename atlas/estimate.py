"""What a sweep will cost before it runs: wall time (engine start-ups, quality evaluations, load points, capacity
searches), GPU-hours and dollars. Load points are simulated: with the calibrated simulator where one is given
and calibrates the config, else with stated assumed efficiencies; start-ups are the median of those already
recorded in the sweep's results folder, else a stated assumption per engine. Nothing is started."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from pathlib import Path

from atlas.config import LoadPoint, SweepSpec
from atlas.hardware import GpuSpec, HardwareError, price_usd_per_hour
from atlas.knobs import LoadMode
from atlas.plan import PlannedRun, RunConfig, SkippedRun
from atlas.simulator.features import Efficiencies, SimulatorError, kv_capacity_tokens, step_costs

# Assumed when nothing measured says otherwise (each printed with the estimate it shaped).
ASSUMED_STARTUP_S = {("vllm", False): 120.0, ("vllm", True): 45.0, ("sglang", False): 120.0,
                     ("llamacpp", False): 15.0, ("llamacpp", True): 5.0, ("mock", True): 2.0, ("mock", False): 2.0,
                     ("external", True): 1.0, ("external", False): 1.0}  # an endpoint is only checked
ASSUMED_EFFICIENCY = {False: Efficiencies(overhead_s=0.004, bw_eff=0.6, compute_eff=0.4, sample_s=2e-5),
                      True: Efficiencies(overhead_s=0.010, bw_eff=0.3, compute_eff=0.3, sample_s=1e-3)}
EVAL_CHARS_PER_TOKEN = 4.0  # an eval prompt's length in tokens, from its characters (no tokenizer without an engine)
DEFAULT_STARTUP_S = 120.0
SIM_REQUESTS = 24  # a point is simulated with at most max(this, 2 x its streams) requests and its time scaled


@dataclass
class PointTime:
    run_id: str
    seconds: float | None  # None: could not be estimated (reason)
    basis: str  # "simulator <artifact>" | "assumed efficiencies" | why not


@dataclass
class ServerTime:
    label: str
    engine: str
    startup_s: float
    startup_basis: str
    quality_s: float  # 0 when another server with the same numerics evaluates them first
    quality_basis: str = ""  # what the quality estimate rests on (and which sets it leaves out)
    points: list[PointTime] = field(default_factory=list)
    capacity_s: float = 0.0  # at most (the search measures up to max_measurements rates)

    @property
    def seconds(self) -> float:
        return self.startup_s + self.quality_s + sum(p.seconds or 0.0 for p in self.points) + self.capacity_s


@dataclass
class SweepEstimate:
    servers: list[ServerTime]
    gpu: str
    gpus_per_server: int
    usd_per_gpu_hour: float | None
    price_source: str
    assumptions: list[str]
    unestimated: int  # points with no time estimate (counted as 0)

    @property
    def seconds(self) -> float:
        return sum(s.seconds for s in self.servers)

    @property
    def gpu_hours(self) -> float:
        return self.seconds / 3600 * self.gpus_per_server

    @property
    def usd(self) -> float | None:
        return None if self.usd_per_gpu_hour is None else self.gpu_hours * self.usd_per_gpu_hour

    def line(self) -> str:
        cost = (f"${self.usd:,.2f} at ${self.usd_per_gpu_hour:g}/GPU-hour ({self.price_source})"
                if self.usd is not None else f"no price ({self.price_source})")
        gaps = f"; {self.unestimated} points not estimated" if self.unestimated else ""
        return (f"estimated {fmt_duration(self.seconds)} wall, {self.gpu_hours:.2f} GPU-hours on {self.gpu}, "
                f"{cost}{gaps}")


def fmt_duration(s: float) -> str:
    if s < 90:
        return f"{s:.0f} s"
    if s < 5400:
        return f"{s / 60:.1f} min"
    return f"{s / 3600:.1f} h"


def recorded_startups(results_dir: Path | None, gpu: str) -> dict[str, list[float]]:
    """Per engine, the start-up seconds the sweep's earlier measured points recorded on this GPU kind."""
    out: dict[str, list[float]] = {}
    if results_dir is None or not results_dir.is_dir():
        return out
    from atlas.results import load_results

    for r in load_results(results_dir)[0]:
        ready = r.provenance.engine.get("ready_s") if r.provenance else None
        if r.source == "measured" and r.config.gpu == gpu and isinstance(ready, (int, float)) and ready > 0:
            out.setdefault(r.config.engine, []).append(float(ready))
    return out


def shortened(load: LoadPoint) -> tuple[LoadPoint, float]:
    """A load point with fewer requests that runs like it (a steady state reached, its mix of lengths kept), and
    the factor its time scales by: what makes an estimate of a 100-point sweep take seconds, not minutes."""
    if load.mode == LoadMode.TRACE:
        return load, 1.0  # a trace's arrivals are its own: replayed whole
    keep = max(SIM_REQUESTS, 2 * (load.concurrency or load.max_in_flight or 1))
    if load.num_requests <= keep:
        return load, 1.0
    warm = load.warmup_requests if load.mode == LoadMode.CLOSED else 0
    return (load.model_copy(update={"num_requests": keep}),
            (load.num_requests + warm) / (keep + warm))


class PointTimer:
    """Seconds one load point takes (all its repeats), from the simulator or the assumed efficiencies."""

    def __init__(self, gpu: GpuSpec, artifact: object | None = None):
        self.gpu, self.artifact = gpu, artifact

    def run_seconds(self, cfg: RunConfig) -> tuple[float | None, str, float | None]:
        """(wall seconds of one repeat, basis, requests/s) of a config's load point."""
        from atlas.simulator.queue import simulate

        try:
            costs = step_costs(cfg.model, cfg.server, self.gpu)
        except SimulatorError as e:
            return None, f"not estimated: {e}", None
        eff, basis = ASSUMED_EFFICIENCY[self.gpu.is_cpu], "assumed efficiencies"
        if self.artifact is not None:
            from atlas.simulator.predict import _choose

            try:
                eff, _, reasons, _ = _choose(self.artifact, cfg)  # type: ignore[arg-type]
                basis = f"simulator {self.artifact.name}" + (" (extrapolated)" if reasons else "")  # type: ignore[attr-defined]
            except SimulatorError:
                pass
        capacity = kv_capacity_tokens(costs, self.gpu, cfg.server)
        load, scale = shortened(cfg.load)
        run = simulate(costs, eff, cfg.server, load, max_model_len=cfg.model.max_model_len,
                       kv_capacity_tokens=capacity)
        done = sum(1 for r in run.records if r.end_s is not None)
        rate = done / run.wall_s if run.wall_s > 0 else None
        wall = run.wall_s * scale
        if load.rate_rps and rate and scale > 1 and rate >= 0.9 * load.rate_rps:
            # open loop the server keeps up with: the arrivals stretch with the requests, the drain does not
            arrivals = max((r.scheduled_s for r in run.records), default=0.0)
            wall = arrivals * scale + (run.wall_s - arrivals)
        return wall, basis, rate

    def point(self, cfg: RunConfig) -> tuple[float | None, str, float | None]:
        wall, basis, rate = self.run_seconds(cfg)
        return (None if wall is None else wall * cfg.load.repeats), basis, rate


def quality_seconds(spec: SweepSpec, cfg: RunConfig, timer: PointTimer) -> tuple[float, str]:
    """One numerics' quality evaluation: its eval sets' items generated at the server's batch size (and a
    perplexity pass, small beside them)."""
    from atlas.quality import load_set

    q = spec.quality
    if not q.enabled:
        return 0.0, "quality off"
    items: list[int] = []
    skipped: list[str] = []
    for name in [*q.sets, *q.jsonl]:
        try:
            got = load_set(name)
        except Exception:  # noqa: BLE001 - a set that cannot be read here is preflight's to report
            skipped.append(name)
            continue
        n = len(got) if q.max_items_per_set is None else min(len(got), q.max_items_per_set)
        items += [max(1, round(len(i.question) / EVAL_CHARS_PER_TOKEN)) for i in got[:n]]
    if not items:
        return 0.0, "no eval items here" + (f" ({', '.join(skipped)} not estimated)" if skipped else "")
    prompt = min(cfg.model.max_model_len - q.max_tokens, max(1, round(sum(items) / len(items))))
    load = LoadPoint(mode=LoadMode.CLOSED, concurrency=cfg.server.slots, num_requests=len(items), warmup_requests=0,
                     prompt_tokens=max(1, prompt), output_tokens=q.max_tokens, repeats=1)
    wall, basis, _ = timer.run_seconds(cfg.model_copy(update={"load": load}))
    return (wall or 0.0), f"{len(items)} items, {basis}" + (f"; {', '.join(skipped)} not estimated" if skipped else "")


def capacity_seconds(spec: SweepSpec, cfg: RunConfig, rate: float | None, timer: PointTimer) -> float:
    """At most: every rate the search may measure, near the rate the ladder's busiest point sustained."""
    from atlas.capacity import rate_point

    cap = spec.capacity
    if rate is None or rate <= 0:
        per = (cap.warmup_s + cap.duration_s) * spec.load.repeats
    else:
        point = rate_point(spec, rate)
        wall, _, _ = timer.run_seconds(cfg.model_copy(update={"load": point}))
        per = (wall if wall is not None else cap.warmup_s + cap.duration_s) * point.repeats
    return cap.max_measurements * per


def estimate(spec: SweepSpec, gpu: GpuSpec, items: list[PlannedRun | SkippedRun], *, artifact: object | None = None,
             results_dir: Path | None = None, price_provider: str | None = None,
             done: set[str] | None = None) -> SweepEstimate:
    """`items`: the expanded plan; `done`: run ids a resumed sweep keeps (not measured again)."""
    timer = PointTimer(gpu, artifact)
    startups = recorded_startups(results_dir, gpu.key)
    assumptions: list[str] = []
    groups: dict[str, list[RunConfig]] = {}
    for i in items:
        if isinstance(i, PlannedRun) and i.run_id not in (done or set()):
            groups.setdefault(i.config.server_key(), []).append(i.config)
    servers: list[ServerTime] = []
    evaluated: set[object] = set()
    unestimated = 0
    for configs in groups.values():
        first = configs[0]
        engine = first.engine
        if engine in startups:
            up, basis = statistics.median(startups[engine]), f"median of {len(startups[engine])} recorded start-ups"
        else:
            up = ASSUMED_STARTUP_S.get((engine, gpu.is_cpu), DEFAULT_STARTUP_S)
            basis = "assumed"
            line = f"{engine} start-up {up:g} s on {'a CPU' if gpu.is_cpu else 'a GPU'} (none recorded yet; excludes downloading weights)"
            if line not in assumptions:
                assumptions.append(line)
        key = first.server.numerics().key
        q_s, q_basis = 0.0, ""
        if spec.quality.enabled and key not in evaluated:
            evaluated.add(key)
            q_s, q_basis = quality_seconds(spec, first, timer)
        st = ServerTime(label=first.server.label(), engine=engine, startup_s=up, startup_basis=basis, quality_s=q_s,
                        quality_basis=q_basis)
        busiest: tuple[float, float | None] = (-1.0, None)
        for cfg in configs:
            secs, why, rate = timer.point(cfg)
            unestimated += secs is None
            st.points.append(PointTime(run_id=cfg.run_id(), seconds=secs, basis=why))
            level = cfg.load.concurrency or cfg.load.rate_rps or 0.0
            if rate is not None and level >= busiest[0]:
                busiest = (level, rate)
        if spec.slo is not None and spec.capacity_on():
            st.capacity_s = capacity_seconds(spec, first, busiest[1], timer)
        servers.append(st)
    if any(p.basis.startswith("assumed") for s in servers for p in s.points):
        e = ASSUMED_EFFICIENCY[gpu.is_cpu]
        assumptions.append(f"load points without a calibrated simulator: {e.bw_eff:.0%} of peak bandwidth, "
                           f"{e.compute_eff:.0%} of peak FLOP/s, {e.overhead_s * 1e3:g} ms per engine step "
                           "(give --simulator simulator/<name>.json from `atlas fit` for calibrated figures)")
    if spec.slo is not None and spec.capacity_on():
        assumptions.append(f"capacity searches at most {spec.capacity.max_measurements} rates each, near the rate "
                           "the busiest ladder point sustained (an upper bound: most searches stop sooner)")
    try:
        price, source = price_usd_per_hour(gpu.key, price_provider or spec.price_provider)
    except HardwareError as e:
        price, source = None, str(e)
    return SweepEstimate(servers=servers, gpu=gpu.key, gpus_per_server=1, usd_per_gpu_hour=price,  # one engine, one GPU
                         price_source=source, assumptions=assumptions, unestimated=unestimated)


def actual_vs_estimate(est: SweepEstimate, wall_s: float) -> str:
    if est.seconds <= 0:  # nothing left to measure (a resume that keeps every point)
        return f"took {fmt_duration(wall_s)}; nothing was estimated to measure"
    return (f"took {fmt_duration(wall_s)} against an estimate of {fmt_duration(est.seconds)} "
            f"({wall_s / est.seconds:.2f}x the estimate)")
