"""Named crash points: the one way tests stop a process between two steps of a multi-step
operation (a crash-safe truncate, the broker registration sequence) to prove the next start
recovers.

Production code marks a step with ``crash_point("store.truncate_log_cut")``; that is a dictionary
lookup and nothing else unless a test armed the name with ``arm(name, action)``. Arming happens
only in test code: in-process (unit tests raise an exception), or in a child process started
through ``tests/crash_run.py``, which arms a point and then runs the normal CLI. Production code
reads no environment variable for this and never exits by itself.
"""

from __future__ import annotations

from collections.abc import Callable

_armed: dict[str, Callable[[str], None]] = {}


def crash_point(name: str) -> None:
    action = _armed.get(name)
    if action is not None:
        action(name)


def arm(name: str, action: Callable[[str], None]) -> None:
    _armed[name] = action


def disarm_all() -> None:
    _armed.clear()
