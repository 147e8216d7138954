"""Preferred masters, pure: which groups the controller leader moves back to their preferred
master, and why the others wait.

Kafka's ``auto.leader.rebalance.enable`` for broker groups, made gentle. A group qualifies while
it has a master, a preferred master (``SetPreferredMaster``) that is not the master, is in the
SyncStateSet (it acknowledged everything the master acknowledged: caught up), is heard by this
node, reports no slow disk or event loop and no digest difference, is not in maintenance, and
the master is heard too. After it has qualified for ``rebalance_delay_ms`` without a break (same
MasterEpoch), the leader asks the master for a graceful handover to the preferred one (broker
``TransferMaster``: drain, compare-and-set election). At most ``max_in_flight`` groups at a time
(``rebalance_max_in_flight``), none while more than half the cluster reports degraded (the gray
planner's storm); a group whose handover failed waits ``retry_after_ms``. Every group that
waits has its reason in ``waiting`` (logged and shown by ``admin explain``).
docs/controller.md "Preferred masters".
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

DEFAULT_RETRY_AFTER_MS = 60_000


@dataclass(frozen=True)
class GroupFacts:
    group: str
    master: int | None
    master_epoch: int
    master_address: str
    preferred: int             # 0 = none
    preferred_in_sync: bool    # in the SyncStateSet
    preferred_alive: bool      # this node hears it (and it has not crashed)
    master_alive: bool
    preferred_degraded: bool = False       # it reports a slow disk / event loop, or diverged digests
    preferred_maintenance: bool = False

    @property
    def wanted(self) -> bool:
        """A move back is wanted at all (a preferred master that is not the master)."""
        return self.master is not None and self.preferred != 0 and self.preferred != self.master

    def blocked(self) -> str:
        """Why the move cannot start now ("" = it could)."""
        p = self.preferred
        if self.preferred_maintenance:
            return f"preferred master {p} is in maintenance"
        if not self.preferred_alive:
            return f"preferred master {p} is not heard alive"
        if self.preferred_degraded:
            return f"preferred master {p} reports itself degraded (slow disk or event loop, or diverged digests)"
        if not self.preferred_in_sync:
            return f"preferred master {p} is not in the SyncStateSet (not caught up)"
        if not self.master_alive:
            return f"master {self.master} is not heard alive (a failover, not a move back, is due)"
        return ""

    @property
    def qualifies(self) -> bool:
        return self.wanted and not self.blocked()


class RebalancePlanner:
    def __init__(self, retry_after_ms: int = DEFAULT_RETRY_AFTER_MS) -> None:
        assert retry_after_ms > 0
        self.retry_after_ms = retry_after_ms
        self.in_flight: set[str] = set()
        self.waiting: dict[str, str] = {}                # group -> why it is not moved back now
        self._since: dict[str, tuple[int, int]] = {}     # group -> (MasterEpoch, qualified since)
        self._not_before: dict[str, int] = {}            # group -> no new attempt before (failed ones)

    def plan(self, facts: Iterable[GroupFacts], delay_ms: int, now_ms: int, max_in_flight: int = 1,
             paused: str = "") -> list[GroupFacts]:
        """The groups to hand back now (oldest qualified first). Call ``done`` when each handover
        has ended. ``paused``: why no move may start at all now ("" = they may)."""
        assert max_in_flight >= 1
        ready: list[tuple[int, str, GroupFacts]] = []
        present = set()
        waiting: dict[str, str] = {}
        for f in facts:
            present.add(f.group)
            if not f.wanted or f.group in self.in_flight:
                self._since.pop(f.group, None)
                continue
            why = f.blocked()
            if why:
                self._since.pop(f.group, None)
                waiting[f.group] = why
                continue
            since = self._since.get(f.group)
            if since is None or since[0] != f.master_epoch:
                self._since[f.group] = since = (f.master_epoch, now_ms)
            left = delay_ms - (now_ms - since[1])
            if left > 0:
                waiting[f.group] = f"preferred master {f.preferred} in sync for {now_ms - since[1]} ms of {delay_ms}"
            elif now_ms < self._not_before.get(f.group, 0):
                waiting[f.group] = f"the last handover failed; next try in {self._not_before[f.group] - now_ms} ms"
            else:
                ready.append((since[1], f.group, f))
        for g in [g for g in self._since if g not in present]:
            del self._since[g]
        for g in [g for g, t in self._not_before.items() if g not in present or t <= now_ms]:
            del self._not_before[g]
        ready.sort(key=lambda r: (r[0], r[1]))
        room = 0 if paused else max(0, max_in_flight - len(self.in_flight))
        moves = [f for _, _, f in ready[:room]]
        for _, g, _f in ready[room:]:
            waiting[g] = paused or f"{max_in_flight} moves back already running"
        self.waiting = waiting
        self.in_flight.update(f.group for f in moves)
        return moves

    def done(self, group: str, handed_over: bool, now_ms: int) -> None:
        self.in_flight.discard(group)
        self._since.pop(group, None)
        if not handed_over:
            self._not_before[group] = now_ms + self.retry_after_ms
