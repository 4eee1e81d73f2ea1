"""RunResult (versioned, self-describing) and ResultStore: one JSON file per run, written atomically, plus
the raw per-request records beside it (gzipped JSONL) so every metric can be recomputed."""

from __future__ import annotations

import gzip
import json
import math
import os
import tempfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from atlas.capacity import CapacityResult
from atlas.energy import EnergyResult
from atlas.goodput import Goodput
from atlas.host_check import HostCheck
from atlas.metrics import LoadSummary, RepeatStat
from atlas.plan import RunConfig, SkippedRun
from atlas.probe import HardwareProbe
from atlas.quality import QualityResult
from atlas.reuse import PrefixReuse
from atlas.workloads.requests import WorkloadInfo

SCHEMA_VERSION = 1
HISTORY = "history"  # earlier measurements of re-measured points: kept, never loaded as current results
CAPACITY_DIR, CAPACITY_SUFFIX = "capacity", ".capacity.json"  # one capacity record per server config
Status = Literal["ok", "invalid", "quality_failed", "failed", "skipped"]
MEASURED = ("measured", "imported")  # measured for real: by Atlas, or by another harness whose file was imported
DONE_STATUSES = ("ok", "invalid", "quality_failed")  # measured to the end; --resume keeps them


class ResultError(ValueError):
    pass


class _M(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Provenance(_M):
    atlas_version: str
    git_sha: str | None = None
    engine_version: str | None = None
    model_id: str
    model_path: str | None = None
    model_files: dict[str, Any] = {}  # hashes, source package, checkpoint provenance
    host_cpu: str
    host_gpus: list[str] = []
    gpu_details: list[dict[str, Any]] = []  # NVML: driver, CUDA, clocks, power limit
    torch_version: str | None = None
    python: str
    started_at: str
    finished_at: str | None = None
    engine: dict[str, Any] = {}  # effective argv, reported KV capacity, start-up time
    hardware_probe: HardwareProbe | None = None  # the machine's bandwidth and matmul rate, probed as the sweep began
    # what set the numbers beyond the run id (SweepSpec.measurement_settings: the engine's extra arguments and
    # environment, the quality evaluation); None: written before 2026-12-07, or imported
    settings: dict[str, Any] | None = None


class CostResult(_M):
    usd_per_hour: float
    price_source: str
    usd_per_m_output_tokens: float | None
    usd_per_m_total_tokens: float | None


class SimulationInfo(_M):
    """How a simulated point was predicted and how far to trust it."""
    artifact: str
    calibrated_on: str  # engine/gpu/numerics of the group whose efficiencies were used
    extrapolated: bool
    extrapolation_reasons: list[str]
    relative_error: dict[str, float]  # held-out mean absolute error, as a fraction, per metric
    # per metric, log half-widths of the 80% and 95% intervals (value / e^w .. value x e^w) from held-out errors
    intervals: dict[str, dict[str, float]] = {}
    probe_ratios: dict[str, float] | None = None  # this machine's probe / the calibration machine's
    roofline_tpot_ms: float  # physical lower bound for one decode step at this point's batch
    quality_from: str | None = None
    kv_cache_tokens: int | None = None  # memory model: KV tokens beside the weights (GPUs)
    max_concurrency: float | None = None  # of this point's requests that the KV cache holds at once


class Extension(_M):
    """A point whose window or request count fell short was measured again with more requests."""
    from_requests: int
    to_requests: int
    reason: str


# Names read from result files become file names: a run id or sweep with a path in it is refused on load.
NAME = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,199}$"


