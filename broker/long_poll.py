"""Long polling for Consume: wake waiting consumers when confirmOffset moves.

A consumer that has caught up would otherwise ask again at once, and every empty or tiny reply
costs the broker a whole RPC (~150 us in Python gRPC): at a producer's pace that is a busy loop.
Kafka answers a fetch when ``fetch.min.bytes`` are there or after ``fetch.max.wait.ms``; RocketMQ
suspends a pull until messages arrive. Here a Consume may ask for ``min_count`` messages within
``max_wait_ms``; the store calls ``pulse`` whenever confirmOffset advances, and each waiter
re-checks its condition (one index entry read) on that wake-up.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from autoswitch.base.waits import wait_event


class WakeSignal:
    """Wakes everything waiting on ``pulse`` (confirmOffset advanced, the role changed); each
    waiter re-checks its own condition. At most ``max_waiters`` wait at once (a long poll holds
    an RPC slot): past that, ``wait_until`` returns at once."""

    def __init__(self, max_waiters: int) -> None:
        self.max_waiters = max_waiters
        self.waiting = 0
        self._event = asyncio.Event()

    def pulse(self) -> None:
        if self.waiting:
            ev, self._event = self._event, asyncio.Event()
            ev.set()

    def wake_all(self) -> None:
        """Role changes and shutdown: waiters re-check (and find they must answer)."""
        ev, self._event = self._event, asyncio.Event()
        ev.set()

    async def wait_until(self, ready: Callable[[], bool], timeout_s: float) -> None:
        """Return when ``ready()`` is true or ``timeout_s`` passed (or no slot is free)."""
        if timeout_s <= 0 or ready() or self.waiting >= self.max_waiters:
            return
        deadline = time.monotonic() + timeout_s
        self.waiting += 1
        try:
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    return
                if not await wait_event(self._event, left):
                    return
                if ready():
                    return
        finally:
            self.waiting -= 1
