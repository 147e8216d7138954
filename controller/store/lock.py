"""The leader lock of a store backend, sans-IO: SOFARegistry's ``distribute_lock`` protocol.

One row per (data_center, lock_name): ``owner, duration, term, term_duration, gmt_create,
gmt_modified``. Times are the database server's clock (milliseconds), never a controller's: two
controllers whose clocks disagree still agree on whether the lock expired.

- no row: compete by INSERT (term 1); the primary key lets exactly one insert win;
- the owner renews: ``term_duration + 1, gmt_modified = now`` where owner, term and term_duration
  still match and the lock has not expired (a renewal that lost a race changes nothing);
- anyone, once the lock expired: compete by UPDATE, ``term + 1, term_duration = 0`` where term and
  term_duration are the ones it read (only one competitor's update matches);
- force refresh: the owner renews where owner and term match, whatever term_duration says (its
  own earlier renewal may have landed after a client-side timeout);
- an observer never competes.

The term is the fencing token: every log write re-checks ``owner = me AND term = my term AND not
expired`` inside its transaction, so once another controller's compete-update committed, the
deposed leader cannot commit anything (docs/controller.md, "Store backends").

``LeaderLease`` is this node's own belief: it leads until ``lease_ms`` minus a margin after the
moment it *sent* its last successful renewal. The store judged that renewal at or after that
moment, so the store cannot hand the lock to anyone else before the belief ends (clock rates
agree to well within the margin)."""

from __future__ import annotations

import enum
from dataclasses import dataclass

# The share of the lease a leader gives up to clock-rate differences between it and the database.
LEASE_MARGIN_FRACTION = 0.1


@dataclass(frozen=True)
class LockRow:
    owner: str
    duration_ms: int
    term: int
    term_duration: int
    gmt_modified_ms: int        # the database's clock

    def expired(self, db_now_ms: int) -> bool:
        return db_now_ms > self.gmt_modified_ms + self.duration_ms


class Step(enum.Enum):
    COMPETE_INSERT = "compete_insert"
    RENEW = "renew"
    COMPETE_UPDATE = "compete_update"
    FOLLOW = "follow"


def decide(row: LockRow | None, me: str, db_now_ms: int, observer: bool) -> Step:
    """What a node does after reading the lock row (the write re-checks its own conditions)."""
    if observer:
        return Step.FOLLOW
    if row is None:
        return Step.COMPETE_INSERT
    if row.owner == me and not row.expired(db_now_ms):
        return Step.RENEW
    if row.expired(db_now_ms):
        return Step.COMPETE_UPDATE
    return Step.FOLLOW


@dataclass(frozen=True)
class LockOutcome:
    """What a lock round ended with: the row as the store holds it after the round (None: no
    row) and whether this node holds the lock now, counted from ``sent_at_ms`` (local clock,
    taken before the round's first statement)."""

    row: LockRow | None
    holds: bool
    sent_at_ms: int


class LeaderLease:
    """This node's belief about leadership, fed lock outcomes and a clock (milliseconds)."""

    def __init__(self, me: str, lease_ms: int) -> None:
        self.me = me
        self.lease_ms = lease_ms
        self.term = 0                   # the newest term seen (ours or another owner's)
        self.owner: str | None = None   # the newest owner seen
        self._held_term = 0             # the term we hold, 0 = none
        self._until_ms = 0

    def observe(self, out: LockOutcome) -> tuple[bool, bool]:
        """Feed one lock round; returns (became leader, stopped leading)."""
        was = self._held_term
        if out.row is not None:
            self.term = max(self.term, out.row.term)
            self.owner = out.row.owner
        if out.holds and out.row is not None and out.row.owner == self.me:
            self._held_term = out.row.term
            self._until_ms = out.sent_at_ms + int(self.lease_ms * (1 - LEASE_MARGIN_FRACTION))
        elif was:
            self._held_term = 0
        became = self._held_term != 0 and self._held_term != was
        stopped = was != 0 and self._held_term != was
        return became, stopped

    def expire(self, now_ms: int) -> bool:
        """Stop leading once the lease ran out without a renewal; True if that happened now."""
        if self._held_term and now_ms >= self._until_ms:
            self._held_term = 0
            return True
        return False

    def leading(self, now_ms: int) -> int:
        """The term this node leads in at ``now_ms``, 0 if none."""
        return self._held_term if self._held_term and now_ms < self._until_ms else 0

    def resign(self) -> None:
        self._held_term = 0


class SilenceWatch:
    """A candidate's view of a leader that renews by writing its leader key (etcd): the key's
    (create, mod) revision pair changes with every renewal. Once the pair stayed the same for
    ``lease_ms`` of the candidate's own clock, counted from the moment a read that RETURNED it
    ended, the leader has not renewed for at least ``lease_ms`` of its own time (its renewal was
    sent before that read was served), so its belief (``LeaderLease``, ``lease_ms`` minus the
    margin after it sent that renewal) has ended and the key may be taken away; the removal
    compares the mod revision, so a renewal that landed meanwhile keeps the leader."""

    def __init__(self, lease_ms: int) -> None:
        self.lease_ms = lease_ms
        self._seen: tuple[int, int] | None = None
        self._since_ms = 0

    def observe(self, create_rev: int, mod_rev: int, returned_at_ms: int) -> bool:
        """Feed one read of the leader key (``returned_at_ms``: local clock once it returned);
        True when the leader has been silent for longer than ``lease_ms``."""
        if self._seen != (create_rev, mod_rev):
            self._seen, self._since_ms = (create_rev, mod_rev), returned_at_ms
            return False
        return returned_at_ms - self._since_ms > self.lease_ms

    def reset(self) -> None:
        self._seen = None
