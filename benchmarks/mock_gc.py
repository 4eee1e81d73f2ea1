"""The mock server's start-up heap frozen before it serves, A/B: two mock servers, one as shipped (frozen,
atlas.engines.mock.server._freeze_heap) and one with that hook made a no-op (before), each serving all its runs,
loaded in turns by the same client (Poisson, about 256 streams in flight, TTFT 60 ms and ITL 100 ms injected).
Prints per run and per arm the mock's own account of how late its chunks left (GET /atlas_mock/timing: p99, max)
and the TTFT error the client measured (p99, max) against the injected 60 ms.

    .venv/bin/python benchmarks/mock_gc.py [--pairs 8]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import urllib.request
from pathlib import Path

from atlas.config import LoadPoint
from atlas.engines.mock.engine import MockEngine
from atlas.engines.mock.server import MockOptions
from atlas.knobs import LoadMode
from atlas.loadgen import run_load, run_sync
from atlas.metrics import summarize_load, ttft_ms

TTFT_MS, ITL_MS = 60.0, 100.0
UNFROZEN = ("import sys, atlas.engines.mock.server as m\n"
            "async def _none(app): pass\n"
            "m._freeze_heap = _none\n"
            "m.main(sys.argv[1:])\n")


class UnfrozenMock(MockEngine):
    """The mock as Atlas starts it, but run through UNFROZEN: its heap-freezing hook a no-op (the before arm)."""

    def __init__(self, opts: MockOptions, log_path: Path) -> None:
        super().__init__(opts, log_path)
        shipped = self._argv_for
        assert shipped is not None
        self._argv_for = lambda port: [sys.executable, "-c", UNFROZEN, *shipped(port)[3:]]
        self.argv = self._argv_for(self.port)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pairs", type=int, default=8)
    args = ap.parse_args()
    opts = MockOptions(ttft_ms=TTFT_MS, itl_ms=ITL_MS)
    logs = tempfile.TemporaryDirectory()
    servers = {"unfrozen": UnfrozenMock(opts, Path(logs.name) / "unfrozen.log"),
               "frozen": MockEngine(opts, Path(logs.name) / "frozen.log")}
    lp = LoadPoint(mode=LoadMode.POISSON, rate_rps=132.0, num_requests=520, output_tokens=20, min_requests=4,
                   min_duration_s=0.1, repeats=1)
    rows: dict[str, list[dict]] = {arm: [] for arm in servers}  # type: ignore[type-arg]
    try:
        for eng in servers.values():
            eng.start()
        for i in range(args.pairs):
            for arm in (("unfrozen", "frozen") if i % 2 == 0 else ("frozen", "unfrozen")):
                url = servers[arm].base_url
                urllib.request.urlopen(url + "/atlas_mock/timing").read()  # its account from here on
                run = run_sync(run_load(url, "mock", lp, procs=1))
                mock = json.loads(urllib.request.urlopen(url + "/atlas_mock/timing").read())
                c = summarize_load(run, intervals=False).client
                err = sorted(ttft_ms(r) - TTFT_MS for r in run.records if r.status == "ok")
                row = {"mock99": mock["p99"], "mockmax": mock["max"], "ttft99": err[int(0.99 * (len(err) - 1))],
                       "ttftmax": err[-1], "bound": c.client_bound is not None}
                rows[arm].append(row)
                print(f"{i:2d} {arm:8s} mock's lateness p99 {row['mock99']:.2f} / max {row['mockmax']:.1f} ms, "
                      f"TTFT error p99 {row['ttft99']:+.2f} / max {row['ttftmax']:+.1f} ms"
                      f"{', client-bound' if row['bound'] else ''}", flush=True)
    finally:
        for eng in servers.values():
            eng.stop()
        logs.cleanup()
    for arm, rs in rows.items():
        print(f"{arm}: mock's lateness max median {statistics.median(r['mockmax'] for r in rs):.1f} ms, worst "
              f"{max(r['mockmax'] for r in rs):.1f}; TTFT error p99 median "
              f"{statistics.median(r['ttft99'] for r in rs):+.2f} ms, max median "
              f"{statistics.median(r['ttftmax'] for r in rs):+.1f}, worst {max(r['ttftmax'] for r in rs):+.1f} ms; "
              f"client-bound runs {sum(r['bound'] for r in rs)}")


if __name__ == "__main__":
    main()
