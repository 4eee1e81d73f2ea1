"""SGLang (GPU only): knobs, command line, model sources and the engine."""

from atlas.engines.sglang.adapter import ADAPTER

__all__ = ["ADAPTER"]
