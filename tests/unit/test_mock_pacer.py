"""The mock server's pacer: every wait returns at or after its time, soon after it, whatever the order the
waits were asked in, and a cancelled wait (a client gone) does not stop the others."""

import asyncio
import random
import time

from atlas.engines.mock.server import Pacer


def test_waits_end_at_their_times_and_a_cancelled_one_is_dropped():
    async def main() -> tuple[list[float], bool]:
        pacer = Pacer()
        start = time.perf_counter()
        rng = random.Random(0)
        # deadlines asked out of order, some within the spin window, some beyond it, one already past
        due = [start + rng.uniform(-0.001, 0.06) for _ in range(200)]
        late: list[float] = []

        async def wait(t: float) -> None:
            await pacer.at(t)
            late.append(time.perf_counter() - t)

        gone = asyncio.ensure_future(pacer.at(start + 0.03))
        tasks = [asyncio.ensure_future(wait(t)) for t in due]
        await asyncio.sleep(0.01)
        gone.cancel()
        await asyncio.gather(*tasks)
        return late, gone.cancelled()

    late, cancelled = asyncio.run(main())
    assert cancelled and len(late) == 200
    assert min(late) >= 0.0  # never early
    # spun through its last 2 ms, a wait ends within a fraction of a millisecond of its time on a quiet host;
    # the median allows for a shared CI machine
    assert sorted(late)[100] < 0.002, sorted(late)[100]


def test_the_mock_freezes_its_start_up_heap_before_it_serves():
    """Its collector's full passes then skip what start-up made (a 77.5 ms one had delayed every chunk due)."""
    import gc

    from aiohttp.test_utils import TestServer

    from atlas.engines.mock.server import MockOptions, MockServer

    async def main() -> int:
        server = TestServer(MockServer(MockOptions()).app())
        await server.start_server()
        try:
            return gc.get_freeze_count()
        finally:
            await server.close()

    gc.unfreeze()
    try:
        assert asyncio.run(main()) > 0
    finally:
        gc.unfreeze()
