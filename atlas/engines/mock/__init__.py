"""The mock engine: a real HTTP server with injected timing and faults, for tests and demos."""

from atlas.engines.mock.adapter import ADAPTER

__all__ = ["ADAPTER"]
