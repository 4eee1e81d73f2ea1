"""What every importer shares: an imported point (its config, request records and provenance) and writing it
as an Atlas result through the result store (atomic; a measured point is never overwritten)."""

from __future__ import annotations

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


def write_imported(points: list[Imported], source: Path, sweep: str, results: Path, gpu: str,
                   price_provider: str | None = None, model_spec: ModelSpec | None = None) -> list[RunResult]:
    """Each point as a result of `sweep` under `results`, with its records; the GPU is as the user states it.
    `model_spec` (a spec's model section) names the model and its size for the simulator's fit; else the model
    is the name the file requested."""
    g = get_gpu(gpu)
    store = ResultStore(results, sweep)
    store.check_writable()
    digest = sha256_file(source)
    out = []
    for k, p in enumerate(points):
        longest = max((r.prompt_tokens or 0) + (r.usage_output_tokens or r.output_tokens) for r in p.records)
        need = max(64, p.load.prompt_tokens + p.load.output_tokens, longest)
        model = (model_spec.model_copy(update={"max_model_len": max(need, model_spec.max_model_len)}) if model_spec
                 else ModelSpec(id=p.model, source="hub", path=p.model, max_model_len=need))
        server = ImportedKnobs(tool=p.tool, served_model=p.model, run_label=p.run_label)
        cfg = RunConfig(engine="imported", gpu=g.key, model=model, server=server, load=p.load)
        run = LoadRun(point=p.load, records=p.records, started_at_unix=0.0,
                      wall_s=max((r.done_s or r.end_s or 0.0) for r in p.records), offered_rate_rps=p.load.rate_rps)
        summary = summarize_load(run)
        summary = summary.model_copy(update={"warnings": [*summary.warnings, *p.notes]})
        status = "ok" if summary.valid else "invalid"
        reasons = list(summary.invalid_reasons)
        if summary.n_ok == 0:
            status, reasons = "failed", [f"every request failed in the file ({summary.errors})", *reasons]
        prov = Provenance(atlas_version=__version__, model_id=model.id, host_cpu=cpu_model_name(),
                          python=platform.python_version(), started_at=p.started_at or now_iso(),
                          finished_at=p.started_at or now_iso(),
                          engine={"engine": "imported", "started_by_atlas": False, "tool": p.tool,
                                  "tool_version": p.tool_version or "not in the file", "file": source.name,
                                  "file_sha256": digest, "point_in_file": k,
                                  "gpu": f"{g.key} as stated with --gpu; not in the file",
                                  "served_model": p.model, **p.about},
                          engine_version=f"{p.tool} {p.tool_version}" if p.tool_version else p.tool)
        result = RunResult(run_id=cfg.run_id(), sweep=sweep, source="imported", status=status, reasons=reasons,
                           label=cfg.label(), config=cfg, metrics=summary, repeats=[summary],
                           cost=cost_of(g.key, summary, price_provider), provenance=prov)
        out.append(store.write(result, [{"repeat": 0, **r.to_json()} for r in p.records]))
    return out
