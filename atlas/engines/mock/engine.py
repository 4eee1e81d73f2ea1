"""An Engine that runs the mock server as a real subprocess, so sweeps can be tested end to end without
vLLM; and a factory mapping server knobs to mock behaviours for those tests. The mock speaks vLLM's API
(/tokenize, /metrics names, prompt logprobs, /reset_prefix_cache), so it is read with vLLM's helpers."""

from __future__ import annotations

import os
import sys
from dataclasses import asdict, fields, replace
from pathlib import Path
from typing import Any

from atlas.engines.mock.server import MockOptions
from atlas.engines.process import launch_name
from atlas.engines.procs import free_port  # noqa: F401  (tests take it from here)
from atlas.engines.vllm.engine import VllmApi


def mock_argv(opts: MockOptions, port: int) -> list[str]:
    argv = [sys.executable, "-m", "atlas.engines.mock.server", "--port", str(port)]
    defaults = MockOptions()
    for f in fields(MockOptions):
        v = asdict(opts)[f.name]
        if v != getattr(defaults, f.name):
            argv += [f"--{f.name.replace('_', '-')}", str(v)]
    return argv


class MockEngine(VllmApi):
    """The mock server as an engine Atlas starts: a port Atlas chooses (unless `port` pins one) and, like
    the real engines, a per-launch model name unless `opts.model` names one."""

    name = "mock"
    served_tokens_metric = "vllm:generation_tokens_total"
    scraped = ("vllm:num_requests_running", "vllm:num_preemptions_total", "vllm:generation_tokens_total",
               "vllm:prefix_cache_hits_total", "vllm:prefix_cache_queries_total", "vllm:prompt_tokens_total")

    def __init__(self, opts: MockOptions, log_path: Path, port: int | None = None, startup_timeout_s: float = 30):
        opts = replace(opts, model=launch_name(opts.model))
        self.key_env = opts.api_key_env
        super().__init__(lambda p: mock_argv(opts, p), served_name=opts.model, host="127.0.0.1", port=port,
                         log_path=log_path, startup_timeout_s=startup_timeout_s)

    @property
    def request_headers(self) -> dict[str, str]:
        """A mock that wants a key (`api_key_env`) gets it from its launcher too, as `vllm serve --api-key` would."""
        key = os.environ.get(self.key_env, "") if self.key_env else ""
        return {"Authorization": f"Bearer {key}"} if key else {}


def mock_factory(options_for: Any) -> Any:
    """A Sweeper engine factory: options_for(server_knobs) -> MockOptions (the factory gets the RunConfig)."""

    def make(spec: Any, gpu: Any, cfg: Any, model_path: str, log_path: Path) -> MockEngine:
        return MockEngine(options_for(cfg.server), log_path)

    return make
