"""autoswitch/base/supervise.essential_task: a loop that ends while its owner runs ends the process."""

from __future__ import annotations

import asyncio

from structlog.testing import capture_logs

from autoswitch.base import supervise
from autoswitch.base.log import get_logger

LOG = get_logger("test")     # before capture_logs: the first get_logger configures structlog


def run_case(body, stop_first: bool = False) -> tuple[list[int], list[dict]]:
    exits: list[int] = []
    running = [True]

    async def main() -> None:
        task = asyncio.get_running_loop().create_task(body(), name="loop")
        supervise.essential_task(task, "loop", lambda: running[0], LOG, exits.append)
        await asyncio.sleep(0)
        if stop_first:
            running[0] = False
            task.cancel()
        elif body is forever:
            task.cancel()        # a cancellation that is not the owner's stop
        await asyncio.wait([task])
        await asyncio.sleep(0)   # done callbacks run on the next pass

    with capture_logs() as logs:
        asyncio.run(main())
    return exits, [e for e in logs if e["event"] == "essential_task_ended"]


async def forever() -> None:
    await asyncio.Event().wait()


async def raises() -> None:
    raise KeyError("bug")


async def returns() -> None:
    return None


def test_a_loop_that_raises_ends_the_process_with_one_critical_line():
    exits, lines = run_case(raises)
    assert exits == [supervise.EXIT_INTERNAL] == [70]
    assert len(lines) == 1 and lines[0]["log_level"] == "critical"
    assert (lines[0]["task"], lines[0]["how"]) == ("loop", "raised") and "bug" in lines[0]["error"]


def test_a_loop_that_returns_or_is_cancelled_by_someone_else_ends_the_process():
    for body, how in ((returns, "returned"), (forever, "cancelled")):
        exits, lines = run_case(body)
        assert exits == [70], how
        assert [e["how"] for e in lines] == [how]


def test_the_owners_stop_is_not_an_end():
    exits, lines = run_case(forever, stop_first=True)
    assert exits == [] and lines == []


def test_asyncio_runs_teardown_of_a_never_stopped_owner_is_not_an_end():
    """asyncio.run cancels every task left when its main coroutine returns: that is the process
    ending (an owner nobody stopped, a test that failed midway), not a loop ending under it."""
    exits: list[int] = []

    async def main() -> None:
        task = asyncio.get_running_loop().create_task(forever(), name="loop")
        supervise.essential_task(task, "loop", lambda: True, LOG, exits.append)
        await asyncio.sleep(0)

    with capture_logs() as logs:
        asyncio.run(main())
    assert exits == [] and not [e for e in logs if e["event"] == "essential_task_ended"]


def test_tasks_stop_ends_every_job_without_an_exit_and_starts_none_after():
    exits: list[int] = []
    ran: list[str] = []

    async def job(name: str) -> None:
        ran.append(name)
        await asyncio.Event().wait()

    async def main() -> None:
        tasks = supervise.Tasks(LOG, exits.append)
        a = tasks.spawn(job("a"), "a", essential=True)
        b = tasks.spawn(job("b"), "b")
        await asyncio.sleep(0)
        await tasks.stop()
        assert a is not None and b is not None and a.cancelled() and b.cancelled()
        assert tasks.spawn(job("late"), "late", essential=True) is None   # not started, never awaited
        await asyncio.sleep(0)

    asyncio.run(main())
    assert exits == [] and ran == ["a", "b"]
