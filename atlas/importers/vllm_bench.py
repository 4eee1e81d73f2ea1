"""`vllm bench serve --save-result --save-detailed` files (vLLM's benchmark client; one JSON object, or one per
line with --append-result). Per request the file has the send time, TTFT, the gaps between streamed chunks,
the end-to-end latency, prompt and output lengths and an error; those are rebuilt into Atlas's request records.
A file saved without --save-detailed has only aggregates, which Atlas cannot turn into its own metrics (and
will not copy under its names): it is refused with that reason."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from atlas.config import LoadPoint
from atlas.importers.common import Imported, ImportError_, failed_record, load_point, read_text, stream_record
from atlas.knobs import LoadMode
from atlas.loadgen import RequestRecord

PER_REQUEST = ("start_times", "ttfts", "itls", "input_lens", "output_lens", "errors")
NOTES = ["imported from vllm bench serve: each request is timed from when the tool sent it (its schedule is not "
         "in the file), so a client that fell behind is not charged for it as Atlas's own client is"]


def read_file(path: str | Path, version: str | None = None) -> list[Imported]:
    p = Path(path)
    text = read_text(p)
    try:
        docs = [json.loads(text)]
    except ValueError:
        try:
            docs = [json.loads(line) for line in text.splitlines() if line.strip()]
        except ValueError as e:
            raise ImportError_(f"{p}: not a vllm bench serve result (not JSON: {e})") from None
    if not docs or not all(isinstance(d, dict) for d in docs):
        raise ImportError_(f"{p}: not a vllm bench serve result (no JSON object)")
    return [_point(p, k, d, version) for k, d in enumerate(docs)]


def _point(p: Path, k: int, d: dict[str, Any], version: str | None) -> Imported:
    where = f"{p}" + (f" (result {k + 1})" if k else "")
    if "model_id" not in d or "num_prompts" not in d or "backend" not in d:
        raise ImportError_(f"{where}: not a vllm bench serve result (no model_id, num_prompts or backend; "
                           "another tool's file? pick it with --from)")
    if missing := [f for f in PER_REQUEST if not isinstance(d.get(f), list)]:
        raise ImportError_(f"{where}: no per-request data ({', '.join(missing)}): save it with vllm bench serve "
                           "--save-detailed; Atlas does not copy a tool's aggregates under its own metric names")
    n = len(d["ttfts"])
    if not n or any(len(d[f]) != n for f in PER_REQUEST):
        raise ImportError_(f"{where}: per-request lists of different lengths")
    records = _records(where, d, n)
    load = _load(where, d, n, records)
    about: dict[str, Any] = {k2: d[k2] for k2 in ("backend", "label", "tokenizer_id", "date", "request_rate", "burstiness",
                                  "max_concurrency", "duration", "completed", "failed") if k2 in d}
    return Imported(tool="vllm-bench", tool_version=version or d.get("vllm_version"), model=str(d["model_id"]),
                    run_label=str(d.get("label") or d["backend"]), load=load, records=records,
                    started_at=_iso(d.get("date")), about=about, notes=list(NOTES))


def _records(where: str, d: dict[str, Any], n: int) -> list[RequestRecord]:
    try:
        starts = [float(x) for x in d["start_times"]]
        t0 = min(starts)
        out = []
        latencies = d.get("latencies") or [None] * n
        for i in range(n):
            sent = starts[i] - t0
            prompt, tokens = int(d["input_lens"][i]), int(d["output_lens"][i])
            if d["errors"][i]:
                out.append(failed_record(i, sent, sent, str(d["errors"][i]), prompt, tokens))
                continue
            latency = latencies[i]
            out.append(stream_record(i, sent, sent, float(d["ttfts"][i]), [float(x) for x in d["itls"][i]], tokens,
                                     float(latency) if latency is not None else None, prompt, tokens))
        return out
    except (TypeError, ValueError, IndexError, KeyError) as e:
        raise ImportError_(f"{where}: unreadable per-request data: {e}") from None


def _load(where: str, d: dict[str, Any], n: int, records: list[RequestRecord]) -> LoadPoint:
    """The load as the tool ran it: all at once (or capped at max_concurrency) for an infinite rate, Poisson or
    gamma arrivals otherwise."""
    rate, cap = d.get("request_rate"), d.get("max_concurrency")
    try:
        if rate in ("inf", None) or (isinstance(rate, float) and math.isinf(rate)):
            return load_point(where, LoadMode.CLOSED, n, records, concurrency=int(cap) if cap else n)
        burst = float(d.get("burstiness") or 1.0)
        return load_point(where, LoadMode.POISSON if burst == 1.0 else LoadMode.GAMMA, n, records, rate=float(rate),
                          burstiness=burst, max_in_flight=int(cap) if cap else None)
    except ImportError_:
        raise
    except (TypeError, ValueError) as e:
        raise ImportError_(f"{where}: request_rate {rate!r} / max_concurrency {cap!r}: {str(e).splitlines()[0]}") from None


def _iso(date: object) -> str | None:
    """vllm bench writes its date as %Y%m%d-%H%M%S (local time, no zone)."""
    from datetime import datetime

    try:
        return datetime.strptime(str(date), "%Y%m%d-%H%M%S").isoformat(timespec="seconds")
    except ValueError:
        return None
