"""Typed sweep specifications (pydantic v2, extra fields forbidden, frozen) and their YAML loader."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, ClassVar, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    ValidationError,
    field_validator,
    model_serializer,
    model_validator,
)

from atlas.knobs import (
    ENGINE_KV,
    ENGINE_QUANTS,
    QUANT_FACTS,
    Dtype,
    EngineKind,
    KVCacheDtype,
    LoadMode,
    Quantization,
)


class SpecError(ValueError):
    """A sweep spec that cannot be used; the message is one line naming the file and the field."""


class Frozen(BaseModel):
    # NaN and infinity are never a knob's value (a NaN rate ran as "ok" and crashed the frontier)
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


# Upper bounds on what one machine's load generator and one engine can be asked for: a larger value is a
# typo (concurrency 1e20 ended in a MemoryError), refused with the field's name before anything starts.
MAX_STREAMS = 16_384
MAX_REQUESTS = 1_000_000
MAX_TOKENS = 1 << 20
MAX_SECONDS = 86_400.0


class LateFields(Frozen):
    """A model whose fields added after results existed (`_late_fields`) are left out of its serialized form
    while unset, so the run ids of configs measured before a field existed stay the same."""

    _late_fields: ClassVar[tuple[str, ...]] = ()

    @model_serializer(mode="wrap")
    def _drop_unset_late_fields(self, handler: SerializerFunctionWrapHandler) -> dict:  # type: ignore[type-arg]
        out = handler(self)
        for name in self._late_fields:
            if out.get(name) is None:
                out.pop(name, None)
        return out  # type: ignore[no-any-return]


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
    checkpoints: dict[Quantization, str] = Field(
        default_factory=dict, description="Pre-quantized checkpoint (folder or hub id) per quantization method"
    )
    sha256: str | None = Field(None, pattern=r"^[0-9a-f]{64}$",
                               description="pins a model file (a .gguf given as model.path): checked before use")
    kv_scales: dict[Quantization, str] | None = Field(
        None, description="per weight format, a checkpoint (folder or hub id) that carries calibrated FP8 KV-cache "
                          "scales (config.json quantization_config.kv_cache_scheme); served for kv_cache_dtype "
                          "fp8_calibrated. Make one with `atlas quantize --kv-scales`")
    _late_fields: ClassVar[tuple[str, ...]] = ("sha256", "kv_scales")

    def kv_scales_checkpoint(self, q: Quantization, kv: KVCacheDtype) -> str | None:
        """The checkpoint served for these weights and KV cache when it carries calibrated KV scales."""
        return (self.kv_scales or {}).get(q) if kv == KVCacheDtype.FP8_CALIBRATED else None

    @model_validator(mode="after")
    def _path_given(self) -> ModelSpec:
        if self.source != "embedded" and not self.path:
            raise ValueError(f"model.path is required when model.source is {self.source!r}")
        if bad := [q.value for q in self.kv_scales or {} if QUANT_FACTS[q].engine != EngineKind.VLLM]:
            raise ValueError(f"kv_scales: {', '.join(bad)} are llama.cpp weight types; calibrated FP8 KV scales "
                             f"are for vLLM weights ({', '.join(sorted(q.value for q in ENGINE_QUANTS[EngineKind.VLLM]))})")
        return self


class ServerKnobs(LateFields):
    """Everything that needs a new engine server when it changes."""

    dtype: Dtype = Dtype.BFLOAT16
    quantization: Quantization = Quantization.NONE
    kv_cache_dtype: KVCacheDtype = KVCacheDtype.AUTO
    max_num_seqs: int = Field(256, ge=1, le=MAX_STREAMS)
    max_num_batched_tokens: int | None = Field(None, ge=16, le=MAX_TOKENS)
    enable_chunked_prefill: bool | None = None
    enable_prefix_caching: bool = False
    gpu_memory_utilization: float | None = Field(None, gt=0.0, le=1.0)
    n_ubatch: int | None = Field(None, ge=1, le=MAX_TOKENS, description="llama.cpp physical batch (max_num_batched_tokens is n_batch)")
    _late_fields: ClassVar[tuple[str, ...]] = ("n_ubatch",)  # added with the llama.cpp engine

    @property
    def engine(self) -> EngineKind:
        return QUANT_FACTS[self.quantization].engine

    def label(self) -> str:
        if self.engine == EngineKind.LLAMACPP:  # the GGUF type is the weights' whole numerics
            parts = [f"llama.cpp w:{self.quantization.value}", f"kv:{self.kv_cache_dtype.value}",
                     f"slots:{self.max_num_seqs}"]
        else:
            parts = [self.dtype.value, f"w:{self.quantization.value}", f"kv:{self.kv_cache_dtype.value}",
                     f"seqs:{self.max_num_seqs}"]
        if self.max_num_batched_tokens is not None:
            parts.append(f"mbt:{self.max_num_batched_tokens}" if self.engine == EngineKind.VLLM
                         else f"batch:{self.max_num_batched_tokens}")
        if self.n_ubatch is not None:
            parts.append(f"ubatch:{self.n_ubatch}")
        if self.enable_chunked_prefill is not None:
            parts.append("chunked" if self.enable_chunked_prefill else "no-chunk")
        if self.enable_prefix_caching:
            parts.append("prefix-cache")
        return " ".join(parts)


class Grid(Frozen):
    """The cross product of these lists is swept; a missing list means the knob's default."""

    engine: EngineKind | None = Field(None, description="this grid's engine; default: the spec's engine")
    dtype: list[Dtype] = [Dtype.BFLOAT16]
    quantization: list[Quantization] = [Quantization.NONE]
    kv_cache_dtype: list[KVCacheDtype] = [KVCacheDtype.AUTO]
    max_num_seqs: list[Annotated[int, Field(ge=1, le=MAX_STREAMS)]] = [256]
    max_num_batched_tokens: list[Annotated[int, Field(ge=16, le=MAX_TOKENS)] | None] = [None]
    enable_chunked_prefill: list[bool | None] = [None]
    enable_prefix_caching: list[bool] = [False]
    gpu_memory_utilization: list[Annotated[float, Field(gt=0.0, le=1.0)] | None] = [None]
    n_ubatch: list[Annotated[int, Field(ge=1, le=MAX_TOKENS)] | None] = [None]

    @field_validator("dtype", "quantization", "kv_cache_dtype", "max_num_seqs", "max_num_batched_tokens",
                     "enable_chunked_prefill", "enable_prefix_caching", "gpu_memory_utilization", "n_ubatch")
    @classmethod
    def _non_empty_unique(cls, v: list) -> list:  # type: ignore[type-arg]
        if not v:
            raise ValueError("list must not be empty")
        if len(set(v)) != len(v):
            raise ValueError(f"list has repeated values: {v}")
        return v

    def problems(self, engine: EngineKind) -> list[str]:
        """Knob values this grid's engine does not have (each a 'field: why' line)."""
        out = []
        if bad := [q.value for q in self.quantization if q not in ENGINE_QUANTS[engine]]:
            out.append(f"quantization: {engine.value} has no {', '.join(bad)} "
                       f"(it takes {', '.join(sorted(q.value for q in ENGINE_QUANTS[engine]))})")
        if bad := [k.value for k in self.kv_cache_dtype if k not in ENGINE_KV[engine]]:
            out.append(f"kv_cache_dtype: {engine.value} has no {', '.join(bad)} "
                       f"(it takes {', '.join(sorted(k.value for k in ENGINE_KV[engine]))})")
        if engine == EngineKind.LLAMACPP:
            for name, default in (("dtype", [Dtype.BFLOAT16]), ("enable_chunked_prefill", [None]),
                                  ("gpu_memory_utilization", [None]), ("enable_prefix_caching", [False])):
                if getattr(self, name) != default:
                    why = "the GGUF weight type (grid.quantization) sets it" if name == "dtype" else "no such knob"
                    out.append(f"{name}: has no meaning for llamacpp ({why})")
        elif self.n_ubatch != [None]:
            out.append("n_ubatch: a llama.cpp knob; vLLM's batch size is max_num_batched_tokens")
        return out


