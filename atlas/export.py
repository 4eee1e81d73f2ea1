"""Results as data: one row per point (the report table's columns: identity, every engine's knobs, load, every
metric with its unit in its name) and, optionally, one row per request of every repeat; written as Parquet
(pyarrow), CSV or JSON lines, or handed to Python as a pandas DataFrame (`atlas.load_frame(path)`)."""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path
from typing import Any

import pandas as pd

from atlas.results import ResultError, RunResult, load_results
from atlas.table import results_frame

FORMATS = ("parquet", "csv", "jsonl")


def _results(path: Path | str) -> list[RunResult]:
    results, errors = load_results(path)
    if errors:  # an export that silently left a point out would be a wrong table
        raise ResultError(errors[0])
    if not results:
        raise ResultError(f"{path}: no results")
    return sorted(results, key=lambda r: (r.sweep, r.source, r.label, r.run_id))


def load_frame(path: Path | str) -> pd.DataFrame:
    """Every result under `path` (a sweep folder or a folder of sweeps), one row per point."""
    return results_frame(_results(path)).reset_index(drop=True)


def load_records(path: Path | str) -> pd.DataFrame:
    """Every request of every repeat of every point under `path` with its point's run_id, sweep and label
    (latencies as the raw times in seconds from the run's start, as recorded)."""
    root = Path(path)
    rows: list[dict[str, Any]] = []
    for r in _results(root):
        if not r.records_file:
            continue
        found = [p for p in root.rglob(r.records_file) if "history" not in p.relative_to(root).parts]
        if not found:
            raise ResultError(f"{root}: {r.records_file} (the requests of {r.label}) is missing")
        try:
            with gzip.open(found[0], "rt") as f:
                for line in f:
                    rows.append({"run_id": r.run_id, "sweep": r.sweep, "label": r.label, **json.loads(line)})
        except (OSError, EOFError, json.JSONDecodeError) as e:
            raise ResultError(f"{found[0]}: unreadable request records ({e})") from None
    return pd.DataFrame(rows)


def write_frame(frame: pd.DataFrame, fmt: str, out: Path) -> Path:
    """Writes `frame` as `fmt` to `out` (through a temporary file: never half-written)."""
    if fmt not in FORMATS:
        raise ResultError(f"export format {fmt!r}: one of {', '.join(FORMATS)}")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp")
    try:
        if fmt == "parquet":
            try:
                import pyarrow  # noqa: F401
            except ImportError:
                raise ResultError("parquet export needs pyarrow (pip install pyarrow)") from None
            frame.to_parquet(tmp, index=False)
        elif fmt == "csv":
            flat = frame.copy()
            for col in flat.columns:  # lists (a request's token times) as JSON text in one cell
                if flat[col].map(lambda v: isinstance(v, list | dict)).any():
                    flat[col] = flat[col].map(lambda v: json.dumps(v) if isinstance(v, list | dict) else v)
            flat.to_csv(tmp, index=False)
        else:
            frame.to_json(tmp, orient="records", lines=True)
        os.replace(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)
    return out
