"""GuideLLM report files (`guidellm run ... --output kind=json` or yaml, GuideLLM 0.8: each request's
`info.timings`; and `guidellm benchmark --output-path`, GuideLLM 0.3: each request's `scheduler_info` and token
times). Each benchmark (one strategy: a
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

from atlas.importers.common import Imported, ImportError_, failed_record, load_point, read_text, stream_record
from atlas.knobs import LoadMode
from atlas.loadgen import RequestRecord

NOTES = ["imported from GuideLLM: latency runs from when its scheduler meant to send each request "
         "(targeted_start), as Atlas's own; GuideLLM's TTFT runs from the send (request_start), so its own "
         "dispatch delay (queue_ms here) is in Atlas's TTFT and E2E and not in GuideLLM's"]
NOTE_03_CLOSED = ("imported from GuideLLM 0.3, closed loop: its targeted_start_time is not when a stream meant to send "
                  "(it stays at the run's start), so latency runs from the send (request start), as GuideLLM's own, "
                  "and the client's own delay before a send is not charged")
NO_ITL = ("the file has each request's first and last token times only, not each chunk's: ITL percentiles "
          "cannot be derived (TPOT per request can)")
STATUS = {"successful": "ok", "errored": "tool_error", "incomplete": "incomplete_stream"}


def read_file(path: str | Path, version: str | None = None) -> list[Imported]:
    p = Path(path)
    text = read_text(p)
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
    if not isinstance(b, dict) or not isinstance(b.get("requests"), dict):
        raise ImportError_(f"{where}: not a GuideLLM benchmark (no requests)")
    # 0.8 writes config.strategy / config.backend; 0.3 wrote args.strategy / worker.backend_*
    new_layout = isinstance(b.get("config"), dict)
    cfg: dict[str, Any] = b["config"] if new_layout else b.get("args")  # type: ignore[assignment]
    if not isinstance(cfg, dict):
        raise ImportError_(f"{where}: not a GuideLLM benchmark (no config or args)")
    reqs = b["requests"]
    lists = {k2: reqs.get(k2) or [] for k2 in STATUS}
    if not all(isinstance(v, list) for v in lists.values()):
        raise ImportError_(f"{where}: requests.successful/errored/incomplete are not lists")
    held = sum(len(v) for v in lists.values())
    metrics: dict[str, Any] = b["metrics"] if isinstance(b.get("metrics"), dict) else {}
    totals = metrics.get("request_totals") or b.get("request_totals") or {}
    if isinstance(totals, dict) and isinstance(totals.get("total"), int) and held < totals["total"]:
        raise ImportError_(f"{where}: the file holds {held} of the {totals['total']} requests GuideLLM made (a "
                           "sample, --output-sampling): Atlas cannot derive throughput from part of a run; save every "
                           "request")
    if not held:
        raise ImportError_(f"{where}: the benchmark holds no request")
    sm: dict[str, Any] = b["scheduler_metrics"] if isinstance(b.get("scheduler_metrics"), dict) else {}
    strategy: dict[str, Any] = cfg["strategy"] if isinstance(cfg.get("strategy"), dict) else {}
    open_loop = strategy.get("type_") in ("constant", "poisson")
    view = [(status, _timings(where, r)) for status, v in lists.items() for r in v]
    notes = list(NOTES)
    if not new_layout and not open_loop:
        # 0.3's closed-loop strategies leave targeted_start_time at the run's start (or a earlier request's):
        # not when the stream meant to send, so latency runs from the send, as GuideLLM's own
        for _, x in view:
            x["due"] = None
        notes = [NOTE_03_CLOSED]
    records = _records(where, view, sm, open_loop=open_loop)
    load = _load(where, strategy, held, records)
    backend: dict[str, Any] = cfg["backend"] if isinstance(cfg.get("backend"), dict) else {}
    worker: dict[str, Any] = b["worker"] if isinstance(b.get("worker"), dict) else {}
    model = backend.get("model") or worker.get("backend_model") or "unknown"
    about: dict[str, Any] = {"strategy": {k2: v for k2, v in strategy.items() if k2 not in ("type_", "start_time")} | {
        "type": strategy.get("type_")}, "benchmark_in_file": k,
        "target": backend.get("target") or worker.get("backend_target"),
        "request_format": backend.get("request_format") or view[0][1]["request_type"],
        "layout": "0.8 (info.timings)" if new_layout else "0.3 (scheduler_info)",
        "requests_in_file": {k2: len(v) for k2, v in lists.items()}}
    return Imported(tool="guidellm", tool_version=version, model=str(model), run_label=str(strategy.get("type_")),
                    load=load, records=records, started_at=_iso(b.get("start_time")), about=about,
                    notes=notes, lacks={"itl_ms": NO_ITL})


def _timings(where: str, r: Any) -> dict[str, Any]:
    """One request's times and counts in one shape, from either layout: due (targeted start), sent, first,
    last, end (unix s), prompt and output tokens, streamed iterations (None: not in the file), error."""
    if not isinstance(r, dict):
        raise ImportError_(f"{where}: a request that is not an object")
    info = r.get("info")
    if isinstance(info, dict) and isinstance(info.get("timings"), dict):  # 0.8
        x = info["timings"]
        return {"due": x.get("targeted_start"), "sent": x.get("request_start"), "first": x.get("first_token_iteration"),
                "last": x.get("last_token_iteration"), "end": x.get("request_end"),
                "prompt": _tokens(r.get("input_metrics")), "output": _tokens(r.get("output_metrics")),
                "iterations": x.get("token_iterations"), "error": info.get("error"), "request_type": None}
    si = r.get("scheduler_info")
    if isinstance(si, dict) and "first_token_time" in r:  # 0.3
        return {"due": si.get("targeted_start_time"), "sent": r.get("start_time") or si.get("request_start"),
                "first": r.get("first_token_time"), "last": r.get("last_token_time"),
                "end": r.get("end_time") or si.get("request_end"), "prompt": r.get("prompt_tokens"),
                "output": r.get("output_tokens"), "iterations": None, "error": r.get("error"),
                "request_type": r.get("request_type")}
    raise ImportError_(f"{where}: requests with neither info.timings (GuideLLM 0.8) nor scheduler_info and "
                       "first_token_time (GuideLLM 0.3): a GuideLLM layout this importer does not read")


def _records(where: str, view: list[tuple[str, dict[str, Any]]], sm: dict[str, Any], open_loop: bool
             ) -> list[RequestRecord]:
    """Open loop: the targeted start is the schedule, so a late send is the client's lateness and judged as Atlas
    judges its own client's (fired = the send)."""
    try:
        t0 = min(float(x["due"] or x["sent"]) for _, x in view)
        warm_end, cool_start = sm.get("measure_start_time"), sm.get("measure_end_time")
        out = []
        for i, (status, x) in enumerate(sorted(view, key=lambda e: float(e[1]["due"] or e[1]["sent"]))):
            sent_at = x["sent"]
            due = float(x["due"] or sent_at)
            phase = ("warmup" if warm_end and sent_at and float(sent_at) < float(warm_end) else
                     "cooldown" if cool_start and sent_at and float(sent_at) > float(cool_start) else "measure")
            prompt = None if x["prompt"] is None else int(x["prompt"])
            tokens = int(x["output"] or x["iterations"] or 0)
            sent = None if sent_at is None else float(sent_at) - t0
            if STATUS[status] != "ok" or x["first"] is None or sent is None:
                out.append(failed_record(i, due - t0, sent, str(x["error"] or f"{status} in GuideLLM's file"), prompt,
                                         tokens, phase, STATUS[status] if STATUS[status] != "ok" else "incomplete_stream"))
                continue
            first, last = float(x["first"]), float(x["last"] or x["first"])
            many = int(x["iterations"]) > 1 if x["iterations"] is not None else tokens > 1
            gaps = [last - first] if many and last > first else []
            end = x["end"]
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
