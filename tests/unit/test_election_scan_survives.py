"""The leader's loop (leader_loop.LeaderLoop.run: the dead-master scan and the master moves) outlives
a CancelledError raised by a call it awaits (a gRPC channel closed under it); only its own
cancellation ends it."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from autoswitch.controller.failover.liveness import ScanPlanner
from autoswitch.controller.server.leader_loop import LeaderLoop


class _Log:
    def __init__(self) -> None:
        self.errors: list[str] = []

    def error(self, event: str, **_kw) -> None:
        self.errors.append(event)

    def info(self, *_a, **_kw) -> None: ...

    def warning(self, *_a, **_kw) -> None: ...


def _loop(query) -> tuple[LeaderLoop, _Log, list[int], list[int]]:
    log = _Log()
    scans: list[int] = []
    jobs: list[int] = []

    async def scan_once() -> int:
        scans.append(1)
        return 0

    scanner = SimpleNamespace(planner=ScanPlanner(), scan_once=scan_once)
    sm = SimpleNamespace(scan_interval_ms=lambda: 1, elect_retries=lambda: 3)
    liveness = SimpleNamespace(now_ms=lambda: int(asyncio.get_running_loop().time() * 1000),
                               crashed_master=lambda: False)
    loop = LeaderLoop(scanner=scanner, jobs=(lambda: jobs.append(1),), sm=sm, liveness=liveness,
                      peers=SimpleNamespace(query=query), alerter=SimpleNamespace(), is_leader=lambda: True,
                      peer_query_timeout_s=0.1, log=log)
    return loop, log, scans, jobs


def test_a_cancelled_call_inside_the_scan_is_logged_and_the_loop_goes_on():
    calls = 0

    async def query(keys, timeout_s):
        nonlocal calls
        calls += 1
        if calls == 1:
            raise asyncio.CancelledError()      # as grpc.aio raises when the channel closes
        return {}

    async def main() -> None:
        loop, log, scans, jobs = _loop(query)
        stopped = asyncio.Event()
        task = asyncio.create_task(loop.run(stopped))
        for _ in range(500):
            if len(scans) >= 3:
                break
            await asyncio.sleep(0.01)
        stopped.set()
        await asyncio.wait_for(task, 5)
        assert len(scans) >= 3, "the scan stopped after the cancelled call"
        assert len(jobs) >= 2, "the master moves run after each scan"
        assert log.errors and log.errors[0] == "scan_failed"

    asyncio.run(main())


def test_cancelling_the_loop_ends_it():
    async def query(keys, timeout_s):
        await asyncio.sleep(10)
        return {}

    async def main() -> None:
        loop, _log, _scans, _jobs = _loop(query)
        task = asyncio.create_task(loop.run(asyncio.Event()))
        await asyncio.sleep(0.05)
        task.cancel()
        try:
            await asyncio.wait_for(task, 5)
        except asyncio.CancelledError:
            pass
        assert task.cancelled()

    asyncio.run(main())
