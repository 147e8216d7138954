"""The pure parts of the graceful handover and the wait helper it relies on."""

from __future__ import annotations

import asyncio

from autoswitch.broker.replicas.handover import pick_target

from autoswitch.base.waits import wait_event


def test_pick_target_prefers_the_most_caught_up_connected_in_sync_slave():
    sss = frozenset({1, 2, 3})
    assert pick_target(1, sss, {2: 100, 3: 250}, None) == 3
    assert pick_target(1, sss, {2: 250, 3: 250}, None) == 2           # a tie: the lower brokerId
    assert pick_target(1, sss, {2: 100, 3: -1}, None) == 2            # 3 is not connected
    assert pick_target(1, sss, {2: 100, 3: 250, 4: 999}, None) == 3   # 4 is not in sync
    assert "no connected in-sync slave" in pick_target(1, frozenset({1}), {4: 10}, None)


def test_pick_target_checks_a_named_target():
    sss = frozenset({1, 2, 3})
    assert pick_target(1, sss, {2: 5, 3: 9}, 2) == 2
    assert "is this master" in pick_target(1, sss, {2: 5}, 1)
    assert "not in the SyncStateSet" in pick_target(1, sss, {4: 5}, 4)
    assert "not connected" in pick_target(1, sss, {2: -1}, 2)


def test_wait_event_keeps_a_cancellation_that_arrives_with_the_event():
    """CPython 3.11's wait_for swallows a cancel that lands as the awaited event fires (gh-86296);
    a loop built on it never stops. wait_event must propagate it every time."""

    async def run() -> None:
        for _ in range(200):
            ev = asyncio.Event()

            async def loop(ev: asyncio.Event) -> None:
                while True:
                    await wait_event(ev, 10.0)
                    ev.clear()

            task = asyncio.ensure_future(loop(ev))
            await asyncio.sleep(0)
            ev.set()           # the wake-up and the cancel in the same loop iteration
            task.cancel()
            done, _ = await asyncio.wait({task}, timeout=5)
            assert done and task.cancelled()

        assert await wait_event(asyncio.Event(), 0.01) is False
        ev = asyncio.Event()
        ev.set()
        assert await wait_event(ev, 0) is True

    asyncio.run(run())
