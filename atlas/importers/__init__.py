"""`atlas import --from TOOL FILE --sweep NAME`: other harnesses' result files as Atlas results (`source:
imported`), so a team that benchmarked with them gets frontiers, reports, comparisons and a fitted simulator.
Only what a file really has is kept: its per-request timings are rebuilt into Atlas's request records and
summarized by Atlas's own metric code, so every metric means what docs/metrics.md says (the differences from
each tool's own definitions are written there)."""

from __future__ import annotations

from atlas.importers.common import Imported, ImportError_, write_imported

TOOLS = ("vllm-bench", "guidellm", "aiperf")

__all__ = ["TOOLS", "ImportError_", "Imported", "read", "write_imported"]


def read(tool: str, path: str, **kw: object) -> list[Imported]:
    """The points a file of `tool` holds; ImportError_ (one line naming the file) when it cannot be read."""
    if tool == "vllm-bench":
        from atlas.importers.vllm_bench import read_file
    elif tool == "guidellm":
        from atlas.importers.guidellm import read_file
    elif tool == "aiperf":
        from atlas.importers.aiperf import read_file
    else:
        raise ImportError_(f"--from {tool}: unknown tool; known: {', '.join(TOOLS)}")
    return read_file(path, **kw)  # type: ignore[arg-type]
