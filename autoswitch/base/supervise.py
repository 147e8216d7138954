"""Background loops that must run as long as their owner runs.

A loop that ends while its node still serves (an exception it did not expect, a cancellation that
was not its owner's, a plain return) leaves the node answering calls but no longer doing that
loop's job, and nothing says so: a controller whose dead-master scan had ended saw its master
crash and elected nobody (a grpc.aio call cancelled under the scan ended it; docs/CHANGELOG.md).
Such a loop is *essential*: when it ends before its owner stops, the process logs one critical
line naming the loop and why, and exits with EX_SOFTWARE (70), like a broker whose
ReplicasManager core raised. The service manager restarts it (an unclean restart), and the other
replicas or controller members serve meanwhile; a process that looks healthy but is not is
worse than one that is visibly restarting.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Coroutine
from typing import Any

from autoswitch.base.waits import cancel_and_wait

EXIT_INTERNAL = 70      # EX_SOFTWARE: a bug ended something that must not end
EXIT_IO_FAILURE = 74    # EX_IOERR: a failed fsync; the files' page cache can no longer be trusted

# How the process ends when a caller names no ``exit_process``: components deep inside a broker
# (the HA master and slave, the flusher) use this one; tests replace it to watch for the exit.
process_exit: Callable[[int], None] = os._exit


def essential_task(task: asyncio.Task[Any], name: str, running: Callable[[], bool], log: Any,
                   exit_process: Callable[[int], None] | None = None) -> None:
    """Watch ``task``: if it ends while ``running()`` still holds, log ``essential_task_ended``
    (critical) and call ``exit_process(EXIT_INTERNAL)`` (default: ``process_exit``). The owner's
    stop makes ``running()`` false before it cancels the task, so a stop never counts."""

    def ended(t: asyncio.Task[Any]) -> None:
        if not running() or _loop_torn_down(t.get_loop()):
            return
        if t.cancelled():
            how, exc = "cancelled", None
        else:
            exc = t.exception()
            how = "raised" if exc is not None else "returned"
        log.critical("essential_task_ended", task=name, how=how, error=repr(exc) if exc is not None else None,
                     exc_info=exc, action=f"exit {EXIT_INTERNAL}")
        (exit_process or process_exit)(EXIT_INTERNAL)

    task.add_done_callback(ended)


def _loop_torn_down(loop: asyncio.AbstractEventLoop) -> bool:
    """asyncio.run's teardown cancels every task left at once (an owner that was never stopped,
    a test that failed midway): an end then is the process's own, not a bug. While the process
    runs, its main task at least is alive and not being cancelled."""
    return all(t.done() or t.cancelling() for t in asyncio.all_tasks(loop))


class Tasks:
    """An owner's background jobs: finished ones are dropped as they end, ``stop`` cancels the rest
    and waits for them; an ``essential`` one that ends before ``stop`` ends the process."""

    def __init__(self, log: Any, exit_process: Callable[[int], None] | None = None) -> None:
        self.log = log
        self.exit_process = exit_process
        self._live: set[asyncio.Task[Any]] = set()
        self._stopping = False

    def spawn(self, coro: Coroutine[Any, Any, Any], name: str, *,
              essential: bool = False) -> asyncio.Task[Any] | None:
        """The task running ``coro``; None once ``stop`` has begun (a job asked for by a loop
        that is ending with its owner is not started: nothing would stop it)."""
        if self._stopping:
            coro.close()
            return None
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._live.add(task)
        task.add_done_callback(self._live.discard)
        if essential:
            essential_task(task, name, lambda: not self._stopping, self.log, self.exit_process)
        return task

    async def stop(self, timeout_s: float | None = None) -> None:
        self._stopping = True
        await cancel_and_wait(list(self._live), timeout_s)
