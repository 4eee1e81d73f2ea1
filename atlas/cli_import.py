"""`atlas import`: another harness's result file as Atlas results (atlas.importers)."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console
from rich.markup import escape

console = Console(soft_wrap=True)
err = Console(stderr=True)


def import_cmd(files: list[Path] = typer.Argument(..., help="the tool's result files (AIPerf: an artifact folder, a "
                                                           "sweep's folder of them, profile_export.jsonl or "
                                                           "profile_export_aiperf.json)"),
               from_: str = typer.Option(..., "--from", help="the tool that wrote it: vllm-bench (vllm bench serve "
                                                              "--save-result --save-detailed), guidellm (guidellm run "
                                                              "--output kind=json|yaml), aiperf (aiperf profile "
                                                              "--streaming)"),
               sweep: str = typer.Option(..., help="the sweep name its points go to (RESULTS/<sweep>/)"),
               gpu: str = typer.Option(None, help="the GPU (or cpu) it was measured on, as you know it (the file "
                                                   "does not say; it prices the points); default: the --spec's gpu"),
               spec: Path = typer.Option(None, help="a sweep spec whose model section describes the model served "
                                                    "(its id, size and layers: what `atlas fit` needs)"),
               results: Path = typer.Option(Path("results"), help="results root"),
               tool_version: str = typer.Option(None, help="the tool's version, where the file does not record it"),
               price_provider: str = typer.Option(None, "--price-provider", help="provider in configs/prices.yaml")
               ) -> None:
    """Turn another harness's result file into Atlas results (source: imported): they join frontiers, the
    report, compare and `atlas fit`."""
    from atlas.config import SpecError, load_spec
    from atlas.hardware import HardwareError
    from atlas.importers import ImportError_, read, write_imported
    from atlas.results import ResultError

    try:
        s = load_spec(spec) if spec is not None else None
        if gpu is None and s is None:
            raise SpecError("--gpu: name the GPU the file was measured on (or give a --spec with a gpu)")
        # every file is read before anything is written: one that cannot be read stops the import whole
        read_all = [(f, read(from_, str(f), version=tool_version)) for f in files]
        stored = [r for f, points in read_all
                  for r in write_imported(points, f, sweep, results, gpu or (s.gpu if s else "cpu"), price_provider,
                                          s.model if s else None)]
    except (ImportError_, ResultError, HardwareError, SpecError, OSError, ValueError) as e:
        err.print(f"[bold red]error:[/] {escape(str(e).splitlines()[0])}", highlight=False, soft_wrap=True)
        raise typer.Exit(2) from None
    for r in stored:
        m = r.metrics
        what = (f"{m.n_ok} ok requests, {m.output_tok_s:.1f} tok/s, TTFT p50 {m.value('ttft_p50_ms'):.1f} ms, "
                f"TPOT p50 {m.value('tpot_p50_ms') or float('nan'):.2f} ms" if m and m.n_ok else "no request ok")
        console.print(f"{r.status} {r.label}: {what}" +
                      (f" ({'; '.join(r.reasons)[:160]})" if r.reasons else ""), highlight=False, markup=False)
    console.print(f"{len(stored)} points -> {results / sweep}")
