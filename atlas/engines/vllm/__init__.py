"""vLLM (GPU) and vLLM-CPU: knobs, command line, capabilities, model sources and the engine."""

from atlas.engines.vllm.adapter import ADAPTER

__all__ = ["ADAPTER"]
