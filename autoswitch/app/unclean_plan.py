"""Guided unclean recovery, the pure plan (`admin unclean-recover`, docs/operations.md).

When no replica holding every acknowledged message survives, an operator must pick one of the
live replicas to become master, and everything the others hold beyond their common point with
it is cut. The plan says, for each live replica, how many acknowledged messages that choice
loses, from the replicas' own record digests (the ``LogRanges`` cut at one record per range):

- a record is *acknowledged* when it ends at or below ``confirm`` (the highest confirmOffset any
  replica reported to the controllers: what consumers could see);
- where live replicas hold different records at one position, the one written at the higher
  MasterEpoch is the acknowledged log's (a later master overwrote the older write);
- choosing X loses every acknowledged record some live replica holds that X does not hold (the
  same record: same position, epoch and digest);
- ``unrecoverable_bytes``: acknowledged bytes (up to ``confirm``) that no live replica holds at
  all, lost whatever the choice: every choice's ``lost_acked_bytes`` counts them, and its
  ``loses`` line says so beside the messages the other replicas hold.

The proposal is the replica that loses least (then the longest log, then the lowest brokerId).
The token names the plan's inputs: ``--confirm TOKEN`` carries out exactly this plan, and is
refused once any replica's log or the group changed. It starts with the controllers' state the
plan read (``<MasterEpoch>.<syncStateSetEpoch>.<digest>``): the controllers themselves refuse the
election, when it commits, unless the group still has no master at exactly those epochs
(``recovery_token_state``), so a master elected while the plan was computed is never deposed.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

Record = tuple[int, int, int, int]       # (epoch, start, end, digest): one LogRanges range = one record


@dataclass(frozen=True)
class ReplicaLog:
    broker_id: int
    address: str
    log_end: int
    last_epoch: int
    clean: bool
    in_sync: bool
    records: Sequence[Record]            # from the plan's common start, in order


@dataclass(frozen=True)
class Choice:
    broker_id: int
    log_end: int
    last_epoch: int
    lost_acked: int                      # acknowledged messages a live replica holds, lost if this one is chosen
    lost_first: list[int]                # their positions (the first few)
    truncates: dict[int, tuple[int, int]]   # other replica -> (cut at, bytes dropped): quarantined first
    lost_acked_bytes: int = 0            # their bytes, plus the unrecoverable bytes every choice loses


@dataclass
class Plan:
    group: str
    master_epoch: int
    confirm: int
    start: int                           # where the replicas' logs were compared from
    choices: list[Choice]
    proposal: int | None
    unrecoverable_bytes: int
    token: str
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {"group": self.group, "master_epoch": self.master_epoch, "confirm_offset": self.confirm,
                "compared_from": self.start, "proposal": self.proposal, "token": self.token,
                "unrecoverable_acked_bytes": self.unrecoverable_bytes, "notes": self.notes,
                "choices": [{"broker_id": c.broker_id, "log_end": c.log_end, "last_epoch": c.last_epoch,
                             "lost_acked_messages": c.lost_acked, "lost_acked_bytes": c.lost_acked_bytes,
                             "loses": _loses(c, self.unrecoverable_bytes), "lost_first_offsets": c.lost_first,
                             "cuts": "; ".join(f"broker {b} from {at} ({n} B)" for b, (at, n) in c.truncates.items())
                             or "nothing",
                             "truncates": {str(b): {"from": at, "bytes": n} for b, (at, n) in c.truncates.items()}}
                            for c in self.choices]}


def _loses(c: Choice, unrecoverable: int) -> str:
    """One line per choice that agrees with the notes: what a live replica holds and this choice
    drops, in messages and bytes, and what no choice can save (a row said 0 messages lost while
    the notes said bytes were lost whatever the choice: issue 64, item 8)."""
    held = f"{c.lost_acked} acknowledged messages ({c.lost_acked_bytes - unrecoverable} B) other replicas hold"
    if not unrecoverable:
        return held if c.lost_acked else "no acknowledged message"
    return f"{held}, and the {unrecoverable} unrecoverable bytes" if c.lost_acked else (
        f"only the {unrecoverable} unrecoverable bytes")


def token_of(group: str, master_epoch: int, confirm: int, replicas: Mapping[int, ReplicaLog],
             sync_state_set_epoch: int = 0) -> str:
    """The plan's inputs: the controllers' epochs in clear (they check them when the election
    commits), the rest hashed: any change of a log, the group's epochs or the confirmOffset gives
    another token."""
    doc = [group, master_epoch, sync_state_set_epoch, confirm,
           [[b, r.log_end, r.last_epoch, list(r.records[-1]) if r.records else None]
            for b, r in sorted(replicas.items())]]
    digest = hashlib.sha256(json.dumps(doc, separators=(",", ":")).encode()).hexdigest()[:16]
    return f"{master_epoch}.{sync_state_set_epoch}.{digest}"


def plan(group: str, master_epoch: int, confirm: int, start: int, replicas: Mapping[int, ReplicaLog],
         max_listed: int = 10, sync_state_set_epoch: int = 0) -> Plan:
    # the acknowledged log, position by position: the record of the highest epoch among the live ones
    truth: dict[int, Record] = {}
    for r in replicas.values():
        for rec in r.records:
            if rec[2] <= confirm:
                cur = truth.get(rec[1])
                if cur is None or rec[0] > cur[0]:
                    truth[rec[1]] = rec
    held_to = max((rec[2] for rec in truth.values()), default=start)
    unrecoverable = max(0, confirm - max(held_to, start))
    choices = []
    for b, x in sorted(replicas.items()):
        mine = set(x.records)
        lost = sorted(pos for pos, rec in truth.items() if rec not in mine)
        truncates = {}
        for ob, other in sorted(replicas.items()):
            if ob == b:
                continue
            cut = _common_end(x.records, other.records, start)
            if cut < other.log_end:
                truncates[ob] = (cut, other.log_end - cut)
        lost_bytes = sum(truth[pos][2] - truth[pos][1] for pos in lost)
        choices.append(Choice(b, x.log_end, x.last_epoch, len(lost), lost[:max_listed], truncates,
                              lost_bytes + unrecoverable))
    best = min(choices, key=lambda c: (c.lost_acked, -c.log_end, c.broker_id), default=None)
    notes = []
    if unrecoverable:
        notes.append(f"{unrecoverable} acknowledged bytes (up to confirmOffset {confirm}) are on no live replica: "
                     f"lost whatever the choice, counted in every choice's lost_acked_bytes (how many messages "
                     f"they were is unknown: no live replica holds their records)")
    return Plan(group, master_epoch, confirm, start, choices, best.broker_id if best else None, unrecoverable,
                token_of(group, master_epoch, confirm, replicas, sync_state_set_epoch), notes)


def _common_end(a: Sequence[Record], b: Sequence[Record], start: int) -> int:
    """Where two logs compared from ``start`` stop holding the same records."""
    end = start
    for ra, rb in zip(a, b, strict=False):
        if ra != rb:
            break
        end = ra[2]
    return end
