"""base/waits.Deadlines: one loop timer for the timeouts of many futures (the master's writes
waiting for replica acks)."""

from __future__ import annotations

import asyncio

from autoswitch.base.waits import Deadlines


def test_a_future_not_done_by_its_deadline_times_out_and_the_others_do_not():
    async def main() -> None:
        loop = asyncio.get_running_loop()
        d = Deadlines(max_entries=100)
        slow, quick, later = loop.create_future(), loop.create_future(), loop.create_future()
        d.add(slow, 0.05)
        d.add(quick, 0.05)
        d.add(later, 30)
        quick.set_result("acked")
        await asyncio.wait({slow}, timeout=5)       # bounds the test; a wait does not cancel
        assert isinstance(slow.exception(), TimeoutError)
        assert quick.result() == "acked"
        assert not later.done()                     # its own deadline is far off
        d.close()
        assert len(d) == 0 and not later.done()     # close stops the timer; the owner finishes them
        later.cancel()

    asyncio.run(main())


def test_an_earlier_deadline_added_later_is_honoured():
    async def main() -> None:
        loop = asyncio.get_running_loop()
        d = Deadlines(max_entries=100)
        far, near = loop.create_future(), loop.create_future()
        d.add(far, 30)
        d.add(near, 0.02)
        await asyncio.wait({near}, timeout=5)
        assert isinstance(near.exception(), TimeoutError) and not far.done()
        d.close()
        far.cancel()

    asyncio.run(main())


def test_finished_entries_are_dropped_so_the_heap_stays_bounded():
    async def main() -> None:
        loop = asyncio.get_running_loop()
        d = Deadlines(max_entries=8)
        live = []
        for i in range(1000):
            f = loop.create_future()
            d.add(f, 30)
            if i % 100 == 0:
                live.append(f)              # a few stay pending, out of order
            else:
                f.set_result(None)
            assert len(d) <= 2 * 8 + len(live)
        d.close()
        for f in live:
            f.cancel()

    asyncio.run(main())
