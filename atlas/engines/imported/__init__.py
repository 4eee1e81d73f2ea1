"""Points another harness measured (`atlas import`): no engine Atlas can start; their knobs name the tool and
what it measured."""

from atlas.engines.imported.adapter import ADAPTER

__all__ = ["ADAPTER"]
