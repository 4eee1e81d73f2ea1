"""GuideLLM report files (`guidellm run ... --output kind=json` or yaml; the layout GuideLLM 0.8 writes: a
report with `benchmarks`, each holding every request's `info.timings`). Each benchmark (one strategy: a
concurrency, a rate) becomes one point. Per request the file has when the scheduler meant to send it
(`targeted_start`), when it was sent, its first and last token times, how many streamed iterations carried
tokens, and its prompt and output token counts; it has no time for each chunk, so inter-token latency
percentiles cannot be derived (TPOT per request can) and are left out. Only these fields are read: the
report's copy of the backend settings (which holds an API key where one was given) is not kept."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from atlas.importers.common import Imported, ImportError_, failed_record, load_point, stream_record
from atlas.knobs import LoadMode
from atlas.loadgen import RequestRecord

NOTES = ["imported from GuideLLM: latency runs from when its scheduler meant to send each request "
         "(targeted_start), as Atlas's own; GuideLLM's TTFT runs from the send (request_start), so its own "
         "dispatch delay (queue_ms here) is in Atlas's TTFT and E2E and not in GuideLLM's"]
NO_ITL = ("the file has each request's first and last token times only, not each chunk's: ITL percentiles "
          "cannot be derived (TPOT per request can)")
STATUS = {"successful": "ok", "errored": "tool_error", "incomplete": "incomplete_stream"}


def read_file(path: str | Path, version: str | None = None) -> list[Imported]:
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ImportError_(f"{p}: cannot read: {getattr(e, 'strerror', None) or e}") from None
    try:
        doc = json.loads(text) if p.suffix.lower() == ".json" else yaml.safe_load(text)
    except (ValueError, yaml.YAMLError) as e:
        raise ImportError_(f"{p}: not a GuideLLM report (not {'JSON' if p.suffix.lower() == '.json' else 'YAML'}: "
                           f"{str(e).splitlines()[0]})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("benchmarks"), list):
        raise ImportError_(f"{p}: not a GuideLLM report (no benchmarks list; another tool's file? pick it with "
                           "--from)")
    if not doc["benchmarks"]:
        raise ImportError_(f"{p}: the GuideLLM report holds no benchmark")
    meta: dict[str, Any] = doc["metadata"] if isinstance(doc.get("metadata"), dict) else {}
    tool_version = version or meta.get("guidellm_version")
    return [_point(p, k, b, tool_version, len(doc["benchmarks"])) for k, b in enumerate(doc["benchmarks"])]


def _point(p: Path, k: int, b: Any, version: str | None, count: int) -> Imported:
    where = f"{p}" + (f" (benchmark {k + 1} of {count})" if count > 1 else "")
    if not isinstance(b, dict) or not isinstance(b.get("requests"), dict) or not isinstance(b.get("config"), dict):
        raise ImportError_(f"{where}: not a GuideLLM benchmark (no requests or config)")
    cfg, reqs = b["config"], b["requests"]
    lists = {k2: reqs.get(k2) or [] for k2 in STATUS}
    if not all(isinstance(v, list) for v in lists.values()):
        raise ImportError_(f"{where}: requests.successful/errored/incomplete are not lists")
    held = sum(len(v) for v in lists.values())
    totals = ((b.get("metrics") or {}).get("request_totals") or {}) if isinstance(b.get("metrics"), dict) else {}
    if isinstance(totals.get("total"), int) and held < totals["total"]:
        raise ImportError_(f"{where}: the file holds {held} of the {totals['total']} requests GuideLLM made (a "
                           "sample): Atlas cannot derive throughput from part of a run; save every request")
    if not held:
        raise ImportError_(f"{where}: the benchmark holds no request")
    first = next(r for v in lists.values() for r in v)
    if not isinstance(first, dict) or not isinstance((first.get("info") or {}).get("timings"), dict):
        raise ImportError_(f"{where}: requests without info.timings: a GuideLLM report layout this importer does "
                           "not read (it reads what GuideLLM 0.8 writes)")
    sm: dict[str, Any] = b["scheduler_metrics"] if isinstance(b.get("scheduler_metrics"), dict) else {}
    strategy = cfg.get("strategy") if isinstance(cfg.get("strategy"), dict) else {}
    records = _records(where, lists, sm, open_loop=strategy.get("type_") in ("constant", "poisson"))
    load = _load(where, strategy, held, records)
    backend = cfg.get("backend") if isinstance(cfg.get("backend"), dict) else {}
    model = backend.get("model") or first.get("info", {}).get("model") or "unknown"
    about: dict[str, Any] = {"strategy": {k2: v for k2, v in strategy.items() if k2 != "type_"} | {
        "type": strategy.get("type_")}, "benchmark_in_file": k,
        "target": backend.get("target"), "request_format": backend.get("request_format"),
        "requests_in_file": {k2: len(v) for k2, v in lists.items()}}
    return Imported(tool="guidellm", tool_version=version, model=str(model), run_label=str(strategy.get("type_")),
                    load=load, records=records, started_at=_iso(b.get("start_time")), about=about,
                    notes=list(NOTES), lacks={"itl_ms": NO_ITL})


def _records(where: str, lists: dict[str, list[Any]], sm: dict[str, Any], open_loop: bool) -> list[RequestRecord]:
    """Open loop: targeted_start is the schedule, so a late send is the client's lateness and judged as Atlas
    judges its own client's (fired = the send)."""
    try:
        every = [(status, r) for status, v in lists.items() for r in v]
        t = [r["info"]["timings"] for _, r in every]
        t0 = min(float(x.get("targeted_start") or x["request_start"]) for x in t)
        warm_end = sm.get("measure_start_time")
        cool_start = sm.get("measure_end_time")
        order = sorted(range(len(every)), key=lambda j: float(t[j].get("targeted_start") or t[j]["request_start"]))
        out = []
        for i, j in enumerate(order):
            status, r = every[j]
            x = t[j]
            sent_at = x.get("request_start")
            due = float(x.get("targeted_start") or sent_at)
            phase = ("warmup" if warm_end and sent_at and float(sent_at) < float(warm_end) else
                     "cooldown" if cool_start and sent_at and float(sent_at) > float(cool_start) else "measure")
            prompt = _tokens(r.get("input_metrics"))
            tokens = _tokens(r.get("output_metrics")) or int(x.get("token_iterations") or 0)
            sent = None if sent_at is None else float(sent_at) - t0
            if STATUS[status] != "ok" or x.get("first_token_iteration") is None:
                why = r.get("info", {}).get("error") or f"{status} in GuideLLM's file"
                rec = failed_record(i, due - t0, sent, str(why), prompt, tokens, phase)
                rec.status = STATUS[status] if STATUS[status] != "ok" else "incomplete_stream"
                out.append(rec)
                continue
            assert sent is not None
            first, last = float(x["first_token_iteration"]), float(x.get("last_token_iteration") or x["first_token_iteration"])
            gaps = [last - first] if int(x.get("token_iterations") or 1) > 1 and last > first else []
            end = x.get("request_end")
            out.append(stream_record(i, due - t0, sent, first - float(sent_at), gaps, tokens,
                                     float(end) - float(sent_at) if end is not None else None, prompt, tokens, phase,
                                     fired=sent if open_loop else None))
        return out
    except (TypeError, ValueError, KeyError, AttributeError) as e:
        raise ImportError_(f"{where}: unreadable per-request timings: {e}") from None