class LoadShape(Frozen):
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


class LoadSpec(LoadShape):
    concurrency: list[Annotated[int, Field(ge=1, le=MAX_STREAMS)]] = Field([1], description="closed loop levels")
    rate_rps: list[Annotated[float, Field(gt=0.0, le=1e6, allow_inf_nan=False)]] = Field(
        [], description="open loop levels (requests per second)")

    @model_validator(mode="after")
    def _levels(self) -> LoadSpec:
        if self.mode == LoadMode.CLOSED:
            if not self.concurrency or min(self.concurrency) < 1:
                raise ValueError("load.concurrency needs at least one level >= 1 in closed mode")
        elif not self.rate_rps or min(self.rate_rps) <= 0:
            raise ValueError(f"load.rate_rps needs at least one level > 0 in {self.mode.value} mode")
        return self

    def shape(self) -> LoadShape:
        return LoadShape(**self.model_dump(exclude={"concurrency", "rate_rps"}))


class LoadPoint(LoadShape):
    """One load level: a concurrency (closed loop) or an arrival rate (open loop)."""

    concurrency: int | None = None
    rate_rps: float | None = None

    def label(self) -> str:
        if self.mode == LoadMode.CLOSED:
            return f"c={self.concurrency}"
        return f"{self.mode.value} {self.rate_rps:g} rps"


