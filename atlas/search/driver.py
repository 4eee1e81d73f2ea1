"""One search worker: chooses the next point (strategy order, simulator seed or the Optuna sampler), asks the
study for it, measures it, and tells the study its objectives; stops when the study's budget is spent. The
same loop serves one process and many workers sharing a database study: everything it decides from is read
back from the study each time round."""

from __future__ import annotations

import contextlib
import os
import random
import socket
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

import optuna
from optuna.samplers import BaseSampler, NSGAIISampler, TPESampler
from optuna.trial import FrozenTrial, TrialState

from atlas.engines.registry import ServerKnobs
from atlas.frontier import Objective
from atlas.numerics import NumericsKey, baselines
from atlas.plan import PlannedRun
from atlas.results import RunResult
from atlas.search.seeding import Seeder
from atlas.search.space import SearchSpace
from atlas.search.study import StudyHandle, quality_keys
from atlas.sweep import order_groups
from atlas.table import METRICS


class Measurer(Protocol):
    def measure(self, planned: PlannedRun) -> RunResult: ...

    def refused(self, server: ServerKnobs) -> bool: ...


def objective_values(result: RunResult, objectives: list[Objective]) -> list[float] | None:
    """The point's objectives, or None when it has none to offer (failed, or a metric missing)."""
    if result.status in ("failed", "skipped"):
        return None
    vals = [METRICS[o.metric][2](result) for o in objectives]
    if any(v is None or v != v for v in vals):
        return None
    return [float(v) for v in vals if v is not None]


def dead_reason(result: RunResult, measurer: Measurer) -> str | None:
    """Why no other point with these numerics can be worth measuring: the engine refused them, or their
    quality failed the gate (quality is a property of the numerics, shared by every scheduling config)."""
    if result.status == "quality_failed" and result.quality is not None and not result.quality.gate_passed:
        return f"failed the quality gate at {result.label}: {'; '.join(result.quality.gate_reasons)}"
    if result.status == "failed" and measurer.refused(result.config.server):
        return f"refused by the engine at start-up ({result.reasons[0] if result.reasons else result.label})"
    return None


