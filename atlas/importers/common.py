"""What every importer shares: an imported point (its config, request records and provenance) and writing it
as an Atlas result through the result store (atomic; a measured point is never overwritten)."""

from __future__ import annotations

import math
import platform
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from atlas import __version__
from atlas.config import LoadPoint, ModelSpec
from atlas.cost import cost_of
from atlas.engines.embedded import sha256_file
from atlas.engines.imported.knobs import ImportedKnobs
from atlas.hardware import cpu_model_name, get_gpu
from atlas.knobs import LoadMode
from atlas.loadgen import LoadRun, RequestRecord
from atlas.metrics import summarize_load
from atlas.plan import RunConfig
from atlas.provenance import now_iso
from atlas.results import Provenance, ResultStore, RunResult


class ImportError_(ValueError):  # noqa: N801 - not the builtin ImportError
    """A result file that cannot be imported; one line naming it."""


@dataclass
class Imported:
    """One point of another tool's file."""

    tool: str
    tool_version: str | None
    model: str
    run_label: str | None
    load: LoadPoint
    records: list[RequestRecord]
    started_at: str | None  # when the tool ran, as the file says
    about: dict[str, Any] = field(default_factory=dict)  # what else the file says (kept in provenance)
    notes: list[str] = field(default_factory=list)  # definition differences that apply to this point
    lacks: dict[str, str] = field(default_factory=dict)  # summary metric -> why the file cannot give it
    files: list[Path] = field(default_factory=list)  # the files it came from, where not only the one named


def read_text(p: Path, missing: str | None = None) -> str:
    """A file's text, or ImportError_ naming it: `missing` (what to say of a file that is not there) or why it
    cannot be read."""
    try:
        return p.read_text(encoding="utf-8")
    except FileNotFoundError:
        if missing is None:
            raise ImportError_(f"{p}: cannot read: no such file") from None
        raise ImportError_(f"{p}: {missing}") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ImportError_(f"{p}: cannot read: {getattr(e, 'strerror', None) or e}") from None


def stream_record(i: int, scheduled: float, sent: float, ttft: float, gaps: list[float], tokens: int,
                  latency: float | None, prompt_tokens: int | None, requested: int, phase: str = "measure",
                  fired: float | None = None) -> RequestRecord:
    """A successful streamed request as Atlas records it, from a tool's per-request timings (seconds, on one
    clock): when it was due (`scheduled`) and sent, its TTFT from the send, the gaps between its chunks, its
    output tokens and its latency from the send. Tokens beyond one per chunk are put on the last chunk (which
    of several chunks carried them the file does not say). ValueError on a negative or non-finite time."""
    times = [sent + ttft]
    for g in gaps:
        times.append(times[-1] + g)
    if not all(math.isfinite(t) for t in (scheduled, sent, *times)) or ttft < 0 or any(g < 0 for g in gaps):
        raise ValueError(f"request {i}: a negative or non-finite time")
    chunks = [1] * len(times)
    if tokens > len(times):
        chunks[-1] += tokens - len(times)
    rec = RequestRecord(index=i, phase=phase, scheduled_s=scheduled, sent_s=sent, fired_s=fired,
                        prompt_tokens=prompt_tokens, requested_tokens=requested)
    rec.first_token_s, rec.token_times_s, rec.chunk_tokens = times[0], times, chunks
    rec.end_s = times[-1]
    rec.done_s = max(times[-1], sent + latency) if latency is not None and math.isfinite(latency) else times[-1]
    rec.output_tokens = rec.usage_output_tokens = max(tokens, len(times))
    rec.status = "ok"
    return rec


def failed_record(i: int, scheduled: float, sent: float | None, error: str, prompt_tokens: int | None,
                  requested: int, phase: str = "measure", status: str = "tool_error") -> RequestRecord:
    """A request the tool recorded as failed, with its error."""
    return RequestRecord(index=i, phase=phase, scheduled_s=scheduled, sent_s=sent, prompt_tokens=prompt_tokens,
                         requested_tokens=requested, status=status, error=error[:300])


