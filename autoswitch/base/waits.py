"""Bounded waits that never swallow a cancellation.

On Python 3.11 ``asyncio.wait_for(event.wait(), t)`` loses a cancellation that arrives in the same
loop iteration as the event (CPython gh-86296): the task goes on waiting, and a loop stopped by
``task.cancel()`` never stops (a broker hung on SIGTERM this way when a role change woke its route
registrar as it was cancelled). ``asyncio.timeout`` has no such window; every periodic loop uses it
through this helper.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import math
from collections.abc import Iterable
from typing import Any


async def wait_event(event: asyncio.Event, timeout_s: float) -> bool:
    """Wait until ``event`` is set (True) or ``timeout_s`` passed (False); cancellation propagates."""
    if event.is_set():
        return True
    try:
        async with asyncio.timeout(max(0.0, timeout_s)):
            await event.wait()
    except TimeoutError:
        return False
    return True


def cancellation_is_ours() -> bool:
    """Inside ``except asyncio.CancelledError``: True when someone cancelled the running task
    (re-raise), False when an awaited call was cancelled under it (a grpc.aio channel closed
    cancels the calls on it), which the task may treat as that call's failure and go on."""
    task = asyncio.current_task()
    return task is None or task.cancelling() > 0


def time_out(fut: asyncio.Future[Any]) -> None:
    """``fut`` fails with TimeoutError unless it is done."""
    if not fut.done():
        fut.set_exception(TimeoutError())


class Deadlines:
    """Futures that fail with TimeoutError at their deadlines, under one loop timer for all.

    For a wait taken once per acknowledged request: ``asyncio.wait_for`` costs a task, and a timer
    per future (``loop.call_later``) a TimerHandle, a push onto the loop's heap (compared in
    Python) and a cancel. Here an entry is a tuple on our own heap; the futures that finished
    before their deadline are dropped from its head as new ones come (acks come in order, so the
    head is usually done), and all of them once the heap holds twice ``max_entries`` (the most
    futures the owner lets wait at once: so a sweep comes at most once per ``max_entries`` adds).
    """

    def __init__(self, max_entries: int) -> None:
        assert max_entries > 0
        self._heap: list[tuple[float, int, asyncio.Future[Any]]] = []
        self._seq = itertools.count()
        self._sweep_at = 2 * max_entries
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = math.inf

    def __len__(self) -> int:
        return len(self._heap)

    def add(self, fut: asyncio.Future[Any], timeout_s: float) -> None:
        """``fut`` fails with TimeoutError ``timeout_s`` from now unless it is done by then."""
        loop = fut.get_loop()
        at = loop.time() + timeout_s
        heap = self._heap
        while heap and heap[0][2].done():
            heapq.heappop(heap)
        if len(heap) >= self._sweep_at:
            heap[:] = [e for e in heap if not e[2].done()]
            heapq.heapify(heap)
        heapq.heappush(heap, (at, next(self._seq), fut))
        if at < self._timer_at:
            self._arm(loop, at)

    def _arm(self, loop: asyncio.AbstractEventLoop, at: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer = loop.call_at(at, self._fire, loop)
        self._timer_at = at

    def _fire(self, loop: asyncio.AbstractEventLoop) -> None:
        # The loop runs a timer up to its clock's resolution early: what it was armed for is due.
        due = max(loop.time(), self._timer_at)
        self._timer, self._timer_at = None, math.inf
        heap = self._heap
        while heap and (heap[0][0] <= due or heap[0][2].done()):
            time_out(heapq.heappop(heap)[2])
        if heap:
            self._arm(loop, heap[0][0])

    def close(self) -> None:
        """Stop the timer; the futures left are the owner's to finish."""
        if self._timer is not None:
            self._timer.cancel()
        self._timer, self._timer_at = None, math.inf
        self._heap.clear()


async def cancel_and_wait(tasks: Iterable[asyncio.Task[Any] | None], timeout_s: float | None = None) -> None:
    """Cancel ``tasks`` (None entries are skipped) and wait until every one has ended, or at most
    ``timeout_s`` (a task that will not end must not hold a shutdown for ever). Their outcomes
    are dropped: a task that failed has logged itself. A cancellation of the caller while it
    waits still propagates. The one way the code base shuts tasks down."""
    live = [t for t in tasks if t is not None]
    for t in live:
        t.cancel()
    if not live:
        return
    if timeout_s is None:
        await asyncio.gather(*live, return_exceptions=True)
        return
    done, _ = await asyncio.wait(live, timeout=timeout_s)
    for t in done:
        if not t.cancelled():
            t.exception()       # retrieved: no "exception was never retrieved" at exit