class RunResult(_M):
    schema_version: int = SCHEMA_VERSION
    run_id: str = Field(pattern=NAME)
    sweep: str = Field(pattern=NAME)
    source: Literal["measured", "simulated", "imported"] = "measured"  # imported: another harness's file
    status: Status
    reasons: list[str] = []
    label: str
    config: RunConfig
    metrics: LoadSummary | None = None  # pooled over repeats (throughput: mean of repeats)
    repeats: list[LoadSummary] = []
    repeat_stats: dict[str, RepeatStat] = {}
    quality: QualityResult | None = None
    cost: CostResult | None = None
    server_metrics: dict[str, float] = {}
    log_tail: list[str] = []
    provenance: Provenance | None = None
    records_file: str | None = Field(None, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,199}\.records\.jsonl\.gz$")
    wall_s: float | None = Field(None, description="time spent measuring this point")
    simulation: SimulationInfo | None = None  # source=simulated only
    goodput: Goodput | None = None  # against the sweep's SLO, when it has one
    energy: EnergyResult | None = None  # GPUs' energy over the steady window (null with the reason elsewhere)
    extended: Extension | None = None  # the point was measured again with more requests (too short at first)
    workload: WorkloadInfo | None = None  # what the point's workload planned (None: fixed, before workloads)
    prefix_reuse: PrefixReuse | None = None  # the engine's prefix-cache hits on this point
    host: HostCheck | None = None  # what else used the host's CPUs during the load (atlas.host_check)


def skipped_result(item: SkippedRun, sweep: str) -> RunResult:
    """The record of a point screened out before any engine started (impossible, does not fit)."""
    return RunResult(run_id=item.run_id, sweep=sweep, status="skipped", reasons=[item.reason],
                     label=item.config.label(), config=item.config)


def migrate(data: dict[str, Any], origin: str) -> dict[str, Any]:
    """Bring an older result file up to SCHEMA_VERSION (none older exists yet)."""
    version = data.get("schema_version")
    if version == SCHEMA_VERSION:
        return data
    raise ResultError(f"{origin}: schema_version {version!r} is not supported (this Atlas writes {SCHEMA_VERSION})")


