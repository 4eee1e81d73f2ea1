"""`atlas sweep --dry-run`: every server config a sweep would start, with the exact engine command line, whether
it fits in the GPU's memory and how much KV cache it leaves, and the points skipped with their reasons. Nothing
is started or prepared (a model still to be converted or quantized is named as such)."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from atlas.config import SweepSpec
from atlas.engines.adapter import ModelUnavailable
from atlas.engines.base import EngineError
from atlas.engines.registry import ServerKnobs, adapter
from atlas.hardware import GpuSpec
from atlas.plan import PlannedRun, RunConfig, SkippedRun
from atlas.simulator.features import ACTIVATION_RESERVE_GIB, SimulatorError, kv_capacity_tokens, step_costs

PORT_SHOWN = "<port>"  # chosen free at each launch unless the spec pins one
LAUNCH_SHOWN = "@atlas-<launch>"  # each launch serves under its own name (a token chosen at start)


@dataclass
class MemoryFit:
    verdict: str  # one line: fits / does not fit / not known, with the figures
    kv_tokens: int | None = None  # tokens of KV cache beside the weights
    seqs_at_max_len: float | None = None  # max-length sequences that fit at once


@dataclass
class ServerPlan:
    label: str
    engine: str
    argv: list[str] | None  # None: cannot be built here (why)
    model: str
    prepare: str | None  # what would be made before the engine starts
    memory: MemoryFit
    points: list[str] = field(default_factory=list)  # load labels
    problem: str | None = None  # why the engine could not be started here as planned


def memory_fit(spec: SweepSpec, gpu: GpuSpec, server: ServerKnobs) -> MemoryFit:
    """Weights, the KV cache left beside them (the simulator's model of vLLM's allocation) and how many
    max-length sequences it holds, against the server's max_num_seqs."""
    if server.engine == "external":
        return MemoryFit("the endpoint's own deployment: not Atlas's to fit or screen")
    if gpu.is_cpu:
        space = spec.engine_env.get("VLLM_CPU_KVCACHE_SPACE")
        if space or server.engine != "vllm":
            return MemoryFit("CPU: KV space is the engine's setting"
                             + (f" (VLLM_CPU_KVCACHE_SPACE={space} GiB)" if space else "") + "; not screened")
        share = getattr(server, "gpu_memory_utilization", None) or 0.92
        return MemoryFit(f"CPU: VLLM_CPU_KVCACHE_SPACE unset, so vLLM-CPU reserves {share:.0%} of host memory for its "
                         "KV cache and will not start unless that much is free (set engine_env "
                         "VLLM_CPU_KVCACHE_SPACE, GiB); not screened")
    try:
        costs = step_costs(spec.model, server, gpu)
    except SimulatorError as e:
        return MemoryFit(f"not screened: {e}")
    weights = costs.weight_bytes / 2**30
    tokens = kv_capacity_tokens(costs, gpu, server)
    usable = gpu.memory_gib * (getattr(server, "memory_fraction", None) or 0.9)
    if not tokens:
        return MemoryFit(f"does not fit: {weights:.1f} GiB of weights + {ACTIVATION_RESERVE_GIB:g} GiB reserve "
                         f"leave no KV cache in {usable:.1f} GiB usable", 0, 0.0)
    seqs = tokens / spec.model.max_model_len
    verdict = (f"fits: {weights:.1f} GiB weights, KV cache ~{tokens:,} tokens "
               f"({costs.kv_bytes_per_token / 1024:.0f} KiB/token) = {seqs:.1f} sequences of {spec.model.max_model_len}")
    if seqs < 1:
        verdict = f"does not fit one {spec.model.max_model_len}-token sequence: " + verdict.removeprefix("fits: ")
    elif seqs < server.slots:
        verdict += f" (< max_num_seqs {server.slots}: long requests will queue or be preempted)"
    return MemoryFit(verdict, tokens, seqs)


def shown_argv(spec: SweepSpec, gpu: GpuSpec, cfg: RunConfig, model_path: str) -> list[str]:
    """The engine's command line as a launch would build it, with secrets masked, the port and the launch's
    served-name token shown as placeholders (both chosen at each start)."""
    with tempfile.TemporaryDirectory(prefix="atlas-dry-") as tmp:
        engine = adapter(cfg.engine).engine(spec, gpu, cfg, model_path, Path(tmp) / "engine.log")
        argv: list[str] = list(getattr(engine, "argv", []))
        redactor = getattr(engine, "redactor", None)
        port = getattr(engine, "port", None)
        served = getattr(engine, "served_model", "")
    shown = redactor.argv(argv) if redactor is not None else argv
    out = []
    for i, a in enumerate(shown):
        if spec.port is None and port is not None and a == str(port) and i and shown[i - 1] == "--port":
            a = PORT_SHOWN
        if served and served in a:
            a = a.replace(served, spec.model.id + LAUNCH_SHOWN)
        out.append(a)
    return out


def plan_servers(spec: SweepSpec, gpu: GpuSpec, items: list[PlannedRun | SkippedRun]) -> list[ServerPlan]:
    from atlas.quantize import cache_only

    with cache_only():  # a plan does not wait on the network: hub files are read from the local cache only
        return _plan_servers(spec, gpu, items)


def _plan_servers(spec: SweepSpec, gpu: GpuSpec, items: list[PlannedRun | SkippedRun]) -> list[ServerPlan]:
    sources: dict[str, object] = {}
    groups: dict[str, list[RunConfig]] = {}
    for i in items:
        if isinstance(i, PlannedRun):
            groups.setdefault(i.config.server_key(), []).append(i.config)
    out = []
    for configs in groups.values():
        cfg = configs[0]
        if cfg.engine not in sources:
            sources[cfg.engine] = adapter(cfg.engine).model_source(spec, lambda m: None)
        argv, problem, model, prepare = None, None, "", None
        try:
            model, prepare = sources[cfg.engine].planned(cfg.server)  # type: ignore[attr-defined]
            argv = shown_argv(spec, gpu, cfg, model)
        except (ModelUnavailable, EngineError) as e:
            problem = str(e) + (" (a dry run reads hub files from the local cache only)"
                                 if spec.model.source == "hub" else "")
        out.append(ServerPlan(label=cfg.server.label(), engine=cfg.engine, argv=argv, model=model, prepare=prepare,
                              memory=memory_fit(spec, gpu, cfg.server), points=[c.load.label() for c in configs],
                              problem=problem))
    return out


def skipped_reasons(items: list[PlannedRun | SkippedRun]) -> dict[str, list[str]]:
    """Each reason a point is skipped, with the server configs it skips."""
    out: dict[str, list[str]] = {}
    for i in items:
        if isinstance(i, SkippedRun):
            labels = out.setdefault(i.reason, [])
            if (label := i.config.server.label()) not in labels:
                labels.append(label)
    return out