def make_sampler(handle: StudyHandle, n_startup: int) -> BaseSampler:
    s = handle.settings
    budget = s.budget or 64
    if s.sampler == "nsga2":
        return NSGAIISampler(population_size=max(4, min(20, budget // 3)), seed=s.seed)
    return TPESampler(seed=s.seed, multivariate=True, n_startup_trials=max(2, n_startup))


def baseline_keys(space: SearchSpace) -> dict[str, NumericsKey]:
    """Each engine's quality baseline: its most precise unquantized numerics (as a full sweep chooses)."""
    return {e: n.key for e, n in baselines([p.config.server.numerics() for p in space.points]).items()}


def strategy_order(space: SearchSpace, handle: StudyHandle) -> list[int]:
    """grid: a full sweep's order; random: a seeded shuffle; optuna: none (the seeder and sampler choose)."""
    s = handle.settings
    if s.strategy == "grid":
        groups: dict[str, list[PlannedRun]] = {}
        for p in space.points:
            groups.setdefault(p.config.server_key(), []).append(p)
        index = {p.run_id: i for i, p in enumerate(space.points)}
        return [index[p.run_id] for g in order_groups(groups) for p in g]
    if s.strategy == "random":
        order = list(range(len(space)))
        random.Random(s.seed).shuffle(order)
        return order
    return []


@dataclass
class Snapshot:
    """What the study knows now, as indices into the space."""
    measured: dict[int, RunResult] = field(default_factory=dict)
    running: set[int] = field(default_factory=set)
    counted: int = 0
    seeded: int = 0
    dead: dict[NumericsKey, str] = field(default_factory=dict)
    quality: set[NumericsKey] = field(default_factory=set)


def trial_point(space: SearchSpace, t: FrozenTrial) -> int | None:
    """The planned point a trial measures; a trial popped from the queue names it (fixed_params) before its
    parameters are set, so another worker sees it taken at once."""
    return space.index_of(t.params or t.system_attrs.get("fixed_params") or {})


def read_snapshot(handle: StudyHandle, space: SearchSpace, parsed: dict[int, RunResult]) -> Snapshot:
    """The study's trials as indices into the space; `parsed` caches results by trial number."""
    snap = Snapshot()
    for t in handle.study.get_trials(deepcopy=False):
        idx = trial_point(space, t)
        if idx is None:
            continue
        if t.state == TrialState.RUNNING:
            snap.running.add(idx)
        if "result" not in t.user_attrs:
            continue
        if t.number not in parsed:
            parsed[t.number] = RunResult.model_validate_json(t.user_attrs["result"])
        snap.measured[idx] = parsed[t.number]
        snap.counted += 1
        snap.seeded += t.user_attrs.get("origin") == "simulator"
        if "dead" in t.user_attrs:
            snap.dead.setdefault(space.numerics[idx], t.user_attrs["dead"])
    snap.quality = set(quality_keys(handle.study.user_attrs).values())  # type: ignore[arg-type]
    return snap


class Worker:
    def __init__(self, handle: StudyHandle, space: SearchSpace, measurer: Measurer,
                 progress: Callable[[str], None] | None = None, name: str | None = None):
        self.h, self.space, self.measurer = handle, space, measurer
        self.progress = progress or (lambda m: None)
        self.name = name or f"{socket.gethostname()}:{os.getpid()}"
        self.order = strategy_order(space, handle)
        self.baselines = baseline_keys(space)
        self.seeder = Seeder(space, handle) if handle.settings.strategy == "optuna" and handle.settings.simulator else None
        self.sampler = make_sampler(handle, n_startup=len(set(space.numerics)) + 1)
        handle.study.sampler = self.sampler
        self._parsed: dict[int, RunResult] = {}  # trial number -> its result, parsed once
        self.measured_here: list[RunResult] = []

    # ---------------------------------------------------------------------------------------------------
    def snapshot(self) -> Snapshot:
        return read_snapshot(self.h, self.space, self._parsed)

    def allowed(self, snap: Snapshot) -> list[int]:
        """Points that may be measured now: not measured, not running, numerics not dead, and (until the
        engine's quality baseline is settled) only the baseline's own numerics."""
        settled = {e: self._settled(snap, e) for e in self.baselines}
        return [i for i in range(len(self.space))
                if i not in snap.measured and i not in snap.running and self.space.numerics[i] not in snap.dead
                and (settled.get(self.space.points[i].config.engine, True)
                     or self.space.numerics[i] == self.baselines[self.space.points[i].config.engine])]

    def _next(self, snap: Snapshot, allowed: list[int]) -> tuple[int | None, str]:
        """The point this worker wants next and why; None with "sampler": let the Optuna sampler propose;
        None with "none": the strategy's order is used up."""
        ok = set(allowed)
        for i in self.order:
            if i in ok:
                return i, self.h.settings.strategy
        if self.h.settings.strategy != "optuna":
            return None, "none"
        unsettled = [i for i in allowed if self.space.numerics[i] in self.baselines.values()
                     and not self._settled(snap, self.space.points[i].config.engine)]
        if unsettled:
            return unsettled[len(unsettled) // 2], "baseline"  # a middling scheduling config of the baseline
        budget = self.h.settings.budget or len(self.space)
        if self.seeder is not None and snap.seeded < self.h.settings.seed_fraction * budget:
            pick = self.seeder.best(snap, allowed, self.progress)
            if pick is not None:
                return pick, "simulator"
        return None, "sampler"

    def _settled(self, snap: Snapshot, engine: str) -> bool:
        """Whether the engine's quality baseline is known (or can never be), so its other numerics may run."""
        key = self.baselines.get(engine)
        return (key is None or key in snap.quality or key in snap.dead
                or any(self.space.numerics[i] == key for i in snap.measured))

    # ---------------------------------------------------------------------------------------------------
    def run(self) -> str:
        """Measures points until the study's budget is spent or nothing is left; returns why it stopped."""
        settings = self.h.settings
        budget = settings.budget or len(self.space)
        while True:
            with warnings.catch_warnings():  # Optuna marks the heartbeat API experimental
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                optuna.storages.fail_stale_trials(self.h.study)  # a dead worker's trial is failed and queued again
            snap = self.snapshot()
            if snap.counted >= budget:
                return f"budget reached: {snap.counted} points measured"
            allowed = self.allowed(snap)
            if not allowed:
                if not snap.running:
                    return (f"every point measured or excluded ({snap.counted} measured, "
                            f"{len(snap.dead)} numerics excluded)")
                time.sleep(settings.poll_s)  # others are measuring (or baselines are being set)
                continue
            if snap.counted + len(snap.running) >= budget:
                time.sleep(settings.poll_s)  # the last points of the budget are being measured elsewhere
                continue
            want, origin = self._next(snap, allowed)
            if want is None and origin == "none":
                if not snap.running:
                    return f"every point of the {settings.strategy} order measured ({snap.counted})"
                time.sleep(settings.poll_s)
                continue
            if want is not None:
                self.h.study.enqueue_trial(self.space.params(want), skip_if_exists=False)
            with warnings.catch_warnings():  # "heartbeat is meant for optimize()": this loop beats itself
                warnings.simplefilter("ignore", UserWarning)
                trial = self.h.study.ask(self.space.distributions)
            idx = self.space.index_of(trial.params)
            if idx is None or idx not in allowed:
                # The sampler proposed a point not in the grid, measured or taken (or another worker queued it):
                # queue the nearest free point instead, which the next ask takes.
                self.h.study.tell(trial, state=TrialState.PRUNED)
                near = self.space.nearest(trial.params, allowed)
                if near is not None and want is None:
                    self.h.study.enqueue_trial(self.space.params(near))
                continue
            if not self._claim(trial, idx):
                self.h.study.tell(trial, state=TrialState.PRUNED)  # another worker asked for it first
                continue
            if "worker" in trial.user_attrs:
                origin = "retry"  # a dead worker's point, queued again (with its attributes) by the heartbeat check
            elif idx != want:
                origin = "queued" if want is not None else origin
            self._measure(trial, idx, origin)

    def _claim(self, trial: optuna.trial.Trial, idx: int) -> bool:
        """Two workers can ask for the same point at once (both chose it before either started): the trial
        with the lower number measures it, the other gives way; a point measured meanwhile is not redone."""
        for t in self.h.study.get_trials(deepcopy=False, states=(TrialState.RUNNING, TrialState.COMPLETE,
                                                                 TrialState.FAIL)):
            if t.number != trial.number and trial_point(self.space, t) == idx and (
                    "result" in t.user_attrs or (t.state == TrialState.RUNNING and t.number < trial.number)):
                return False
        return True

    def _measure(self, trial: optuna.trial.Trial, idx: int, origin: str) -> None:
        planned = self.space.points[idx]
        trial.set_user_attr("run_id", planned.run_id)
        trial.set_user_attr("worker", self.name)
        trial.set_user_attr("origin", origin)
        self.progress(f"[{origin}] measuring {planned.config.label()}")
        try:
            with self.h.heartbeat(trial):
                result = self.measurer.measure(planned)
        except BaseException:  # interrupted (Ctrl-C, SIGTERM) or broken here: free the point at once
            with contextlib.suppress(Exception):
                self.h.study.tell(trial, state=TrialState.FAIL)
            raise
        dead = dead_reason(result, self.measurer)
        values = objective_values(result, self.h.settings.objectives)
        if dead:
            trial.set_user_attr("dead", dead)
        trial.set_user_attr("status", result.status)
        # A point the frontier excludes (quality-gated, invalid) is infeasible to the sampler.
        trial.set_constraint("eligible", 0.0 if result.status == "ok" else 1.0)
        trial.set_user_attr("result", result.model_dump_json())
        if values is None:
            self.h.study.tell(trial, state=TrialState.FAIL)
        else:
            self.h.study.tell(trial, values)
        self.measured_here.append(result)
