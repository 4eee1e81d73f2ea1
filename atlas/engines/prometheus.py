"""Reading an engine's /metrics (Prometheus text exposition)."""

from __future__ import annotations


def parse_prometheus(text: str, names: tuple[str, ...]) -> dict[str, float]:
    """Sum of each named metric's samples (all label sets)."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name in names:
            try:
                out[name] = out.get(name, 0.0) + float(line.rsplit(" ", 1)[1])
            except ValueError:
                continue
    return out
