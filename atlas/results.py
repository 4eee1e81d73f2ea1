"""RunResult (versioned, self-describing) and ResultStore: one JSON file per run, written atomically, plus
the raw per-request records beside it (gzipped JSONL) so every metric can be recomputed."""

from __future__ import annotations

import gzip
import json
import os
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from atlas.metrics import LoadSummary, RepeatStat
from atlas.plan import RunConfig, SkippedRun
from atlas.quality import QualityResult

SCHEMA_VERSION = 1
Status = Literal["ok", "invalid", "quality_failed", "failed", "skipped"]
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
    relative_error: dict[str, float]  # half-width of the interval, as a fraction, per metric
    roofline_tpot_ms: float  # physical lower bound for one decode step at this point's batch
    quality_from: str | None = None
    kv_cache_tokens: int | None = None  # memory model: KV tokens beside the weights (GPUs)
    max_concurrency: float | None = None  # of this point's requests that the KV cache holds at once


class RunResult(_M):
    schema_version: int = SCHEMA_VERSION
    run_id: str
    sweep: str
    source: Literal["measured", "simulated"] = "measured"
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
    records_file: str | None = None
    wall_s: float | None = Field(None, description="time spent measuring this point")
    simulation: SimulationInfo | None = None  # source=simulated only


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


def load_result_file(path: Path) -> RunResult:
    try:
        data = json.loads(path.read_text())
    except OSError as e:
        raise ResultError(f"{path}: cannot read: {e.strerror}") from None
    except ValueError as e:
        raise ResultError(f"{path}: corrupted result file (not JSON: {e})") from None
    if not isinstance(data, dict):
        raise ResultError(f"{path}: corrupted result file (not a JSON object)")
    try:
        return RunResult.model_validate(migrate(data, str(path)))
    except ValidationError as e:
        first = e.errors()[0]
        raise ResultError(f"{path}: invalid result: {'.'.join(map(str, first['loc']))}: {first['msg']}") from None


class ResultStore:
    """results/<sweep>/<run_id>.json (+ <run_id>.records.jsonl.gz)."""

    def __init__(self, root: Path | str, sweep: str):
        self.dir = Path(root) / sweep
        self.sweep = sweep

    def path(self, run_id: str) -> Path:
        return self.dir / f"{run_id}.json"

    def write(self, result: RunResult, records: Iterable[dict[str, Any]] | None = None) -> RunResult:
        """Write the records (if any) then the result, each atomically; returns the result as stored."""
        if records is not None:
            name = f"{result.run_id}.records.jsonl.gz"
            lines = "".join(json.dumps(r, separators=(",", ":")) + "\n" for r in records)
            _atomic_write_bytes(self.dir / name, gzip.compress(lines.encode(), mtime=0))
            result = result.model_copy(update={"records_file": name})
        _atomic_write_bytes(self.path(result.run_id), result.model_dump_json(indent=1).encode())
        return result

    def get(self, run_id: str) -> RunResult | None:
        p = self.path(run_id)
        if not p.exists():
            return None
        try:
            return load_result_file(p)
        except ResultError:
            return None

    def is_complete(self, run_id: str, config: RunConfig) -> bool:
        """--resume keeps a result only when it is readable, current, finished and for this exact config."""
        r = self.get(run_id)
        return r is not None and r.status in DONE_STATUSES and r.config == config

    def read_records(self, result: RunResult) -> list[dict[str, Any]]:
        if not result.records_file:
            return []
        with gzip.open(self.dir / result.records_file, "rt") as f:
            return [json.loads(line) for line in f]


def load_results(root: Path | str) -> tuple[list[RunResult], list[str]]:
    """Every result under root (a sweep folder or a folder of sweeps); unreadable files become errors, never
    a crash, so one corrupted file loses nothing else."""
    root = Path(root)
    if not root.exists():
        raise ResultError(f"{root}: no such results folder")
    results, errors = [], []
    for p in sorted(root.rglob("*.json")):
        if p.name.startswith("."):
            continue
        try:
            results.append(load_result_file(p))
        except ResultError as e:
            errors.append(str(e))
    return results, errors
