"""Pure, deterministic expansion of a sweep spec into planned and skipped runs."""

from __future__ import annotations

import hashlib
import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, model_validator

from atlas.config import LoadPoint, ModelSpec, SweepSpec
from atlas.engines.adapter import Caps
from atlas.engines.knobs_base import drop_flat_defaults, grid_combos
from atlas.engines.registry import ADAPTERS, DEFAULT_ENGINE, ServerKnobs, adapter
from atlas.hardware import GpuSpec
from atlas.knobs import LoadMode
from atlas.numerics import Numerics
from atlas.workloads.requests import pinned
from atlas.workloads.spec import TraceWorkload

DESCRIPTIVE_MODEL_FIELDS = ("params_b", "num_layers", "num_kv_heads", "head_dim")


class RunConfig(BaseModel):
    """Everything that determines a measurement; its hash is the run id."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    engine: str
    gpu: str
    model: ModelSpec
    server: ServerKnobs
    load: LoadPoint

    @model_validator(mode="before")
    @classmethod
    def _migrate_flat_server(cls, data: Any) -> Any:
        """Results written before knobs were per engine hold a flat `server` without `engine` (every engine's
        knobs, at their defaults where the engine lacks them): read them as their engine's knobs."""
        if not isinstance(data, dict) or not isinstance(data.get("server"), dict) or "engine" in data["server"]:
            return data
        engine = data.get("engine", DEFAULT_ENGINE)
        knobs = adapter(engine).knobs.knob_names() if engine in ADAPTERS else []
        server = drop_flat_defaults(knobs, {"engine": engine, **data["server"]})
        return {**data, "server": server}

    @model_validator(mode="after")
    def _one_engine(self) -> RunConfig:
        if self.server.engine != self.engine:
            raise ValueError(f"server.engine {self.server.engine!r} is not the config's engine {self.engine!r}")
        return self

    def _id_form(self) -> dict[str, Any]:
        # The model's size fields only describe it (for screening and the simulator); they are left out so
        # that adding them to a spec does not orphan what was already measured.
        return {"engine": self.engine, "gpu": self.gpu,
                "model": self.model.model_dump(mode="json", exclude=set(DESCRIPTIVE_MODEL_FIELDS)),
                "server": self.server.id_form(), "load": self.load.model_dump(mode="json")}

    def server_key(self) -> str:
        form = self._id_form()
        return _digest({k: form[k] for k in ("engine", "gpu", "model", "server")})

    def label(self) -> str:
        return f"{self.server.label()} | {self.load.label()}"

    def run_id(self) -> str:
        return _digest(self._id_form())


class PlannedRun(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    kind: Literal["planned"] = "planned"
    run_id: str
    config: RunConfig


class SkippedRun(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    kind: Literal["skipped"] = "skipped"
    run_id: str
    config: RunConfig
    reason: str


def _digest(obj: object) -> str:
    canon = json.dumps(obj, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canon.encode()).hexdigest()[:16]


def grid_servers(engine: str, g: Any) -> list[ServerKnobs]:
    """Every server config of a grid: the cross product of its knob lists, in field order."""
    knobs = adapter(engine).knobs
    return [knobs(engine=engine, **values) for values in grid_combos(knobs, g)]


def server_grid(spec: SweepSpec) -> list[tuple[str, ServerKnobs]]:
    """Every (engine, server config) of the spec's grids, in order, without repeats."""
    out: dict[tuple[str, ServerKnobs], None] = {}
    for engine, g in spec.grids():
        for s in grid_servers(engine, g):
            out[(engine, s)] = None
    return list(out)


def load_points(spec: SweepSpec) -> list[LoadPoint]:
    """The spec's load levels; a file workload's file is read and its sha256 pinned here (WorkloadError)."""
    shape = spec.load.shape()
    workload = pinned(shape.workload)
    base = shape.model_copy(update={"workload": workload}).model_dump()
    if spec.load.mode == LoadMode.CLOSED:
        return [LoadPoint(**base, concurrency=c) for c in spec.load.concurrency]
    if spec.load.mode == LoadMode.TRACE:
        assert isinstance(workload, TraceWorkload)
        return [LoadPoint(**{**base, "workload": {**base["workload"], "time_scale": s}}) for s in workload.scales()]
    return [LoadPoint(**base, rate_rps=r) for r in spec.load.rate_rps]


def infeasible_reason(spec: SweepSpec, gpu: GpuSpec, s: ServerKnobs, caps: Caps = None) -> str | None:
    """Why this server config cannot run on this GPU (with an engine that accepts `caps`), or None: the engine's
    adapter decides. Only combinations known to be impossible are refused here; what the engine itself refuses
    is recorded from the engine as a failed run."""
    return adapter(s.engine).infeasible(spec, gpu, s, caps)


def memory_reason(spec: SweepSpec, gpu: GpuSpec, n: Numerics, memory_utilization: float | None) -> str | None:
    """Weights, the activation reserve and one max-length sequence's KV cache must fit in the memory the engine
    may use (a GPU engine's memory screening, for adapters that want it): the same model of vLLM's allocation as
    the dry run's memory fit (atlas.simulator.features.kv_capacity_tokens), so a config the dry run says cannot
    hold one sequence is never started (vLLM refuses to start then)."""
    from atlas.simulator.features import ACTIVATION_RESERVE_GIB

    m = spec.model
    if m.params_b is None:
        return None
    weights_gib = m.params_b * 1e9 * n.bytes_per_weight / 2**30
    kv_gib = 0.0
    if m.num_layers and m.num_kv_heads and m.head_dim:
        kv_gib = 2 * m.num_layers * m.num_kv_heads * m.head_dim * n.kv_bytes_per_elem * m.max_model_len / 2**30
    budget = gpu.memory_gib * (memory_utilization or 0.9)
    if weights_gib + ACTIVATION_RESERVE_GIB + kv_gib > budget:
        return (f"does not fit: {weights_gib:.1f} GiB of weights + {ACTIVATION_RESERVE_GIB:g} GiB reserve + "
                f"{kv_gib:.2f} GiB KV for one {m.max_model_len}-token sequence > {budget:.1f} GiB usable on {gpu.key}")
    return None


def expand(spec: SweepSpec, gpu: GpuSpec, caps: dict[str, Caps] | None = None) -> list[PlannedRun | SkippedRun]:
    """Every (server config x load point) of the spec, in a stable order; same inputs, same list. `caps`: per
    engine, what the installed engine accepts (missing: assume any version)."""
    out: list[PlannedRun | SkippedRun] = []
    points = load_points(spec)
    for engine, server in server_grid(spec):
        reason = infeasible_reason(spec, gpu, server, (caps or {}).get(engine))
        for lp in points:
            cfg = RunConfig(engine=engine, gpu=gpu.key, model=spec.model, server=server, load=lp)
            if reason:
                out.append(SkippedRun(run_id=cfg.run_id(), config=cfg, reason=reason))
            else:
                out.append(PlannedRun(run_id=cfg.run_id(), config=cfg))
    return out


def installed_caps(spec: SweepSpec) -> dict[str, Caps]:
    """What each engine of the spec that is installed here accepts (read without starting it)."""
    return {e: adapter(e).caps() for e in spec.engines()}
