"""Progress for waits longer than a second: a line on stderr each second saying what the command
waits for and how long it has left, so a user never stares at a silent terminal. Only when
stderr is a terminal (or ``force``); never on stdout, which may be JSON."""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Awaitable
from typing import TypeVar

T = TypeVar("T")
FIRST_AFTER_S = 1.0
EVERY_S = 1.0


async def with_progress(work: Awaitable[T], what: str, deadline_s: float, force: bool = False) -> T:
    """Await ``work``; after a second, report on stderr every second until it ends."""
    show = force or sys.stderr.isatty()
    task = asyncio.ensure_future(work)
    if not show:
        return await task
    t0 = time.monotonic()
    done, _ = await asyncio.wait({task}, timeout=FIRST_AFTER_S)
    while not done:
        waited = time.monotonic() - t0
        print(f"... {what}: {waited:.0f} s, at most {max(0.0, deadline_s - waited):.0f} s more", file=sys.stderr,
              flush=True)
        done, _ = await asyncio.wait({task}, timeout=EVERY_S)
    return task.result()
