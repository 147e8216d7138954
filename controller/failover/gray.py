"""Gray failover, pure: which group the controller leader moves off a degraded master (issue 32).

TiKV's PD moves leaders off slow stores before they fail; here a master that reports itself
degraded in its heartbeats (broker/health.py: its appends, fsyncs or event loop stayed slow past
their hysteresis) is asked for a graceful handover (broker ``TransferMaster``: drain, compare-and-
set election) to a healthy in-sync slave. The rules, each a guard against a move that helps no one:

* the master has been reported degraded for ``delay_ms`` without a break, in the same MasterEpoch
  (a second hysteresis on top of the broker's own);
* the target is alive, in the SyncStateSet, neither degraded nor diverged (never a move to a
  replica that is itself slow); the one with the most data wins, the lowest brokerId on a tie;
* at most one move per group per ``cooldown_ms``, counted from when this leader first saw the
  group's current MasterEpoch: a new leader (which remembers nothing) waits a whole cool-down
  too, so a leader change never allows a second move sooner;
* no move while more than half of the alive brokers of the cluster are degraded: a slow shared
  storage or an overloaded host pool makes every replica slow, and moving masters around it is a
  handover storm, not a cure (the scanner raises ``cluster_degraded`` instead);
* one move at a time over the whole cluster; a failed move waits ``retry_after_ms``.

docs/controller.md "Gray failover" has the operator's view.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

# A failed move (the master was fenced, the target fell behind) is tried again this much later:
# sooner than a preferred-master move, since the master stays slow meanwhile.
DEFAULT_RETRY_AFTER_MS = 10_000


@dataclass(frozen=True)
class Replica:
    broker_id: int
    alive: bool
    in_sync: bool
    degraded: tuple[str, ...] = ()     # the slow signals it reports ((): healthy)
    diverged: bool = False
    max_offset: int = 0

    @property
    def healthy_target(self) -> bool:
        return self.alive and self.in_sync and not self.degraded and not self.diverged


@dataclass(frozen=True)
class GroupHealth:
    group: str
    master: int | None
    master_epoch: int
    master_address: str
    replicas: tuple[Replica, ...]

    def master_replica(self) -> Replica | None:
        return next((r for r in self.replicas if r.broker_id == self.master), None)

    def target(self) -> Replica | None:
        ok = [r for r in self.replicas if r.broker_id != self.master and r.healthy_target]
        return min(ok, key=lambda r: (-r.max_offset, r.broker_id), default=None)


@dataclass(frozen=True)
class Move:
    group: str
    master: int
    master_epoch: int
    master_address: str
    to: int
    reasons: tuple[str, ...]


class GrayPlanner:
    def __init__(self, retry_after_ms: int = DEFAULT_RETRY_AFTER_MS) -> None:
        assert retry_after_ms > 0
        self.retry_after_ms = retry_after_ms
        self.in_flight: str | None = None
        self.storm = False                                  # more than half of the alive brokers degraded
        self._epoch_seen: dict[str, tuple[int, int]] = {}   # group -> (MasterEpoch, first seen)
        self._degraded: dict[str, tuple[int, int]] = {}     # group -> (MasterEpoch, master degraded since)
        self._not_before: dict[str, int] = {}               # group -> no new attempt before (failed ones)
        self.waiting: dict[str, str] = {}                    # group -> why its degraded master stays (status)

    def plan(self, groups: Iterable[GroupHealth], delay_ms: int, cooldown_ms: int, now_ms: int) -> Move | None:
        """The move to start now, or None. Call ``done`` when its handover has ended."""
        groups = list(groups)
        alive = degraded = 0
        for g in groups:
            for r in g.replicas:
                if r.alive:
                    alive += 1
                    degraded += bool(r.degraded)
        self.storm = alive > 0 and 2 * degraded > alive
        present = {g.group for g in groups}
        for table in (self._epoch_seen, self._degraded, self._not_before):
            for name in [n for n in table if n not in present]:
                del table[name]
        self.waiting = {}
        ready: list[tuple[int, str, Move]] = []
        for g in groups:
            seen = self._epoch_seen.get(g.group)
            if seen is None or seen[0] != g.master_epoch:
                self._epoch_seen[g.group] = seen = (g.master_epoch, now_ms)
            m = g.master_replica()
            if g.master is None or m is None or not m.alive or not m.degraded:
                self._degraded.pop(g.group, None)
                continue
            since = self._degraded.get(g.group)
            if since is None or since[0] != g.master_epoch:
                self._degraded[g.group] = since = (g.master_epoch, now_ms)
            target = g.target()
            why = self._why_not(g, target, since[1], seen[1], delay_ms, cooldown_ms, now_ms)
            if why:
                self.waiting[g.group] = why
                continue
            assert target is not None
            ready.append((since[1], g.group, Move(g.group, g.master, g.master_epoch, g.master_address,
                                                  target.broker_id, m.degraded)))
        if self.in_flight is not None or not ready:
            return None
        _, group, move = min(ready, key=lambda r: (r[0], r[1]))
        self.in_flight = group
        return move

    def _why_not(self, g: GroupHealth, target: Replica | None, degraded_since: int, epoch_since: int,
                 delay_ms: int, cooldown_ms: int, now_ms: int) -> str:
        if self.storm:
            return "cluster_degraded"
        if target is None:
            return "no_healthy_in_sync_slave"
        if now_ms - degraded_since < delay_ms:
            return "delay"
        if now_ms - epoch_since < cooldown_ms:
            return "cooldown"
        if now_ms < self._not_before.get(g.group, 0):
            return "retry_after_failure"
        if self.in_flight is not None:
            return "another_move_in_flight"
        return ""

    def done(self, group: str, moved: bool, now_ms: int) -> None:
        if self.in_flight == group:
            self.in_flight = None
        self._degraded.pop(group, None)
        if not moved:
            self._not_before[group] = now_ms + self.retry_after_ms
