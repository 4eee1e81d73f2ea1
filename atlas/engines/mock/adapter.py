"""The mock adapter: `engine: mock` serves a spec with the mock server (no model files), for tests, demos and
checking Atlas itself on any machine. Weights int4 answer 20% of eval items wrongly; a naive fp8 KV cache
answers garbage, fast."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from atlas.engines.adapter import EngineAdapter
from atlas.engines.fileless import FilelessAdapter, NoModelFiles
from atlas.engines.mock.knobs import MockKnobs, MockKV, MockWeights

if TYPE_CHECKING:
    from atlas.config import SweepSpec
    from atlas.engines.base import Engine
    from atlas.hardware import GpuSpec
    from atlas.plan import RunConfig


class MockAdapter(FilelessAdapter):
    kind = "mock"
    knobs = MockKnobs

    def version(self) -> str | None:
        from atlas import __version__

        return f"atlas-mock=={__version__}"

    def model_source(self, spec: SweepSpec, note: Any) -> NoModelFiles:
        return NoModelFiles(lambda server: {"mock": "no model files: the mock server answers from the eval sets"})

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


ADAPTER: EngineAdapter = MockAdapter()
