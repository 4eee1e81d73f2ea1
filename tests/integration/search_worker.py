"""One `atlas worker` process for the distributed tests, with mock engines (real HTTP servers in
subprocesses) in place of vLLM. It appends each mock server's pid to a file, so a test that kills this
worker can clean up after it.

    python -m tests.integration.search_worker URL STUDY RESULTS PIDFILE [slow]
"""

import sys
from dataclasses import replace
from pathlib import Path

from atlas.engines.mock.engine import MockEngine
from atlas.search.run import run_worker
from tests.integration.test_sweep_mock import behaviour


class RecordedMock(MockEngine):
    pids: Path

    def start(self) -> None:
        super().start()
        assert self.proc is not None
        with self.pids.open("a") as f:
            f.write(f"{self.proc.pid}\n")


def main() -> None:
    url, study, results, pids = sys.argv[1:5]
    slow = sys.argv[5:6] == ["slow"]

    def factory(spec, gpu, cfg, model_path, log_path):  # type: ignore[no-untyped-def]
        opts = behaviour(cfg.server)
        eng = RecordedMock(replace(opts, itl_ms=400.0) if slow else opts, log_path)
        eng.pids = Path(pids)
        return eng

    rep = run_worker(url, study, results, engine_factory=factory, progress=lambda m: print(m, flush=True))
    print(f"DONE {rep.stopped}; measured {len(rep.measured_here)}", flush=True)


if __name__ == "__main__":
    main()
