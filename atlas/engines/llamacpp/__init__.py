"""llama.cpp (llama-server): knobs, GGUF variants, model sources and the engine."""

from atlas.engines.llamacpp.adapter import ADAPTER

__all__ = ["ADAPTER"]