def _atomic_write_bytes(path: Path, payload: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(payload)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


# Quantities that cannot be negative: latencies, throughputs, windows, prices (queue time can, by clock jitter).
_NON_NEGATIVE = {"ttft_ms", "tpot_ms", "itl_ms", "e2e_ms", "output_tok_s", "input_tok_s", "requests_s",
                 "duration_s", "offered_rate_rps", "achieved_rate_rps", "mean_output_tokens", "mean_prompt_tokens",
                 "usd_per_hour", "usd_per_m_output_tokens", "usd_per_m_total_tokens", "wall_s", "error_rate",
                 "capacity_rps", "upper_rps", "rate_rps", "latency_ms", "joules", "j_per_output_token", "goodput"}


def implausible(data: object, path: tuple[str, ...] = ()) -> str | None:
    """Where a result file holds a number no measurement gives (NaN, infinity, a negative latency or
    throughput), as 'field.path: why'; None when there is none."""
    if isinstance(data, dict):
        for k, v in data.items():
            if why := implausible(v, (*path, str(k))):
                return why
    elif isinstance(data, list):
        for i, v in enumerate(data):
            if why := implausible(v, (*path, str(i))):
                return why
    elif isinstance(data, float | int) and not isinstance(data, bool):
        where = ".".join(path)
        if not math.isfinite(data):
            return f"{where}: {data} is not a finite number"
        if data < 0 and _NON_NEGATIVE & set(path):
            return f"{where}: {data} is negative"
    return None


def _read_object(path: Path, what: str) -> dict[str, Any]:
    """A JSON object from a file, or a one-line ResultError naming the file and what is wrong."""
    try:
        data = json.loads(path.read_text())
    except OSError as e:
        raise ResultError(f"{path}: cannot read: {e.strerror}") from None
    except (ValueError, RecursionError) as e:
        raise ResultError(f"{path}: corrupted {what} (not JSON: {str(e)[:100]})") from None
    if not isinstance(data, dict):
        raise ResultError(f"{path}: corrupted {what} (not a JSON object)")
    return data


def _validated(model: type[Any], data: dict[str, Any], path: Path, what: str, checked: dict[str, Any]) -> Any:
    """`data` as `model`, refusing a validation error or an implausible number in `checked` in one line."""
    try:
        out = model.model_validate(data)
    except ValidationError as e:
        first = e.errors()[0]
        raise ResultError(f"{path}: invalid {what}: {'.'.join(map(str, first['loc']))}: {first['msg']}") from None
    if why := implausible(checked):
        raise ResultError(f"{path}: invalid {what}: {why}")
    return out


def _load_or_none(path: Path, load: Callable[[Path], Any]) -> Any:
    """What `load` reads from `path`, or None when there is no such file or it cannot be read."""
    if not path.exists():
        return None
    try:
        return load(path)
    except ResultError:
        return None


def load_result_file(path: Path) -> RunResult:
    data = migrate(_read_object(path, "result file"), str(path))
    checked = {k: data.get(k) for k in ("metrics", "repeats", "cost", "wall_s", "goodput", "energy")}
    return audited(_validated(RunResult, data, path, "result", checked))


def audit_reason(r: RunResult) -> str | None:
    """Why the engine's adapter says a stored measured result cannot stand for its config (None: it can)."""
    from atlas.engines.registry import ADAPTERS

    a = ADAPTERS.get(r.config.engine)
    return a.audit(r) if a is not None and r.source == "measured" and r.status in DONE_STATUSES else None


def audited(r: RunResult) -> RunResult:
    """A result its adapter's audit rejects becomes invalid with the reason (its numbers stay readable)."""
    reason = audit_reason(r)
    if reason is None or reason in r.reasons:
        return r
    return r.model_copy(update={"status": "invalid", "reasons": [*r.reasons, reason]})


class ResultStore:
    """results/<sweep>/<run_id>.json (+ <run_id>.records.jsonl.gz)."""

    def __init__(self, root: Path | str, sweep: str):
        self.dir = Path(root) / sweep
        self.sweep = sweep

    def path(self, run_id: str) -> Path:
        return self.dir / f"{run_id}.json"

    def write(self, result: RunResult, records: Iterable[dict[str, Any]] | None = None) -> RunResult:
        """Write the records (if any) then the result, each atomically; returns the result as stored.
        A point once measured is never lost: a later failure or skip of it keeps the measured result (and
        returns it), and a new measurement moves the earlier one into history/."""
        earlier = self.measured(result.run_id)
        if earlier is not None and result.status not in DONE_STATUSES:
            return earlier
        try:
            if earlier is not None:
                self._to_history(earlier)
            if records is not None:
                name = f"{result.run_id}.records.jsonl.gz"
                lines = "".join(json.dumps(r, separators=(",", ":")) + "\n" for r in records)
                _atomic_write_bytes(self.dir / name, gzip.compress(lines.encode(), mtime=0))
                result = result.model_copy(update={"records_file": name})
            _atomic_write_bytes(self.path(result.run_id), result.model_dump_json(indent=1).encode())
        except OSError as e:
            raise ResultError(f"{self.path(result.run_id)}: cannot write the result: {e.strerror or e}") from None
        return result

    def measured(self, run_id: str) -> RunResult | None:
        """The stored result of this run when it was measured to the end (ok, invalid or quality-gated)."""
        r = self.get(run_id)
        return r if r is not None and r.status in DONE_STATUSES and r.source in MEASURED else None

    def _to_history(self, earlier: RunResult) -> None:
        hist, stamp = self._history()
        if earlier.records_file and (self.dir / earlier.records_file).exists():
            os.replace(self.dir / earlier.records_file, hist / f"{earlier.run_id}.{stamp}.records.jsonl.gz")
        os.replace(self.path(earlier.run_id), hist / f"{earlier.run_id}.{stamp}.json")

    def capacity_path(self, server_key: str) -> Path:
        return self.dir / CAPACITY_DIR / f"{server_key}{CAPACITY_SUFFIX}"

    def write_capacity(self, record: CapacityResult) -> CapacityResult:
        """Write a server config's capacity record atomically; a search that failed or was not run keeps an
        earlier found capacity (returned), and a new finding moves the earlier record into history/."""
        path = self.capacity_path(record.server_key)
        earlier = self.get_capacity(record.server_key)
        if earlier is not None and earlier.status in ("ok", "no_capacity") and record.status in ("failed",
                                                                                                  "not_searched"):
            return earlier
        try:
            if earlier is not None:
                hist, stamp = self._history()
                os.replace(path, hist / f"{record.server_key}.{stamp}{CAPACITY_SUFFIX}")
            _atomic_write_bytes(path, record.model_dump_json(indent=1).encode())
        except OSError as e:
            raise ResultError(f"{path}: cannot write the capacity record: {e.strerror or e}") from None
        return record

    def get_capacity(self, server_key: str) -> CapacityResult | None:
        return _load_or_none(self.capacity_path(server_key), load_capacity_file)  # type: ignore[no-any-return]

    def _history(self) -> tuple[Path, str]:
        """The history/ folder (made) and a time stamp for the file names of what moves into it."""
        hist = self.dir / HISTORY
        hist.mkdir(parents=True, exist_ok=True)
        return hist, time.strftime("%Y%m%dT%H%M%S") + f"-{time.time_ns() % 1_000_000:06d}"

    def check_writable(self) -> None:
        """Raises a one-line ResultError when results cannot be written here (a file in the way, a
        read-only folder), before any engine starts."""
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
            probe = self.dir / f".atlas-write-check-{os.getpid()}"
            probe.write_bytes(b"")
            probe.unlink()
        except OSError as e:
            raise ResultError(f"{self.dir}: cannot write results there: {e.strerror or e}") from None

    def get(self, run_id: str) -> RunResult | None:
        return _load_or_none(self.path(run_id), load_result_file)  # type: ignore[no-any-return]

    def is_complete(self, run_id: str, config: RunConfig, settings: dict[str, Any] | None = None) -> bool:
        """--resume keeps a result only when it is readable, current, finished and for this exact config, and
        (given the spec's `measurement_settings()`) measured under those settings."""
        r = self.get(run_id)
        return (r is not None and r.status in DONE_STATUSES and r.config == config
                and (settings is None or measured_under(r, settings))
                and audit_reason(r.model_copy(update={"status": "ok"})) is None)

    def read_records(self, result: RunResult) -> list[dict[str, Any]]:
        if not result.records_file:
            return []
        with gzip.open(self.dir / result.records_file, "rt") as f:
            return [json.loads(line) for line in f]


def measured_under(r: RunResult, settings: dict[str, Any]) -> bool:
    """Whether `r` was measured under these settings (SweepSpec.measurement_settings). A result written before
    results recorded them (2026-12-07) is judged by its command line, which ends with the extra arguments; its
    environment and quality evaluation were not recorded and are taken as the spec's."""
    prov = r.provenance
    if prov is not None and prov.settings is not None:
        return prov.settings == settings
    extra, argv = settings.get("extra_engine_args") or [], (prov.engine.get("argv") if prov else None) or []
    return not extra or argv[-len(extra):] == extra


def load_results(root: Path | str) -> tuple[list[RunResult], list[str]]:
    """Every result under root (a sweep folder or a folder of sweeps); unreadable files become errors, never
    a crash, so one corrupted file loses nothing else."""
    root = Path(root)
    if not root.exists():
        raise ResultError(f"{root}: no such results folder")
    errors: list[str] = []
    groups: dict[tuple[str, str, str], list[tuple[Path, RunResult]]] = {}
    for p in sorted(root.rglob("*.json")):
        if p.name.startswith(".") or p.name.endswith(CAPACITY_SUFFIX) or HISTORY in p.relative_to(root).parts:
            continue
        try:
            r = load_result_file(p)
        except ResultError as e:
            errors.append(str(e))
            continue
        groups.setdefault((r.sweep, r.source, r.run_id), []).append((p, r))
    results = []
    for (_, _, run_id), found in groups.items():
        # the file at the result's own name (<run_id>.json) counts; a copy under another name is reported
        found.sort(key=lambda pr: pr[0].stem != run_id)
        results.append(found[0][1])
        errors += [f"{p}: a copy of {found[0][0]} (same sweep and run id {run_id}): counted once"
                   for p, _ in found[1:]]
    return results, errors


def load_capacity_file(path: Path) -> CapacityResult:
    data = _read_object(path, "capacity record")
    return _validated(CapacityResult, data, path, "capacity record", data)  # type: ignore[no-any-return]


def load_capacities(root: Path | str) -> tuple[list[CapacityResult], list[str]]:
    """Every capacity record under root (outside history/); unreadable ones become errors."""
    root = Path(root)
    out, errors = [], []
    for p in sorted(root.rglob(f"*{CAPACITY_SUFFIX}")):
        if p.name.startswith(".") or HISTORY in p.relative_to(root).parts:
            continue
        try:
            out.append(load_capacity_file(p))
        except ResultError as e:
            errors.append(str(e))
    return out, errors
