"""Which replica of each group is the "current master" the audit compares against (pure).

Order of evidence:
1. the controller history: the last ElectMaster/NoMaster event of the group names the master
   (a NoMaster event names nobody, so we fall through);
2. the replicas themselves: the replica whose EpochFile ends with the highest MasterEpoch
   (a new master appends its epoch before accepting writes), then the largest max_offset,
   then the smallest brokerId (deterministic; equal replicas hold the same log).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class Replica:
    group: str
    broker_id: int
    max_offset: int
    confirm_offset: int
    min_offset: int = 0
    last_epoch: int = 0


@dataclass(frozen=True)
class MasterChoice:
    group: str
    broker_id: int
    confirm_offset: int
    source: str  # "events" | "epochfile"


def choose_masters(replicas: Iterable[Replica],
                   event_master: Mapping[str, int | None] | None = None) -> dict[str, MasterChoice]:
    by_group: dict[str, list[Replica]] = {}
    for r in replicas:
        by_group.setdefault(r.group, []).append(r)
    out: dict[str, MasterChoice] = {}
    for group, rs in by_group.items():
        ids = {r.broker_id: r for r in rs}
        assert len(ids) == len(rs), f"duplicate replica rows for group {group}"
        named = (event_master or {}).get(group)
        if named is not None and named in ids:
            r = ids[named]
            out[group] = MasterChoice(group, r.broker_id, r.confirm_offset, "events")
            continue
        best = min(rs, key=lambda r: (-r.last_epoch, -r.max_offset, r.broker_id))
        out[group] = MasterChoice(group, best.broker_id, best.confirm_offset, "epochfile")
    return out
