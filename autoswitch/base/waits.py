"""Bounded waits that never swallow a cancellation.

On Python 3.11 ``asyncio.wait_for(event.wait(), t)`` loses a cancellation that arrives in the same
loop iteration as the event (CPython gh-86296): the task goes on waiting, and a loop stopped by
``task.cancel()`` never stops (a broker hung on SIGTERM this way when a role change woke its route
registrar as it was cancelled). ``asyncio.timeout`` has no such window; every periodic loop uses it
through this helper.
"""

from __future__ import annotations

import asyncio
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


def time_out(fut: asyncio.Future[Any]) -> None:
    """A timer's callback: ``fut`` fails with TimeoutError unless it is done (one timer on the
    future itself costs less than ``asyncio.wait_for`` on a path taken per request)."""
    if not fut.done():
        fut.set_exception(TimeoutError())


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
