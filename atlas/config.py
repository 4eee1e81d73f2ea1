"""Typed sweep specifications (pydantic v2, extra fields forbidden, frozen) and their YAML loader."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

import yaml
from pydantic import Field, ValidationError, field_validator, model_validator

from atlas.engines.knobs_base import drop_flat_defaults, grid_combos, grid_size
from atlas.engines.registry import ADAPTERS, DEFAULT_ENGINE, AnyGrid, engine_kinds
from atlas.knobs import MAX_REQUESTS, MAX_SECONDS, MAX_STREAMS, MAX_TOKENS, LoadMode
from atlas.models import Frozen, LateFields, read_text
from atlas.redact import redact_argv, redact_env
from atlas.slo import SloSpec
from atlas.workloads.spec import FixedWorkload, TraceWorkload, Workload


class SpecError(ValueError):
    """A sweep spec that cannot be used; the message is one line naming the file and the field."""


class ModelSpec(LateFields):
    id: str = Field(description="Name shown in results and reports")
    source: Literal["embedded", "path", "hub"] = "path"
    path: str | None = Field(None, description="Local folder or hub id (source=path|hub)")
    revision: str | None = None
    max_model_len: int = Field(2048, ge=64, le=MAX_TOKENS)
    params_b: float | None = Field(None, gt=0, description="parameters (billions), for memory-fit screening")
    num_layers: int | None = Field(None, ge=1)
    num_kv_heads: int | None = Field(None, ge=1)
    head_dim: int | None = Field(None, ge=1)
    checkpoints: dict[str, str] = Field(
        default_factory=dict, description="Pre-quantized checkpoint (folder or hub id; a .gguf file for llama.cpp) "
                                          "per weight format"
    )
    sha256: str | None = Field(None, pattern=r"^[0-9a-f]{64}$",
                               description="pins a model file (a .gguf given as model.path): checked before use")
    kv_scales: dict[str, str] | None = Field(
        None, description="per weight format, a checkpoint (folder or hub id) that carries calibrated FP8 KV-cache "
                          "scales (config.json quantization_config.kv_cache_scheme); served for kv_cache_dtype "
                          "fp8_calibrated. Make one with `atlas quantize --kv-scales`")
    _late_fields: ClassVar[tuple[str, ...]] = ("sha256", "kv_scales")

    @model_validator(mode="after")
    def _formats_known(self) -> ModelSpec:
        for field, keys, allowed in (
                ("checkpoints", self.checkpoints, {k: a.weight_formats for k, a in ADAPTERS.items()}),
                ("kv_scales", self.kv_scales or {}, {k: a.kv_scale_formats for k, a in ADAPTERS.items()})):
            known = frozenset().union(*allowed.values())
            if bad := [k for k in keys if k not in known]:
                takes = "; ".join(f"{e}: {', '.join(sorted(f))}" for e, f in allowed.items() if f)
                raise ValueError(f"{field}: {', '.join(bad)} is no weight format an engine takes here ({takes})")
        return self


class LoadShape(LateFields):
    """How each load point is driven and judged (shared by all levels)."""

    mode: LoadMode = LoadMode.CLOSED
    burstiness: float = Field(1.0, gt=0.0, le=1000.0, description="gamma shape; 1.0 equals Poisson")
    max_in_flight: int | None = Field(None, ge=1, le=MAX_STREAMS, description="open loop: client cap, queue time recorded")
    num_requests: int = Field(32, ge=1, le=MAX_REQUESTS)
    prompt_tokens: int = Field(128, ge=1, le=MAX_TOKENS)
    output_tokens: int = Field(64, ge=1, le=MAX_TOKENS)
    warmup_requests: int = Field(2, ge=0, le=MAX_REQUESTS, description="closed loop: first N requests excluded")
    warmup_s: float = Field(0.0, ge=0.0, le=MAX_SECONDS, description="open loop: requests scheduled before this are excluded")
    cooldown_s: float = Field(0.0, ge=0.0, le=MAX_SECONDS, description="open loop: requests scheduled in the last S excluded")
    min_duration_s: float = Field(1.0, ge=0.0, le=MAX_SECONDS)
    min_requests: int = Field(8, ge=1, le=MAX_REQUESTS)
    max_error_rate: float = Field(0.05, ge=0.0, le=1.0)
    request_timeout_s: float = Field(300.0, gt=0.0, le=MAX_SECONDS)
    prompt_seed: int = Field(0, ge=0, lt=2**63)
    arrival_seed: int = Field(1, ge=0, lt=2**63)
    repeats: int = Field(3, ge=1, le=100)
    workload: Workload | None = Field(None, description=(
        "what the requests are (docs/workloads.md); default fixed: every prompt prompt_tokens long, every "
        "answer output_tokens"))
    _late_fields: ClassVar[tuple[str, ...]] = ("workload",)

    @field_validator("workload", mode="after")
    @classmethod
    def _fixed_is_default(cls, w: Any) -> Any:
        return None if isinstance(w, FixedWorkload) else w  # `kind: fixed` plans the same run ids as no workload

    @model_validator(mode="after")
    def _trace_mode(self) -> LoadShape:
        is_trace = isinstance(self.workload, TraceWorkload)
        if (self.mode == LoadMode.TRACE) != is_trace:
            raise ValueError("a trace workload is replayed with load.mode: trace (arrivals come from the trace), "
                             "and load.mode trace needs a trace workload")
        return self

    def workload_kind(self) -> str:
        return self.workload.kind if self.workload is not None else "fixed"


class LoadSpec(LoadShape):
    concurrency: list[Annotated[int, Field(ge=1, le=MAX_STREAMS)]] = Field([1], description="closed loop levels")
    rate_rps: list[Annotated[float, Field(gt=0.0, le=1e6, allow_inf_nan=False)]] = Field(
        [], description="open loop levels (requests per second)")

    max_extension: float = Field(4.0, ge=1.0, le=100.0, description=(
        "a point whose measured window or request count falls short of min_duration_s / min_requests is measured "
        "again with more requests, up to this many times num_requests (recorded in the result)"))

    @model_validator(mode="after")
    def _levels(self) -> LoadSpec:
        if self.mode == LoadMode.CLOSED:
            if not self.concurrency or min(self.concurrency) < 1:
                raise ValueError("load.concurrency needs at least one level >= 1 in closed mode")
        elif self.mode == LoadMode.TRACE:
            if self.rate_rps:
                raise ValueError("load.rate_rps: a trace sets its own arrivals; give workload.time_scale levels")
        elif not self.rate_rps or min(self.rate_rps) <= 0:
            raise ValueError(f"load.rate_rps needs at least one level > 0 in {self.mode.value} mode")
        return self

    def shape(self) -> LoadShape:
        return LoadShape(**self.model_dump(exclude={"concurrency", "rate_rps", "max_extension"}))


class LoadPoint(LoadShape):
    """One load level: a concurrency (closed loop) or an arrival rate (open loop)."""

    concurrency: int | None = None
    rate_rps: float | None = None

    def label(self) -> str:
        kind = "" if self.workload is None else f" {self.workload.kind.replace('_', '-')}"
        if self.mode == LoadMode.CLOSED:
            return f"c={self.concurrency}{kind}"
        if self.mode == LoadMode.TRACE:
            assert isinstance(self.workload, TraceWorkload)
            return f"trace x{self.workload.scales()[0]:g}"
        return f"{self.mode.value} {self.rate_rps:g} rps{kind}"


class GateSpec(Frozen):
    max_accuracy_drop: float = Field(0.10, ge=0.0, le=1.0, description="absolute, vs the baseline")
    alpha: float = Field(0.05, gt=0.0, lt=1.0, description="McNemar significance for the accuracy drop")
    max_perplexity_ratio: float = Field(1.25, ge=1.0)
    max_degenerate_fraction: float = Field(0.5, ge=0.0, le=1.0)


class CapacitySpec(Frozen):
    """The search for each server config's capacity under the spec's SLO: the highest open-loop arrival rate at
    which the SLO holds and the point is valid (docs/metrics.md, "SLOs, goodput and capacity")."""

    enabled: bool | None = Field(None, description="default: on when the spec has an slo")
    precision: float = Field(0.10, gt=0.0, lt=1.0, description=(
        "stop when the highest passing rate is within this fraction of the lowest failing one"))
    max_measurements: int = Field(8, ge=1, le=50, description="rates measured per server config at most")
    start_rps: float | None = Field(None, gt=0.0, le=1e6, description=(
        "first rate tried when neither the simulator nor a closed-loop point of the config gives a guess"))
    min_rps: float = Field(0.01, gt=0.0, le=1e6, description="below this rate the config meets the SLO at no rate")
    max_rps: float = Field(1e5, gt=0.0, le=1e6)
    duration_s: float = Field(20.0, gt=0.0, le=MAX_SECONDS, description="scheduled arrivals per rate (after warm-up)")
    warmup_s: float = Field(2.0, ge=0.0, le=MAX_SECONDS, description="arrivals in the first S are not measured")
    min_requests: int = Field(20, ge=1, le=MAX_REQUESTS, description="measured requests per rate at least "
                                                                      "(more when a p99 target needs 100)")
    max_requests: int = Field(4000, ge=1, le=MAX_REQUESTS)
    traffic_rps: float | None = Field(None, gt=0.0, le=1e7, description=(
        "your traffic: the report sizes each config's replicas (GPUs) and $/h for it (--traffic-rps overrides)"))
    search_quality_failed: bool = Field(False, description="also search configs whose numerics failed the quality "
                                                           "gate (they never enter a frontier)")

    @model_validator(mode="after")
    def _bounds(self) -> CapacitySpec:
        if self.min_rps >= self.max_rps:
            raise ValueError(f"capacity: min_rps {self.min_rps:g} must be below max_rps {self.max_rps:g}")
        if self.min_requests > self.max_requests:
            raise ValueError(f"capacity: min_requests {self.min_requests} exceeds max_requests {self.max_requests}")
        return self


class QualitySpec(Frozen):
    enabled: bool = True
    objective: Literal["accuracy", "perplexity", "agreement"] = Field(
        "accuracy", description="the quality objective of this atlas's frontiers (perplexity or agreement where "
                                "the task accuracy is at chance, as for a 135M model)")
    sets: list[str] = ["arith", "mc"]
    jsonl: list[str] = Field([], description="extra local eval files in the same shape")
    max_items_per_set: int | None = Field(None, ge=1)
    max_tokens: int = Field(96, ge=1)
    perplexity: bool = True
    gate: GateSpec = GateSpec()


class SweepSpec(Frozen):
    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    engine: str = Field(DEFAULT_ENGINE, description="the engine of grids that name none")
    gpu: str = "cpu"
    price_provider: str | None = None
    model: ModelSpec
    grid: AnyGrid | list[AnyGrid] = Field(description="one grid, or several (e.g. one per engine); each grid's "
                                                      "knobs are its engine's (`engine:`, default the spec's)")
    load: LoadSpec = LoadSpec()
    quality: QualitySpec = QualitySpec()
    slo: SloSpec | None = Field(None, description="latency targets; with them each server config's capacity is "
                                                  "searched and frontiers compare configurations at capacity")
    capacity: CapacitySpec = CapacitySpec()
    host: str = "127.0.0.1"
    port: int | None = Field(None, ge=1024, le=65535,
                             description="pin the engine's port; by default Atlas picks a free one per launch")
    startup_timeout_s: float = Field(900.0, gt=0, le=MAX_SECONDS)
    engine_env: dict[str, str] = {}
    extra_engine_args: list[str] = []
    api_key_env: str | None = Field(None, pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,127}$", description=(
        "external endpoints: the environment variable that holds their API key (sent as a bearer token; the key "
        "itself is never written)"))

    def measurement_settings(self) -> dict[str, Any]:
        """What sets a point's numbers or its verdict beyond its run id (knobs, model, load): what the engine Atlas
        starts is given besides its knobs (`--threads 1`, an environment variable; secrets masked) and the quality
        evaluation that gates it. Every result records them; --resume keeps a result only under the same."""
        quality = self.quality.model_dump(mode="json") if self.quality.enabled else {"enabled": False}
        return {"extra_engine_args": redact_argv(self.extra_engine_args), "engine_env": redact_env(self.engine_env),
                "quality": quality}

    @model_validator(mode="before")
    @classmethod
    def _grids_name_their_engine(cls, data: Any) -> Any:
        """A grid without `engine:` is the spec's engine's; an unknown engine is named here."""
        if not isinstance(data, dict):
            return data
        engine = data.get("engine", DEFAULT_ENGINE)
        if engine not in ADAPTERS:
            raise ValueError(f"engine: unknown engine {engine!r}; known: {', '.join(engine_kinds())}")
        grid = data.get("grid", {})

        def named(g: Any) -> Any:
            if not isinstance(g, dict):
                return g
            g = {**g, "engine": g.get("engine") or engine}
            if g["engine"] not in ADAPTERS:
                raise ValueError(f"grid.engine: unknown engine {g['engine']!r}; known: {', '.join(engine_kinds())}")
            # a spec written before knobs were per engine (sweep-spec.yaml beside recorded results) lists every
            # engine's knobs; those this engine lacks are dropped where they hold the old defaults
            return drop_flat_defaults(ADAPTERS[g["engine"]].knobs.knob_names(), g, as_list=True)

        return {**data, "grid": [named(g) for g in grid] if isinstance(grid, list) else named(grid)}

    @model_validator(mode="after")
    def _load_fits_the_model(self) -> SweepSpec:
        if not self.grids():
            raise ValueError("grid: needs at least one grid")
        if self.model.source != "embedded" and not self.model.path and self.engines() != ["external"]:
            raise ValueError(f"model.path is required when model.source is {self.model.source!r}")
        need = self.load.prompt_tokens + self.load.output_tokens
        if self.load.workload is None and need > self.model.max_model_len:
            raise ValueError(f"load: prompt_tokens + output_tokens = {need} exceeds model.max_model_len "
                             f"{self.model.max_model_len}")
        return self

    @model_validator(mode="after")
    def _grids_make_servers(self) -> SweepSpec:
        """Every server config of every grid is a valid one of its engine (a knob validator that crosses fields
        or rejects a default, e.g. an external grid without its url, fails here and not at plan time)."""
        for engine, g in self.grids():
            knobs = ADAPTERS[engine].knobs
            for values in grid_combos(knobs, g, first_only=grid_size(knobs, g) > 5000):
                try:
                    knobs(engine=engine, **values)
                except ValidationError as e:
                    first = e.errors()[0]
                    where = ".".join(str(x) for x in first["loc"])
                    raise ValueError(f"grid.{where}: {first['msg'].removeprefix('Value error, ')}") from None
        return self

    def capacity_on(self) -> bool:
        """Whether the sweep searches each server config's capacity under the SLO."""
        return (self.slo is not None and not self.slo.is_empty() and self.capacity.enabled is not False
                and self.load.mode != LoadMode.TRACE)

    @model_validator(mode="after")
    def _capacity_needs_slo(self) -> SweepSpec:
        if self.capacity.enabled and (self.slo is None or self.slo.is_empty()):
            raise ValueError("capacity.enabled: a capacity search needs an slo with at least one target")
        if self.capacity.enabled and self.load.mode == LoadMode.TRACE:
            raise ValueError("capacity.enabled: a trace replay's arrivals come from the trace, so no arrival rate is "
                             "searched; sweep workload.time_scale instead")
        return self

    def grids(self) -> list[tuple[str, Any]]:
        """(engine, grid) for each grid of the spec, in order."""
        grids = self.grid if isinstance(self.grid, list) else [self.grid]
        return [(g.engine, g) for g in grids]  # type: ignore[union-attr]

    def engines(self) -> list[str]:
        return list(dict.fromkeys(e for e, _ in self.grids()))


