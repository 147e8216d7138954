"""Readiness waits for async tests: poll a condition, never sleep a fixed time.

The bound only ends a test that is really stuck, so it never drops below ``MIN_WAIT_S`` however
short the caller's estimate (a loaded 2-core machine stretches everything)."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable
from typing import Any

MIN_WAIT_S = 60.0


async def until(cond: Callable[[], Any], what: str, limit_s: float = MIN_WAIT_S, interval_s: float = 0.01) -> Any:
    """Poll ``cond`` (a function, or a coroutine function) until it returns something truthy;
    returns that value. AssertionError naming ``what`` if it never does."""
    loop = asyncio.get_running_loop()
    end = loop.time() + max(limit_s, MIN_WAIT_S)
    while True:
        v = cond()
        if inspect.isawaitable(v):
            v = await v
        if v:
            return v
        if loop.time() > end:
            raise AssertionError(f"never reached: {what}")
        await asyncio.sleep(interval_s)
