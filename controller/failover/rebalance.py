"""Preferred masters, pure: which group the controller leader moves back to its preferred master.

Kafka's ``auto.leader.rebalance.enable`` for broker groups. A group qualifies while it has a
master, a preferred master (``SetPreferredMaster``) that is not the master, is in the
SyncStateSet and is heard by this node, and the master is heard too. After it has qualified for
``rebalance_delay_ms`` without a break (same MasterEpoch), the leader asks the master for a
graceful handover to the preferred one (broker ``TransferMaster``: drain, compare-and-set
election). One group at a time; a group whose handover failed waits ``retry_after_ms`` before
it is tried again. docs/controller.md "Preferred masters".
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

    @property
    def qualifies(self) -> bool:
        return (self.master is not None and self.preferred != 0 and self.preferred != self.master
                and self.preferred_in_sync and self.preferred_alive and self.master_alive)


class RebalancePlanner:
    def __init__(self, retry_after_ms: int = DEFAULT_RETRY_AFTER_MS) -> None:
        assert retry_after_ms > 0
        self.retry_after_ms = retry_after_ms
        self.in_flight: str | None = None
        self._since: dict[str, tuple[int, int]] = {}     # group -> (MasterEpoch, qualified since)
        self._not_before: dict[str, int] = {}            # group -> no new attempt before (failed ones)

    def plan(self, facts: Iterable[GroupFacts], delay_ms: int, now_ms: int) -> GroupFacts | None:
        """The group to hand back now, or None. Call ``done`` when its handover has ended."""
        ready: list[tuple[int, str, GroupFacts]] = []
        present = set()
        for f in facts:
            present.add(f.group)
            if not f.qualifies:
                self._since.pop(f.group, None)
                continue
            since = self._since.get(f.group)
            if since is None or since[0] != f.master_epoch:
                self._since[f.group] = since = (f.master_epoch, now_ms)
            if now_ms - since[1] >= delay_ms and now_ms >= self._not_before.get(f.group, 0):
                ready.append((since[1], f.group, f))
        for g in [g for g in self._since if g not in present]:
            del self._since[g]
        for g in [g for g, t in self._not_before.items() if g not in present or t <= now_ms]:
            del self._not_before[g]
        if self.in_flight is not None or not ready:
            return None
        _, group, f = min(ready, key=lambda r: (r[0], r[1]))
        self.in_flight = group
        return f

    def done(self, group: str, handed_over: bool, now_ms: int) -> None:
        if self.in_flight == group:
            self.in_flight = None
        self._since.pop(group, None)
        if not handed_over:
            self._not_before[group] = now_ms + self.retry_after_ms