def _union_tag(part: object) -> bool:
    """How pydantic names a branch of `grid: <grid of some engine> | list[...]` in an error's location."""
    return isinstance(part, str) and part.startswith(("tagged-union[", "list[tagged-union["))


def _wrong_branch(loc: tuple, data: object) -> bool:  # type: ignore[type-arg]
    """An error from the union branch the input's shape did not ask for (a list given, the single-grid branch)."""
    node = data
    for part in loc:
        if _union_tag(part):
            return str(part).startswith("list[") != isinstance(node, list)
        try:
            node = node[part]  # type: ignore[index]
        except (KeyError, IndexError, TypeError):
            return False
    return False


def _readable_loc(loc: tuple) -> str:  # type: ignore[type-arg]
    """grid.tagged-union[...].<engine>.dtype -> grid.dtype: the union's branch and the engine tag left out."""
    out: list[str] = []
    prev: object = None
    for part in loc:
        if _union_tag(part) or (part in ADAPTERS and (_union_tag(prev) or isinstance(prev, int))):
            prev = part
            continue
        out.append(str(part))
        prev = part
    return ".".join(out)


def _format_error(path: Path | str, err: ValidationError, data: object = None) -> str:
    errors = [e for e in err.errors() if not _wrong_branch(e["loc"], data)] or err.errors()
    first = errors[0]
    loc = _readable_loc(first["loc"]) or "(top level)"
    more = f" (+{len(errors) - 1} more)" if len(errors) > 1 else ""
    msg = first["msg"]
    engine = next((p for p in first["loc"] if p in ADAPTERS), None) if loc.startswith("grid") else None
    if engine and first["type"] == "extra_forbidden" and isinstance(first["loc"][-1], str):
        msg = f"{engine} has no knob {first['loc'][-1]!r} (Extra inputs are not permitted)"
    elif engine:
        msg = f"{msg} (engine {engine})"
    return f"{path}: {loc}: {msg}{more}"


def parse_spec(data: object, origin: str = "<spec>") -> SweepSpec:
    if not isinstance(data, dict):
        raise SpecError(f"{origin}: expected a mapping at the top level, got {type(data).__name__}")
    try:
        return SweepSpec.model_validate(data)
    except ValidationError as e:
        raise SpecError(_format_error(origin, e, data)) from None


def load_spec(path: str | Path, **overrides: Any) -> SweepSpec:
    """The spec in a YAML file; `overrides` replace top-level keys before validation (the CLI's --gpu and
    --engine: grids that name no engine take the spec's)."""
    p = Path(path)
    text = read_text(p, "YAML", SpecError)
    try:
        data = yaml.safe_load(text)
        if overrides:
            if not isinstance(data, dict):
                raise SpecError(f"{p}: expected a mapping at the top level, got {type(data).__name__}")
            data = {**data, **overrides}
        return parse_spec(data, str(p))
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise SpecError(f"{p}: malformed YAML{where}: {getattr(e, 'problem', e)}") from None
    except RecursionError:
        raise SpecError(f"{p}: YAML nested too deeply to be a sweep spec") from None