def load_point(where: str, mode: LoadMode, n: int, records: list[RequestRecord], concurrency: int | None = None,
               rate: float | None = None, burstiness: float = 1.0, max_in_flight: int | None = None) -> LoadPoint:
    """The load a tool ran, as Atlas describes one: its mode and level, the file's request count (warm-up ones
    apart) and the mean prompt and output lengths of its successful requests."""
    ok = [r for r in records if r.status == "ok"]
    prompt = round(sum(r.prompt_tokens or 0 for r in ok) / len(ok)) if ok else 1
    output = round(sum(r.usage_output_tokens or 0 for r in ok) / len(ok)) if ok else 1
    warm = sum(r.phase == "warmup" for r in records)
    try:
        return LoadPoint(mode=mode, concurrency=concurrency, rate_rps=rate, burstiness=burstiness,
                         max_in_flight=max_in_flight, num_requests=n, warmup_requests=warm,
                         prompt_tokens=max(1, prompt), output_tokens=max(1, output), repeats=1, min_duration_s=0.0)
    except ValueError as e:
        raise ImportError_(f"{where}: the load ({mode.value}, concurrency {concurrency}, rate {rate}): "
                           f"{str(e).splitlines()[-1].strip()}") from None


def write_imported(points: list[Imported], source: Path, sweep: str, results: Path, gpu: str,
                   price_provider: str | None = None, model_spec: ModelSpec | None = None) -> list[RunResult]:
    """Each point as a result of `sweep` under `results`, with its records; the GPU is as the user states it.
    `model_spec` (a spec's model section) names the model and its size for the simulator's fit; else the model
    is the name the file requested."""
    g = get_gpu(gpu)
    store = ResultStore(results, sweep)
    store.check_writable()
    digests: dict[Path, str] = {}

    def digest(f: Path) -> str:
        if f not in digests:
            digests[f] = sha256_file(f)
        return digests[f]

    out = []
    for k, p in enumerate(points):
        main, *others = p.files or [source]
        longest = max((r.prompt_tokens or 0) + (r.usage_output_tokens or r.output_tokens) for r in p.records)
        need = max(64, p.load.prompt_tokens + p.load.output_tokens, longest)
        model = (model_spec.model_copy(update={"max_model_len": max(need, model_spec.max_model_len)}) if model_spec
                 else ModelSpec(id=p.model, source="hub", path=p.model, max_model_len=need))
        server = ImportedKnobs(tool=p.tool, served_model=p.model, run_label=p.run_label)
        cfg = RunConfig(engine="imported", gpu=g.key, model=model, server=server, load=p.load)
        run = LoadRun(point=p.load, records=p.records, started_at_unix=0.0,
                      wall_s=max((r.done_s or r.end_s or 0.0) for r in p.records), offered_rate_rps=p.load.rate_rps,
                      client_name=p.tool)  # a late client is the tool's: Atlas's advice on its own is not for it
        summary = summarize_load(run)
        summary = summary.model_copy(update={"warnings": [*summary.warnings, *p.notes,
                                                          *(f"{m}: {why}" for m, why in p.lacks.items())],
                                             **dict.fromkeys(p.lacks)})
        status = "ok" if summary.valid else "invalid"
        reasons = list(summary.invalid_reasons)
        if summary.n_ok == 0:
            status, reasons = "failed", [f"every request failed in the file ({summary.errors})", *reasons]
        prov = Provenance(atlas_version=__version__, model_id=model.id, host_cpu=cpu_model_name(),
                          python=platform.python_version(), started_at=p.started_at or now_iso(),
                          finished_at=p.started_at or now_iso(),
                          engine={"engine": "imported", "started_by_atlas": False, "tool": p.tool,
                                  "tool_version": p.tool_version or "not in the file", "file": main.name,
                                  "file_sha256": digest(main), "point_in_file": k,
                                  "gpu": f"{g.key} as stated with --gpu; not in the file",
                                  "served_model": p.model, **p.about,
                                  **({"also_read": {f.name: digest(f) for f in others}} if others else {})},
                          engine_version=f"{p.tool} {p.tool_version}" if p.tool_version else p.tool)
        result = RunResult(run_id=cfg.run_id(), sweep=sweep, source="imported", status=status, reasons=reasons,
                           label=cfg.label(), config=cfg, metrics=summary, repeats=[summary],
                           cost=cost_of(g.key, summary, price_provider), provenance=prov)
        out.append(store.write(result, [{"repeat": 0, **r.to_json()} for r in p.records]))
    return out
