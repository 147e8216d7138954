"""Bounded waits that never swallow a cancellation.

On Python 3.11 ``asyncio.wait_for(event.wait(), t)`` loses a cancellation that arrives in the same
loop iteration as the event (CPython gh-86296): the task goes on waiting, and a loop stopped by
``task.cancel()`` never stops (a broker hung on SIGTERM this way when a role change woke its route
registrar as it was cancelled). ``asyncio.timeout`` has no such window; every periodic loop uses it
through this helper.
"""

from __future__ import annotations

import asyncio


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
