"""AIPerf result files (`aiperf profile ... --streaming`): the per-request records (`profile_export.jsonl`)
and, beside them, the run's summary (`profile_export_aiperf.json`), which says the load (its phases), the
version and when it ran. FILE may be either of the two or the artifact folder. Per request the records have
when AIPerf's timing manager issued it, when it was sent and ended (ns), its TTFT, the gap before each later
chunk, its latency, and the prompt and output token counts (the server's usage where it sent one, else
AIPerf's own tokenizer's count). Each profiling phase becomes one point; warm-up records are kept as warm-up."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from atlas.importers.common import Imported, ImportError_, failed_record, load_point, read_text, stream_record
from atlas.knobs import LoadMode
from atlas.loadgen import RequestRecord

RECORDS, SUMMARY = "profile_export.jsonl", "profile_export_aiperf.json"
NOTES = ["imported from AIPerf: latency runs from when its timing manager issued each request (credit_issued_ns), "
         "as Atlas's runs from its schedule; AIPerf's TTFT runs from the send (request_start_ns), so its worker's "
         "delay (queue_ms here) is in Atlas's TTFT and E2E and not in AIPerf's. A timing manager that issued late "
         "is not seen: the file has no time its schedule meant"]
UNIT_MS = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3, "sec": 1e3}
MODES = {"concurrency": LoadMode.CLOSED, "poisson": LoadMode.POISSON, "gamma": LoadMode.GAMMA,
         "constant": LoadMode.CONSTANT}


def pair(path: Path) -> tuple[Path, Path]:
    """(records, summary) for a path naming either of them or their folder."""
    if path.is_dir():
        return path / RECORDS, path / SUMMARY
    name = path.name
    if name.endswith(".jsonl"):
        stem = name[: -len(".jsonl")]
        near = [path.with_name(f"{stem}_aiperf.json"), path.with_name(f"{stem}.json")]
        return path, next((s for s in near if s.is_file()), near[0])
    stem = name[: -len(".json")] if name.endswith(".json") else name
    stem = stem[: -len("_aiperf")] if stem.endswith("_aiperf") else stem
    return path.with_name(f"{stem}.jsonl"), path


def read_file(path: str | Path, version: str | None = None) -> list[Imported]:
    """The points of one AIPerf run, or of every run under a folder that holds no run itself (a sweep's
    artifact tree: each variation and trial in a folder of its own)."""
    p = Path(path)
    if p.is_dir() and not (p / RECORDS).exists() and not (p / SUMMARY).exists():
        runs = sorted(f.parent for f in p.rglob(SUMMARY))
        if not runs:
            raise ImportError_(f"{p}: no AIPerf run in this folder or below it (no {SUMMARY})")
        return [pt for run in runs for pt in _read_run(run, version)]
    return _read_run(p, version)


def _read_run(path: Path, version: str | None) -> list[Imported]:
    records_path, summary_path = pair(path)
    summary = _json(summary_path, "the AIPerf summary")
    if not isinstance(summary, dict) or "aiperf_version" not in summary or "input_config" not in summary:
        raise ImportError_(f"{summary_path}: not an AIPerf summary (no aiperf_version or input_config; another "
                           "tool's file? pick it with --from)")
    lines = _lines(records_path)
    phases = [ph for ph in (summary["input_config"].get("phases") or []) if isinstance(ph, dict)]
    measured = [ph for ph in phases if ph.get("kind", "profiling") == "profiling"]
    if not measured:
        raise ImportError_(f"{summary_path}: the AIPerf summary lists no profiling phase")
    endpoint = summary["input_config"].get("endpoint") or {}
    if not endpoint.get("streaming"):
        raise ImportError_(f"{summary_path}: the AIPerf run was not streamed (--streaming): without a first token "
                           "there is no TTFT, TPOT or ITL to import")
    models = [m.get("name") for m in ((summary["input_config"].get("models") or {}).get("items") or [])
              if isinstance(m, dict)]
    out = []
    for k, ph in enumerate(measured):
        where = f"{records_path}" + (f" (phase {ph.get('name')})" if len(measured) > 1 else "")
        mine = [d for d in lines if _phase_name(d) == ph.get("name") or
                (len(measured) == 1 and _phase_kind(d) == "profiling")]
        warm = [d for d in lines if _phase_kind(d) == "warmup"] if k == 0 else []
        if not mine:
            raise ImportError_(f"{where}: no request record of profiling phase {ph.get('name')!r}")
        records = _records(where, warm, mine)
        n = len(mine) + len(warm)
        about: dict[str, Any] = {"phase": {k2: v for k2, v in ph.items() if k2 in (
            "name", "type", "concurrency", "rate", "smoothness", "requests", "duration")},
            "urls": endpoint.get("urls"), "endpoint_type": endpoint.get("type"),
            "benchmark_id": summary.get("benchmark_id"),
            "token_counts": _count_source(mine)}
        out.append(Imported(tool="aiperf", tool_version=version or summary.get("aiperf_version"),
                            model=str(models[0] if models else "unknown"), run_label=str(ph.get("type")),
                            load=_load(where, ph, n, records), records=records,
                            started_at=summary.get("start_time"), about=about, notes=list(NOTES),
                            files=[summary_path, records_path]))
    return out


def _json(p: Path, what: str) -> Any:
    text = read_text(p, f"{what} is not there (AIPerf writes {RECORDS} and {SUMMARY} side by side; the summary "
                        "says the load)")
    try:
        return json.loads(text)
    except ValueError as e:
        raise ImportError_(f"{p}: not {what} (not JSON: {e})") from None


def _lines(p: Path) -> list[dict[str, Any]]:
    text = read_text(p, "AIPerf's per-request records are not there (run with the default --export-level, which "
                        "writes them)")
    out = []
    for no, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            d = json.loads(line)
        except ValueError as e:
            raise ImportError_(f"{p}: line {no}: not JSON ({e})") from None
        if not isinstance(d, dict) or not isinstance(d.get("metadata"), dict):
            raise ImportError_(f"{p}: line {no}: not an AIPerf request record (no metadata)")
        out.append(d)
    if not out:
        raise ImportError_(f"{p}: no request record")
    return out


def _phase_name(d: dict[str, Any]) -> Any:
    return d["metadata"].get("phase_name")


def _phase_kind(d: dict[str, Any]) -> Any:
    return d["metadata"].get("phase_kind") or d["metadata"].get("benchmark_phase")


def _value(d: dict[str, Any], name: str, ms: bool = False) -> Any:
    m = (d.get("metrics") or {}).get(name)
    if not isinstance(m, dict) or m.get("value") is None:
        return None
    if not ms:
        return m["value"]
    scale = UNIT_MS.get(str(m.get("unit", "ms")))
    if scale is None:
        raise ValueError(f"{name}: unit {m.get('unit')!r}")
    v = m["value"]
    return [float(x) * scale for x in v] if isinstance(v, list) else float(v) * scale


def _count_source(lines: list[dict[str, Any]]) -> str:
    have = any(_value(d, "usage_completion_tokens") is not None for d in lines)
    return "the server's usage" if have else "AIPerf's tokenizer (the server sent no usage)"


def _records(where: str, warm: list[dict[str, Any]], measured: list[dict[str, Any]]) -> list[RequestRecord]:
    every = [("warmup", d) for d in warm] + [("measure", d) for d in measured]
    try:
        t0 = min(int(d["metadata"].get("credit_issued_ns") or d["metadata"]["request_start_ns"]) for _, d in every)
        every.sort(key=lambda e: int(e[1]["metadata"].get("credit_issued_ns") or e[1]["metadata"]["request_start_ns"]))
        out = []
        for i, (phase, d) in enumerate(every):
            m = d["metadata"]
            sent_ns = m.get("request_start_ns")
            due = (int(m.get("credit_issued_ns") or sent_ns) - t0) / 1e9
            sent = None if sent_ns is None else (int(sent_ns) - t0) / 1e9
            prompt = _value(d, "usage_prompt_tokens")
            prompt = int(prompt) if prompt is not None else _int(_value(d, "input_sequence_length"))
            tokens = _int(_value(d, "usage_completion_tokens")) or _int(_value(d, "output_sequence_length")) or 0
            ttft = _value(d, "time_to_first_token", ms=True)
            if d.get("error") or m.get("was_cancelled") or ttft is None or sent is None:
                err = d.get("error") or {}
                why = (err.get("message") or err.get("type") if isinstance(err, dict) else str(err)) or (
                    "cancelled by AIPerf" if m.get("was_cancelled") else "no first token in AIPerf's record")
                out.append(failed_record(i, due, sent, str(why), prompt, tokens, phase,
                                         "cancelled" if m.get("was_cancelled") else "tool_error"))
                continue
            gaps = _value(d, "inter_chunk_latency", ms=True) or []
            latency = _value(d, "request_latency", ms=True)
            out.append(stream_record(i, due, sent, ttft / 1e3, [g / 1e3 for g in gaps], tokens,
                                     latency / 1e3 if latency is not None else None, prompt, tokens, phase))
        return out
    except (TypeError, ValueError, KeyError, AttributeError) as e:
        raise ImportError_(f"{where}: unreadable request record: {e}") from None


def _int(v: Any) -> int | None:
    return None if v is None else int(v)


def _load(where: str, ph: dict[str, Any], n: int, records: list[RequestRecord]) -> Any:
    kind = ph.get("type")
    if kind not in MODES:
        raise ImportError_(f"{where}: phase type {kind!r}: not a load Atlas can describe (it reads concurrency, "
                           "poisson, gamma and constant)")
    if ph.get("rate_ramp") or ph.get("concurrency_ramp") or ph.get("rate_series"):
        raise ImportError_(f"{where}: a ramped load (rate_ramp, concurrency_ramp or rate_series) is not one load "
                           "level; Atlas imports steady phases only")
    try:
        if kind == "concurrency":
            return load_point(where, LoadMode.CLOSED, n, records, concurrency=int(ph.get("concurrency") or 1))
        cap = ph.get("concurrency")
        return load_point(where, MODES[kind], n, records, rate=float(ph["rate"]),
                          burstiness=float(ph.get("smoothness") or 1.0), max_in_flight=int(cap) if cap else None)
    except ImportError_:
        raise
    except (TypeError, ValueError, KeyError) as e:
        raise ImportError_(f"{where}: phase {kind}: {e}") from None