class GateSpec(Frozen):
    max_accuracy_drop: float = Field(0.10, ge=0.0, le=1.0, description="absolute, vs the baseline")
    alpha: float = Field(0.05, gt=0.0, lt=1.0, description="McNemar significance for the accuracy drop")
    max_perplexity_ratio: float = Field(1.25, ge=1.0)
    max_degenerate_fraction: float = Field(0.5, ge=0.0, le=1.0)


class QualitySpec(Frozen):
    enabled: bool = True
    sets: list[str] = ["arith", "mc"]
    jsonl: list[str] = Field([], description="extra local eval files in the same shape")
    max_items_per_set: int | None = Field(None, ge=1)
    max_tokens: int = Field(96, ge=1)
    perplexity: bool = True
    gate: GateSpec = GateSpec()


class SweepSpec(Frozen):
    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    engine: EngineKind = EngineKind.VLLM
    gpu: str = "cpu"
    price_provider: str | None = None
    model: ModelSpec
    grid: Grid | list[Grid] = Field(Grid(), description="one grid, or several (e.g. one per engine)")
    load: LoadSpec = LoadSpec()
    quality: QualitySpec = QualitySpec()
    host: str = "127.0.0.1"
    port: int | None = Field(None, ge=1024, le=65535,
                             description="pin the engine's port; by default Atlas picks a free one per launch")
    startup_timeout_s: float = Field(900.0, gt=0, le=MAX_SECONDS)
    engine_env: dict[str, str] = {}
    extra_engine_args: list[str] = []

    @model_validator(mode="after")
    def _grids_fit_engines(self) -> SweepSpec:
        grids = self.grids()
        if not grids:
            raise ValueError("grid: needs at least one grid")
        for i, (engine, g) in enumerate(grids):
            where = f"grid[{i}]." if isinstance(self.grid, list) else "grid."
            if problems := g.problems(engine):
                raise ValueError(where + problems[0])
        need = self.load.prompt_tokens + self.load.output_tokens
        if need > self.model.max_model_len:
            raise ValueError(f"load: prompt_tokens + output_tokens = {need} exceeds model.max_model_len "
                             f"{self.model.max_model_len}")
        return self

    def grids(self) -> list[tuple[EngineKind, Grid]]:
        """(engine, grid) for each grid of the spec, in order."""
        grids = self.grid if isinstance(self.grid, list) else [self.grid]
        return [(g.engine or self.engine, g) for g in grids]

    def engines(self) -> list[EngineKind]:
        return list(dict.fromkeys(e for e, _ in self.grids()))


_UNION_TAGS = ("Grid", "list[Grid]")  # how pydantic names the branches of `grid: Grid | list[Grid]` in a loc


def _wrong_branch(loc: tuple, data: object) -> bool:  # type: ignore[type-arg]
    """An error from the union branch the input's shape did not ask for (a list given, the Grid branch)."""
    node = data
    for part in loc:
        if part in _UNION_TAGS:
            return str(part).startswith("list[") != isinstance(node, list)
        try:
            node = node[part]  # type: ignore[index]
        except (KeyError, IndexError, TypeError):
            return False
    return False


def _format_error(path: Path | str, err: ValidationError, data: object = None) -> str:
    errors = [e for e in err.errors() if not _wrong_branch(e["loc"], data)] or err.errors()
    first = errors[0]
    loc = ".".join(str(p) for p in first["loc"] if p not in _UNION_TAGS) or "(top level)"
    more = f" (+{len(errors) - 1} more)" if len(errors) > 1 else ""
    return f"{path}: {loc}: {first['msg']}{more}"


def parse_spec(data: object, origin: str = "<spec>") -> SweepSpec:
    if not isinstance(data, dict):
        raise SpecError(f"{origin}: expected a mapping at the top level, got {type(data).__name__}")
    try:
        return SweepSpec.model_validate(data)
    except ValidationError as e:
        raise SpecError(_format_error(origin, e, data)) from None


def load_spec(path: str | Path) -> SweepSpec:
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise SpecError(f"{p}: not a YAML text file (byte {e.start} is not UTF-8)") from None
    except OSError as e:
        raise SpecError(f"{p}: cannot read sweep spec: {e.strerror or e}") from None
    try:
        data = yaml.safe_load(text)
        return parse_spec(data, str(p))
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise SpecError(f"{p}: malformed YAML{where}: {getattr(e, 'problem', e)}") from None
    except RecursionError:
        raise SpecError(f"{p}: YAML nested too deeply to be a sweep spec") from None
