"""Maintenance drains, pure: which group's master the controller leader moves off a replica in
maintenance, to whom, and why a group must wait.

A master in maintenance (``SetMaintenance``) hands its mastership over through the graceful
handover (broker ``TransferMaster``: drain, compare-and-set election), like a preferred-master
move. The target is an in-sync replica outside maintenance that this node hears and that does
not report itself degraded or diverged: the preferred master when it qualifies, else the one
that reported the most data (lowest brokerId on a tie). With none, the group waits and says why:
its master is the only replica holding every acknowledged message, so it stays master (never an
acknowledged message or the group's availability for a cordon). At most ``max_in_flight`` groups
at a time; a group whose handover failed waits ``retry_after_ms``. docs/operations.md
"Maintenance mode".
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

DEFAULT_RETRY_AFTER_MS = 10_000
DEFAULT_MAX_IN_FLIGHT = 4


@dataclass(frozen=True)
class Member:
    broker_id: int
    in_sync: bool
    healthy: bool       # heard alive by this node, not degraded, not diverged
    max_offset: int     # its last report


@dataclass(frozen=True)
class DrainFacts:
    group: str
    master: int | None
    master_epoch: int
    master_address: str
    maintenance: frozenset[int]
    preferred: int                  # 0 = none
    members: tuple[Member, ...]

    @property
    def draining(self) -> bool:
        return self.master is not None and self.master in self.maintenance


@dataclass(frozen=True)
class DrainMove:
    group: str
    master: int
    master_epoch: int
    master_address: str
    to: int


def drain_target(f: DrainFacts) -> int | str:
    """The replica to hand ``f``'s master role to, or why there is none."""
    ok = [m for m in f.members if m.broker_id != f.master and m.in_sync and m.healthy
          and m.broker_id not in f.maintenance]
    if not ok:
        others = sorted(m.broker_id for m in f.members if m.broker_id != f.master and m.in_sync)
        if not others:
            return (f"broker {f.master} is the only replica holding every acknowledged message of {f.group} "
                    f"(SyncStateSet [{f.master}]): not drained; it stays master until a replica outside "
                    f"maintenance is in sync, then moves")
        return (f"no in-sync replica of {f.group} outside maintenance is alive and healthy (in sync: {others}, "
                f"in maintenance: {sorted(f.maintenance)}): not drained yet")
    pref = [m for m in ok if m.broker_id == f.preferred]
    if pref:
        return pref[0].broker_id
    return min(ok, key=lambda m: (-m.max_offset, m.broker_id)).broker_id


class DrainPlanner:
    def __init__(self, retry_after_ms: int = DEFAULT_RETRY_AFTER_MS,
                 max_in_flight: int = DEFAULT_MAX_IN_FLIGHT) -> None:
        assert retry_after_ms > 0 and max_in_flight > 0
        self.retry_after_ms = retry_after_ms
        self.max_in_flight = max_in_flight
        self.in_flight: set[str] = set()
        self.waiting: dict[str, str] = {}          # group -> why it is not drained (last plan)
        self._not_before: dict[str, int] = {}      # group -> no new attempt before (failed ones)

    def plan(self, facts: Iterable[DrainFacts], now_ms: int) -> list[DrainMove]:
        """The handovers to start now. Call ``done`` when each has ended."""
        moves: list[DrainMove] = []
        waiting: dict[str, str] = {}
        present = set()
        for f in sorted(facts, key=lambda x: x.group):
            present.add(f.group)
            if not f.draining or f.group in self.in_flight:
                continue
            assert f.master is not None
            target = drain_target(f)
            if isinstance(target, str):
                waiting[f.group] = target
                continue
            if now_ms < self._not_before.get(f.group, 0):
                waiting[f.group] = "the last handover failed; retried shortly"
                continue
            if len(self.in_flight) + len(moves) >= self.max_in_flight:
                waiting[f.group] = f"{self.max_in_flight} drains already running"
                continue
            moves.append(DrainMove(f.group, f.master, f.master_epoch, f.master_address, target))
        for g in [g for g, t in self._not_before.items() if g not in present or t <= now_ms]:
            del self._not_before[g]
        self.waiting = waiting
        self.in_flight.update(m.group for m in moves)
        return moves

    def done(self, group: str, handed_over: bool, now_ms: int) -> None:
        self.in_flight.discard(group)
        if not handed_over:
            self._not_before[group] = now_ms + self.retry_after_ms