def _tokens(metrics: Any) -> int | None:
    if not isinstance(metrics, dict):
        return None
    v = metrics.get("total_tokens", metrics.get("text_tokens"))
    return int(v) if v is not None else None


def _load(where: str, s: dict[str, Any], n: int, records: list[RequestRecord]) -> Any:
    """GuideLLM's strategy as Atlas's load: synchronous and concurrent are closed loops (1 or `streams`);
    throughput sends as fast as its concurrency cap allows (a closed loop at that cap); constant and Poisson
    rates are open loops. Other strategies are refused."""
    kind = s.get("type_")
    try:
        if kind == "synchronous":
            return load_point(where, LoadMode.CLOSED, n, records, concurrency=1)
        if kind in ("concurrent", "throughput"):
            c = s.get("streams") or s.get("max_concurrency") or n
            return load_point(where, LoadMode.CLOSED, n, records, concurrency=min(int(c), n))
        if kind in ("constant", "poisson"):
            cap = s.get("max_concurrency")
            return load_point(where, LoadMode.CONSTANT if kind == "constant" else LoadMode.POISSON, n, records,
                              rate=float(s["rate"]), max_in_flight=int(cap) if cap and int(cap) < n else None)
    except ImportError_:
        raise
    except (TypeError, ValueError, KeyError) as e:
        raise ImportError_(f"{where}: strategy {kind}: {e}") from None
    raise ImportError_(f"{where}: strategy {kind!r}: not a load Atlas can describe (it reads synchronous, "
                       "concurrent, throughput, constant and poisson)")


def _iso(t: Any) -> str | None:
    from datetime import UTC, datetime

    try:
        return datetime.fromtimestamp(float(t), tz=UTC).isoformat(timespec="seconds")
    except (TypeError, ValueError, OverflowError, OSError):
        return None
