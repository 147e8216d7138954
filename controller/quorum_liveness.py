"""Combining controller nodes' liveness opinions into a majority verdict (Sentinel's ODOWN).

Each node's opinion of a broker is alive / dead / no opinion (the node started less than
heartbeat_timeout ago and has not heard the broker: it cannot know). A broker is
- DEAD only when a majority of ALL controller nodes say dead (unreachable nodes and "no opinion"
  never count as dead, so an isolated or freshly restarted leader cannot fail a master over alone);
- ALIVE (electable) only when a majority say alive.
Between the two the broker is neither: it is not failed over and not elected.
Pure; the node gathers opinions (its own + QueryLiveness replies) and calls ``combine``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Opinion:
    alive: bool | None          # None = no opinion
    last_heard_ms_ago: int      # -1 = never heard
    report: Any = None          # the broker's last heartbeat fields as this node saw them


@dataclass(frozen=True)
class Verdict:
    alive: bool
    dead: bool
    alive_votes: int
    dead_votes: int
    report: Any                 # freshest report among the "alive" opinions (None if none)


def majority(n_nodes: int) -> int:
    assert n_nodes >= 1
    return n_nodes // 2 + 1


def combine(n_nodes: int, opinions: list[Opinion]) -> Verdict:
    assert len(opinions) <= n_nodes, "more opinions than controller nodes"
    need = majority(n_nodes)
    alive_ops = [o for o in opinions if o.alive is True]
    dead_votes = sum(1 for o in opinions if o.alive is False)
    fresh = [o for o in alive_ops if o.report is not None]
    report = min(fresh, key=lambda o: o.last_heard_ms_ago).report if fresh else None
    v = Verdict(alive=len(alive_ops) >= need, dead=dead_votes >= need, alive_votes=len(alive_ops),
                dead_votes=dead_votes, report=report)
    assert not (v.alive and v.dead)
    return v
