"""Atlas: a Pareto atlas of LLM inference optimizations."""

__version__ = "0.1.0"


def load_frame(path):  # type: ignore[no-untyped-def]
    """Every result under `path` (results/ or results/<sweep>) as a pandas DataFrame, one row per point."""
    from atlas.export import load_frame as _load

    return _load(path)
