"""An Engine that runs the mock server as a real subprocess, so sweeps can be tested end to end without
vLLM; and a factory mapping server knobs to mock behaviours for those tests."""

from __future__ import annotations

import socket
import sys
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any

from atlas.engines.process import ProcessEngine
from atlas.testing.mock_server import MockOptions


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def mock_argv(opts: MockOptions, port: int) -> list[str]:
    argv = [sys.executable, "-m", "atlas.testing.mock_server", "--port", str(port)]
    defaults = MockOptions()
    for f in fields(MockOptions):
        v = asdict(opts)[f.name]
        if v != getattr(defaults, f.name):
            argv += [f"--{f.name.replace('_', '-')}", str(v)]
    return argv


class MockEngine(ProcessEngine):
    name = "mock"

    def __init__(self, opts: MockOptions, log_path: Path, port: int | None = None, startup_timeout_s: float = 30):
        port = port or free_port()
        super().__init__(mock_argv(opts, port), served_name=opts.model, host="127.0.0.1", port=port,
                         log_path=log_path, startup_timeout_s=startup_timeout_s)


def mock_factory(options_for: Any) -> Any:
    """A Sweeper engine factory: options_for(server_knobs) -> MockOptions (the factory gets the RunConfig)."""

    def make(spec: Any, gpu: Any, cfg: Any, model_path: str, log_path: Path) -> MockEngine:
        return MockEngine(options_for(cfg.server), log_path)

    return make
