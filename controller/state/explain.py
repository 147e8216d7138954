"""Every decision explains itself (pure): the typed record of one election or SyncStateSet change
(or its refusal), with every replica, what the controllers knew of it, and the rule that ruled it
out. The state machine builds one beside each ElectMaster / AlterSyncStateSet it decides, so the
record is the decision as made, not a re-telling; ``admin explain``, ``admin elect-master
--dry-run``, the status page, the ``no_master`` alert and the decision log line all show it.
"""

from __future__ import annotations

import collections
from collections.abc import Iterable, Mapping
from typing import Any

import msgspec
from autoswitch.controller.messages import (
    AlterSyncStateSetRequest,
    BrokerLiveInfo,
    ElectMasterRequest,
    ReplicaView,
)

from autoswitch.base.limits import DECISION_GROUPS_KEPT, DECISIONS_KEPT_PER_GROUP

# why a replica was not the one (the keys are stable: dashboards and tests match on them)
NOT_ALIVE = "not_alive"                   # no report a controller majority agrees on
DEAD = "dead_by_majority"
NOT_DESIGNATED = "not_designated"
OUTSIDE_SYNC_STATE_SET = "outside_sync_state_set"
UNCLEAN = "unclean_shutdown"
DIVERGED = "diverged"
IN_MAINTENANCE = "in_maintenance"
RANKED_LOWER = "ranked_lower"
NOT_REGISTERED_PROCESS = "not_the_registered_process"

_SAY = {
    NOT_ALIVE: "not alive (no heartbeat a controller majority agrees on)",
    DEAD: "dead by a controller majority",
    NOT_DESIGNATED: "not the designated broker",
    OUTSIDE_SYNC_STATE_SET: "outside the SyncStateSet and the eligible replicas: may lack acknowledged messages",
    UNCLEAN: "restarted after an unclean shutdown and not caught up since: its tail may be gone",
    DIVERGED: "its range digests found bytes that differ from its master's",
    IN_MAINTENANCE: "in maintenance",
    RANKED_LOWER: "ranked lower",
}


