"""An endpoint someone else deployed (`engine: external`, `atlas sweep SPEC --endpoint URL`): measured, never
started, stopped or configured by Atlas."""

from atlas.engines.external.adapter import ADAPTER

__all__ = ["ADAPTER"]
