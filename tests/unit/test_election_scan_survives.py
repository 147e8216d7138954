"""The dead-master scan loop (ElectionScanner.run) outlives a CancelledError raised by a call it
awaits (a gRPC channel closed under it); only its own cancellation ends it."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from autoswitch.controller.server.election_scanner import ElectionScanner


class _Log:
    def __init__(self) -> None:
        self.errors: list[str] = []

    def error(self, event: str, **_kw) -> None:
        self.errors.append(event)

    def info(self, *_a, **_kw) -> None: ...

    def warning(self, *_a, **_kw) -> None: ...


def _scanner(query) -> tuple[ElectionScanner, _Log, list[int]]:
    log = _Log()
    scans: list[int] = []
    sm = SimpleNamespace(scan_interval_ms=lambda: 1, elect_retries=lambda: 3)
    liveness = SimpleNamespace(now_ms=lambda: int(asyncio.get_running_loop().time() * 1000),
                               crashed_master=lambda: False)
    s = ElectionScanner(sm=sm, liveness=liveness, proposer=SimpleNamespace(is_leader=True),
                        peers=SimpleNamespace(query=query), alerter=SimpleNamespace(), tls_config=None,
                        peer_query_timeout_s=0.1, rebalance_handover_timeout_ms=1000, log=log,
                        spawn=lambda coro, name: coro.close())

    async def scan_once() -> int:
        scans.append(1)
        return 0
    s.scan_once = scan_once     # type: ignore[method-assign]
    for name in ("gray_once", "drain_once", "rebalance_once", "maintenance_leadership_once"):
        setattr(s, name, lambda: None)
    return s, log, scans


def test_a_cancelled_call_inside_the_scan_is_logged_and_the_scan_goes_on():
    calls = 0

    async def query(keys, timeout_s):
        nonlocal calls
        calls += 1
        if calls == 1:
            raise asyncio.CancelledError()      # as grpc.aio raises when the channel closes
        return {}

    async def main() -> None:
        s, log, scans = _scanner(query)
        stopped = asyncio.Event()
        task = asyncio.create_task(s.run(stopped))
        for _ in range(500):
            if len(scans) >= 3:
                break
            await asyncio.sleep(0.01)
        stopped.set()
        await asyncio.wait_for(task, 5)
        assert len(scans) >= 3, "the scan stopped after the cancelled call"
        assert log.errors and log.errors[0] == "scan_failed"

    asyncio.run(main())


def test_cancelling_the_scan_ends_it():
    async def query(keys, timeout_s):
        await asyncio.sleep(10)
        return {}

    async def main() -> None:
        s, _log, _scans = _scanner(query)
        task = asyncio.create_task(s.run(asyncio.Event()))
        await asyncio.sleep(0.05)
        task.cancel()
        try:
            await asyncio.wait_for(task, 5)
        except asyncio.CancelledError:
            pass
        assert task.cancelled()

    asyncio.run(main())
