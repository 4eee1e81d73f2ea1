"""The load client's garbage collector, kept out of the measured window.

Python's cyclic collector stops the whole process while it runs. In a load client that holds the interpreter's
whole heap (Atlas, aiohttp, pydantic, numpy...) a full collection took 36-78 ms on the 2-core development host,
and it fired inside 5 of 16 runs of a 520-request, 256-stream point, each of which the client then sent late
(send lateness p99 24-58 ms) and marked client-bound (benchmarks/client_gc.py). So for the length of a run each
client process collects once, freezes what it holds (gc.freeze: never scanned again, as vLLM's
benchmark_serving does) and turns the automatic collector off. A run that succeeds leaves no cyclic garbage (0
objects over 1,000 requests), but a failed request does (81 objects each for a refused connection: the
exception's traceback and frames), so `relieve()`, called as each request ends, collects the objects made since
the last collection once they pass CHECK_LIMIT: memory stays bounded on a run whose requests all fail, at the
cost of a pause (about 100 ms per 750,000 objects) that the client check sees like any other."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

CHECK_LIMIT = 1_000_000  # objects the collector tracks, allocated net since its last collection


@contextmanager
def quiet_gc() -> Iterator[None]:
    """Collect, freeze and stop the automatic collector for the block; the collector's state is put back after,
    whatever the block raised."""
    was_enabled = gc.isenabled()
    gc.collect()
    gc.freeze()
    gc.disable()
    try:
        yield
    finally:
        gc.unfreeze()
        if was_enabled:
            gc.enable()


def relieve() -> int:
    """Inside quiet_gc: collect the youngest generation once it holds CHECK_LIMIT objects (cheap test otherwise).
    Returns the unreachable objects found (0 when nothing ran)."""
    if gc.isenabled() or gc.get_count()[0] < CHECK_LIMIT:
        return 0
    return gc.collect(0)
