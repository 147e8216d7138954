"""The leader's periodic loop: one task per node that, every ``scan_interval_ms`` (and at once
after a master's session closed), runs the dead-master scan (election_scanner.py) and then the
master-move desks (master_moves.py: gray moves, drains, moves back to preferred masters) and the
maintenance hand-off of Raft leadership. Each job is a thin driver of its own; this module only
orders them and keeps the loop alive.

A master's closed session (crash-fast failover) wakes the scan at once and then every
FAST_RESCAN_S while a peer has not seen its own end of the session yet.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Sequence
from typing import TYPE_CHECKING, Any

from autoswitch.controller.server import sm_adapter

from autoswitch.base.log import EventLogger
from autoswitch.base.waits import cancellation_is_ours, wait_event

if TYPE_CHECKING:
    from autoswitch.controller.failover.peers import PeerLiveness
    from autoswitch.controller.server.alerts import Alerter
    from autoswitch.controller.server.election_scanner import ElectionScanner
    from autoswitch.controller.server.liveness_desk import LivenessDesk

# After a master's session closes the leader scans at once, then every FAST_RESCAN_S while a peer
# has not seen its own end of the session yet, at most MAX_FAST_RESCANS times (~0.5 s).
FAST_RESCAN_S = 0.025
MAX_FAST_RESCANS = 20
# A leader in maintenance that could not hand its leadership over tries again after this long.
LEAVE_RETRY_MS = 10_000


class MaintenanceLeadership:
    """A leader in maintenance hands Raft leadership to a member outside it (retried after
    LEAVE_RETRY_MS when no move happened)."""

    def __init__(self, *, is_leader: Callable[[], bool], in_maintenance: Callable[[], bool],
                 leave: Callable[[], Coroutine[Any, Any, None]], now_ms: Callable[[], int],
                 spawn: Callable[[Coroutine[Any, Any, None], str], None]) -> None:
        self.is_leader = is_leader
        self.in_maintenance = in_maintenance
        self.leave = leave
        self.now_ms = now_ms
        self.spawn = spawn
        self._leaving = False
        self._not_before = 0

    def once(self) -> bool:
        if not self.is_leader() or self._leaving or not self.in_maintenance():
            return False
        now = self.now_ms()
        if now < self._not_before:
            return False
        self._leaving = True
        self._not_before = now + LEAVE_RETRY_MS

        async def leave() -> None:
            try:
                await self.leave()
            finally:
                self._leaving = False

        self.spawn(leave(), "maintenance-leave-leadership")
        return True


class LeaderLoop:
    """``jobs``: what runs after each periodic scan, in order (each ``once()``)."""

    def __init__(self, *, scanner: ElectionScanner, jobs: Sequence[Callable[[], object]],
                 sm: sm_adapter.AppliedStateMachine, liveness: LivenessDesk, peers: PeerLiveness,
                 alerter: Alerter, is_leader: Callable[[], bool], peer_query_timeout_s: float,
                 log: EventLogger) -> None:
        self.scanner = scanner
        self.jobs = tuple(jobs)
        self.sm = sm
        self.liveness = liveness
        self.peers = peers
        self.alerter = alerter
        self.is_leader = is_leader
        self.peer_query_timeout_s = peer_query_timeout_s
        self.log = log
        self._wake = asyncio.Event()
        self._fast_rescans_left = 0

    def master_crashed(self, group: str, broker_id: int, epoch: int) -> None:
        """The liveness desk saw a master's session end: on the leader, scan now."""
        if not self.is_leader():
            return
        self._fast_rescans_left = MAX_FAST_RESCANS
        self._wake.set()
        self.alerter.emit("master_crashed", group, sm_adapter.wall_ms(), master=broker_id, epoch=epoch)

    async def run(self, stopped: asyncio.Event) -> None:
        """The loop, until ``stopped``."""
        planner = self.scanner.planner
        while not stopped.is_set():
            pause = min(self.sm.scan_interval_ms(), 1000) / 1000.0
            if self._fast_rescans_left > 0:
                pause = FAST_RESCAN_S
            woken = await wait_event(self._wake, pause)
            self._wake.clear()
            try:
                if planner.interval_ms != self.sm.scan_interval_ms():
                    planner.interval_ms = self.sm.scan_interval_ms()
                planner.max_retries = self.sm.elect_retries()
                if woken or self._fast_rescans_left > 0:
                    # a peer may not have seen its end of the session yet: ask again shortly
                    self._fast_rescans_left = max(0, self._fast_rescans_left - 1)
                    if await self.scanner.scan_once() > 0 or not self.liveness.crashed_master():
                        self._fast_rescans_left = 0
                    continue
                if not planner.due(self.liveness.now_ms()):
                    continue
                # An empty liveness query keeps GetMetaData's peer reachability current on every node.
                await self.peers.query([], self.peer_query_timeout_s)
                await self.scanner.scan_once()
                for job in self.jobs:
                    job()
            except asyncio.CancelledError:
                # Ours (the node stops) ends the loop; one raised by an awaited call (a gRPC
                # channel closed under it) must not: nothing else elects for this node.
                if stopped.is_set() or cancellation_is_ours():
                    raise
                self.log.error("scan_failed", reason="an awaited call was cancelled", exc_info=True)
            except Exception:
                self.log.error("scan_failed", exc_info=True)