class Verdict(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """One replica in one decision."""

    broker_id: int
    alive: bool
    epoch: int = 0                # its log's last MasterEpoch, as reported
    max_offset: int = 0
    clean_shutdown: bool = True
    in_sync: bool = False         # in the SyncStateSet before the decision
    eligible: bool = False
    maintenance: bool = False
    diverged: bool = False
    zone: str = ""                # as its heartbeats state it ("" = none)
    chosen: bool = False
    ruled_out: str = ""           # one of the keys above ("" = chosen, or not ruled out)
    why: str = ""                 # the same, for a person (with the comparison, for RANKED_LOWER)


class Decision(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """One decision of the controller about one group."""

    group: str
    request: str                  # ElectMaster | AlterSyncStateSet
    trigger: str = ""
    code: str = "SUCCESS"         # the reply's code name
    outcome: str                  # elected | kept | no_master | refused | sync_state_set
    master: int | None = None     # the master after the decision
    master_epoch: int = 0
    rule: str = ""                # the rule that decided (election reason, or the refusal)
    candidates: tuple[Verdict, ...] = ()
    zones_lost: tuple[str, ...] = ()   # zones none of whose replicas is alive
    # promises the outcome cannot keep (min_in_sync_zones), each a sentence
    warnings: tuple[str, ...] = ()
    summary: str = ""             # one line a person reads
    index: int = 0                # the Raft entry (0: a dry run)
    ts_ms: int = 0
    dry_run: bool = False


def _rank_word(a: BrokerLiveInfo, b: BrokerLiveInfo, zones: Mapping[int, str] | None = None,
               zone_rank: Mapping[int, int] | None = None) -> str:
    """Why ``a`` ranks below ``b`` (the zone preference, then election.rank_key: epoch, offset,
    priority, brokerId)."""
    if zone_rank and zone_rank.get(a.broker_id) != zone_rank.get(b.broker_id):
        z = zones or {}
        return (f"ranked below broker {b.broker_id}: its zone {z.get(a.broker_id) or '(none)'} comes after "
                f"{z.get(b.broker_id) or '(none)'} in the group's zone preference")
    if a.epoch != b.epoch:
        return f"ranked below broker {b.broker_id}: its log ends at MasterEpoch {a.epoch}, {b.broker_id}'s at {b.epoch}"
    if a.max_offset != b.max_offset:
        return f"ranked below broker {b.broker_id}: it holds up to offset {a.max_offset}, {b.broker_id} up to " \
               f"{b.max_offset}"
    if a.election_priority != b.election_priority:
        return f"ranked below broker {b.broker_id}: electionPriority {a.election_priority} vs {b.election_priority}"
    return f"ranked below broker {b.broker_id}: same data, higher brokerId"


def verdicts(*, registered: list[int], alive: Mapping[int, BrokerLiveInfo], dead: frozenset[int],
             sync_state_set: frozenset[int], eligible: frozenset[int], maintenance: frozenset[int],
             first_election: bool, designated: int | None, winner: int | None,
             winner_in_maintenance_only: bool, zones: Mapping[int, str] | None = None,
             zone_rank: Mapping[int, int] | None = None) -> tuple[Verdict, ...]:
    """Every registered replica with the first rule that ruled it out (election.decide's order)."""
    pool = sync_state_set | eligible
    best = alive.get(winner) if winner is not None else None
    out = []
    for b in registered:
        info = alive.get(b)
        key = ""
        why = ""
        if info is None:
            key = DEAD if b in dead else NOT_ALIVE
        elif designated is not None and b != designated:
            key = NOT_DESIGNATED
        elif not first_election and b not in pool:
            key = OUTSIDE_SYNC_STATE_SET
        elif not info.clean_shutdown:
            key = UNCLEAN
        elif info.diverged:
            key = DIVERGED
        elif b in maintenance and b != winner and not winner_in_maintenance_only:
            key = IN_MAINTENANCE
        elif best is not None and b != winner:
            key, why = RANKED_LOWER, _rank_word(info, best, zones, zone_rank)
        if key and not why:
            why = _SAY.get(key, key)
        out.append(Verdict(broker_id=b, alive=info is not None, epoch=info.epoch if info else 0,
                           max_offset=info.max_offset if info else 0,
                           clean_shutdown=info.clean_shutdown if info else True, in_sync=b in sync_state_set,
                           eligible=b in eligible, maintenance=b in maintenance,
                           diverged=info.diverged if info else False, zone=(zones or {}).get(b, ""),
                           chosen=b == winner, ruled_out=key, why=why))
    return tuple(out)


def zones_lost(cands: tuple[Verdict, ...]) -> tuple[str, ...]:
    """Zones with replicas in the group none of which is alive (a whole zone went silent)."""
    by_zone: dict[str, list[bool]] = {}
    for v in cands:
        if v.zone:
            by_zone.setdefault(v.zone, []).append(v.alive)
    return tuple(sorted(z for z, alive in by_zone.items() if not any(alive)))


def summary(outcome: str, master: int | None, rule: str, cands: tuple[Verdict, ...]) -> str:
    """The line a person reads: who won and why, or what is missing."""
    if outcome == "elected":
        return f"broker {master} elected ({rule})"
    if outcome == "kept":
        return f"master {master} kept: {rule}"
    alive = [v for v in cands if v.alive]
    dead = [v.broker_id for v in cands if not v.alive]
    in_set = [v for v in cands if v.in_sync or v.eligible]
    parts = []
    if in_set and not any(v.alive for v in in_set):
        parts.append(f"no replica in the SyncStateSet or eligible replicas is alive ({[v.broker_id for v in in_set]})")
    for v in alive:
        parts.append(f"broker {v.broker_id} holds up to offset {v.max_offset} of MasterEpoch {v.epoch} but "
                     f"is {v.why or 'not electable'}" if v.ruled_out else f"broker {v.broker_id} was not chosen")
    if dead and not (in_set and not any(v.alive for v in in_set)):
        parts.append(f"not alive: {dead}")
    head = "no master" if outcome == "no_master" else "refused"
    return f"{head}: {rule}" + (f"; {'; '.join(parts)}" if parts else "")


def zone_promise(need: int, outcome: str, master: int | None, cands: tuple[Verdict, ...]) -> tuple[str, ...]:
    """What an election that ``outcome``s cannot keep of the group's min_in_sync_zones ``need``: the
    acknowledged messages now held in fewer zones, and a new master that takes no write until a
    replica of another zone is in sync (its check refuses them: IN_SYNC_REPLICAS_NOT_ENOUGH)."""
    if need <= 0 or outcome != "elected":
        return ()
    out = []
    held = sorted({v.zone for v in cands if v.alive and v.in_sync and v.zone})
    if len(held) < need:
        out.append(f"min_in_sync_zones {need}: the acknowledged messages are now held in {len(held)} zone(s) "
                   f"{held} only")
    live = sorted({v.zone for v in cands if v.alive and v.zone})
    if len(live) < need:
        out.append(f"min_in_sync_zones {need}: the live replicas span {len(live)} zone(s) {live}: broker {master} "
                   "acknowledges no write until a replica of another zone is in sync")
    return tuple(out)


def decision_record(req: ElectMasterRequest | AlterSyncStateSetRequest, code: str, remark: str,
                    explained: Any, view: ReplicaView | None) -> Decision:
    """The record of an election or SyncStateSet change as the state machine decided it.
    ``explained``: (outcome word, rule, verdicts) of an election that reached election.decide."""
    master = view.master_broker_id if view is not None else None
    epoch = view.master_epoch if view is not None else 0
    if explained is not None:
        word, rule, cands = explained
    elif code != "SUCCESS":
        word, rule, cands = "refused", remark, ()
    else:
        word, cands = "sync_state_set", ()
        rule = f"SyncStateSet {list(view.sync_state_set) if view is not None else []}"
    text = summary(word, master, rule, cands) if cands or word != "sync_state_set" else rule
    lost = zones_lost(cands)
    if lost:
        text = f"zone lost: {', '.join(lost)} (none of its replicas alive); {text}"
    warnings = zone_promise(req.min_in_sync_zones, word, master, cands) if isinstance(req, ElectMasterRequest) else ()
    if warnings:
        text = f"{text}; {'; '.join(warnings)}"
    return Decision(group=req.broker_name, request=req.TYPE, zones_lost=lost, warnings=warnings,
                    trigger=req.trigger if isinstance(req, ElectMasterRequest) else "", code=code, outcome=word,
                    master=master, master_epoch=epoch, rule=rule, candidates=cands, summary=text, ts_ms=req.ts_ms)


_ENCODER = msgspec.json.Encoder()
_DECODER = msgspec.json.Decoder(Decision)


def to_json(d: Decision) -> str:
    return _ENCODER.encode(d).decode()


def from_json(text: str | bytes) -> Decision:
    return _DECODER.decode(text)


class DecisionLog:
    """The last ``DECISIONS_KEPT_PER_GROUP`` decisions of each of the last ``DECISION_GROUPS_KEPT``
    groups that had one (bounded: a cluster of many groups keeps the recent ones).

    Seeded at start from events.jsonl (``restore``): the entries Raft applies again after a restart
    (those past the last snapshot) are then already here, and one whose Raft index is not past the
    group's newest is not added twice."""

    def __init__(self) -> None:
        self._by_group: collections.OrderedDict[str, collections.deque[Decision]] = collections.OrderedDict()

    def restore(self, lines: Iterable[str]) -> int:
        """Decisions as events.jsonl keeps them (JSON); returns how many were unreadable (skipped)."""
        bad = 0
        for line in lines:
            try:
                self.add(from_json(line))
            except (msgspec.DecodeError, msgspec.ValidationError):
                bad += 1
        return bad

    def add(self, d: Decision) -> None:
        q = self._by_group.pop(d.group, None)
        if q is None:
            q = collections.deque(maxlen=DECISIONS_KEPT_PER_GROUP)
        if d.index and q and d.index <= q[-1].index:
            self._by_group[d.group] = q
            return
        q.append(d)
        self._by_group[d.group] = q
        while len(self._by_group) > DECISION_GROUPS_KEPT:
            self._by_group.popitem(last=False)

    def last(self, group: str, n: int = DECISIONS_KEPT_PER_GROUP) -> list[Decision]:
        """Newest first."""
        return list(self._by_group.get(group, ()))[::-1][:n]

    def latest_election(self, group: str) -> Decision | None:
        return next((d for d in self.last(group) if d.request == "ElectMaster"), None)
