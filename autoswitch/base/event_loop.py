"""The event loop a server process runs on (``event_loop`` in its config).

``uvloop`` (the default): libuv's loop, whose transports, timers and callback queue are C; the
protocol code above it is the same asyncio code. A one-message write costs the master ~4-5 %
less CPU on it (bench/results/produce.md). ``asyncio``: the standard library's loop, for an
operator who meets a problem with uvloop or runs on a platform without its wheels. A process
asked for uvloop that cannot import it says so in a log line and runs on asyncio.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

from autoswitch.base.log import get_logger

EVENT_LOOPS = ("uvloop", "asyncio")
T = TypeVar("T")


def run(main: Coroutine[Any, Any, T], event_loop: str, **log_context: Any) -> T:
    """``asyncio.run(main)`` on the loop ``event_loop`` names (validated by the config)."""
    assert event_loop in EVENT_LOOPS, event_loop
    if event_loop == "uvloop":
        try:
            import uvloop
        except ImportError as e:
            get_logger("event_loop", **log_context).warning("event_loop_fallback", wanted="uvloop",
                                                           running="asyncio", reason=str(e))
        else:
            with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
                return runner.run(main)
    return asyncio.run(main)
