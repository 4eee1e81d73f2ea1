import os
import shutil
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
ARTIFACTS = Path(os.environ.get("ATLAS_TEST_ARTIFACTS", REPO / "test-artifacts"))


def pytest_collection_modifyitems(config, items):
    """GPU tests need an NVIDIA GPU (those that also need vLLM skip themselves without it)."""
    have_gpu = shutil.which("nvidia-smi") is not None
    for item in items:
        if "gpu" in item.keywords and not have_gpu:
            item.add_marker(pytest.mark.skip(reason="needs an NVIDIA GPU"))


@pytest.fixture
def artifacts() -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    return ARTIFACTS


@pytest.fixture
def mock_server(tmp_path):
    """Start a mock OpenAI server subprocess with given options; yields a function opts -> base_url."""
    from atlas.engines.mock.engine import MockEngine

    engines = []

    def start(**kw):
        from atlas.engines.mock.server import MockOptions

        eng = MockEngine(MockOptions(**kw), tmp_path / f"mock{len(engines)}.log")
        eng.start()
        engines.append(eng)
        return eng.base_url

    yield start
    for e in engines:
        e.stop()
