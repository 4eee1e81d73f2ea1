"""The mock adapter: `engine: mock` serves a spec with the mock server (no model files), for tests, demos and
checking Atlas itself on any machine. Weights int4 answer 20% of eval items wrongly; a naive fp8 KV cache
answers garbage, fast."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from atlas.engines.adapter import Caps, EngineAdapter
from atlas.engines.mock.knobs import MockKnobs, MockKV, MockWeights

if TYPE_CHECKING:
    from atlas.config import SweepSpec
    from atlas.engines.base import Engine
    from atlas.hardware import GpuSpec
    from atlas.plan import RunConfig
    from atlas.simulator.scheduler import ChunkedScheduler


class _NoFiles:
    def resolve(self, server: Any) -> tuple[str, dict[str, Any]]:
        return "", {"mock": "no model files: the mock server answers from the eval sets"}

    def planned(self, server: Any) -> tuple[str, str | None]:
        return "", None


class MockAdapter:
    kind = "mock"
    knobs = MockKnobs
    cpu_spec: str | None = None
    weight_formats: frozenset[str] = frozenset()
    kv_scale_formats: frozenset[str] = frozenset()

    def version(self) -> str | None:
        from atlas import __version__

        return f"atlas-mock=={__version__}"

    def caps(self) -> Caps:
        return None

    def infeasible(self, spec: SweepSpec, gpu: GpuSpec, server: Any, caps: Caps) -> str | None:
        return None

    def model_source(self, spec: SweepSpec, note: Any) -> _NoFiles:
        return _NoFiles()

    def engine(self, spec: SweepSpec, gpu: GpuSpec, cfg: RunConfig, model_path: str, log_path: Path) -> Engine:
        from atlas.engines.mock.engine import MockEngine
        from atlas.engines.mock.server import MockOptions

        s: MockKnobs = cfg.server  # type: ignore[assignment]
        fast = 0.5 if s.kv_cache_dtype == MockKV.FP8 else (0.8 if s.quantization == MockWeights.INT4 else 1.0)
        opts = MockOptions(ttft_ms=s.ttft_ms * fast, itl_ms=s.itl_ms * fast, model=spec.model.id,
                           itl_per_running_ms=(s.itl_per_running_ms or 0.0) * fast,
                           prefix_cache=bool(s.enable_prefix_caching),
                           prefill_ms_per_token=(s.prefill_ms_per_token or 0.0) * fast,
                           answers="garbage" if s.kv_cache_dtype == MockKV.FP8 else "oracle",
                           degrade=0.2 if s.quantization == MockWeights.INT4 else 0.0)
        return MockEngine(opts, log_path, port=spec.port, startup_timeout_s=spec.startup_timeout_s)

    def scheduler(self, server: Any, max_model_len: int, kv_capacity_tokens: int | None) -> ChunkedScheduler:
        from atlas.simulator.scheduler import budget_scheduler

        return budget_scheduler(server, max_model_len, kv_capacity_tokens, 2048)  # V1's default token budget

    def audit(self, result: Any) -> str | None:
        return None


ADAPTER: EngineAdapter = MockAdapter()
