"""Atlas: a Pareto atlas of LLM inference optimizations."""

__version__ = "0.1.0"
