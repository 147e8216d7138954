"""Feature levels (Kafka's ``metadata.version``), pure: which levels this build knows, and whether
a cluster may move its finalized level from one to another.

A *feature level* names a set of behaviours that members older than it cannot understand (a new
Raft entry type, HA frame or heartbeat field that changes a safety decision). The controller's
replicated state holds the cluster's *finalized* level; behaviour of a higher level stays off
until ``admin finalize-features`` raises it, which the leader does only when every controller
and every registered broker reports it supports the target (``plan_finalize``). Lowering is
allowed only past levels whose records the lower level can still read (``downgrade_safe``).

docs/compatibility.md lists the levels and the versions that support them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Level:
    number: int
    since: str                # the first release that supports it
    what: str                 # what it turns on
    # records written while this level is finalized can be read by a member of the level below
    # (so the cluster may be lowered past it without losing or refusing anything)
    downgrade_safe: bool


# Level 1 is the baseline of the first release: every 0.1.0+ member supports it, a new cluster
# starts at it, and nothing lies below it to lower to.
LEVELS: dict[int, Level] = {
    1: Level(1, "0.1.0", "the first release's formats and protocols (docs/compatibility.md)", downgrade_safe=False),
    2: Level(2, "0.2.0", "the operator's tools: maintenance of brokers and controllers, zones (SetMaintenance, "
                         "SetControllerMaintenance, SetZonePreference entries, zones in ElectMaster; snapshot "
                         "columns; rebalance_max_in_flight)", downgrade_safe=False),
    3: Level(3, "0.3.0", "the seams between the durability defences (issue 58): a crashed master moves to a new "
                         "MasterEpoch at registration, replicas that hold no acknowledged copy (diverged, "
                         "quarantined, repairing) are recorded and never eligible or clean candidates, an unclean "
                         "recovery is checked against its plan when it commits, each voter's supported feature "
                         "levels are in the replicated state (snapshot columns, new request fields); groups "
                         "imported from RocketMQ's controller (ImportGroup entries)",
             downgrade_safe=False),
}
OPERATOR_LEVEL = 2
SAFETY_LEVEL = 3
BASELINE_LEVEL = 1
SUPPORTED_LEVEL = max(LEVELS)       # the highest level this build runs
MAX_LEVEL = 10_000                   # the range a replicated level may take (its type's bound)

NOT_HEARD = 0   # a member's supported level when it has not reported one (unreachable, or older)


@dataclass(frozen=True)
class FinalizePlan:
    """The outcome of ``plan_finalize``: ``ok`` with ``target`` to propose (``changed`` False when it
    is the finalized level already), or a refusal whose ``reason`` says why and ``behind`` names
    the members that do not support the target (member -> the level it supports, 0 = not heard)."""

    ok: bool
    target: int
    current: int
    reason: str = ""
    behind: dict[str, int] = field(default_factory=dict)

    @property
    def changed(self) -> bool:
        return self.ok and self.target != self.current


def plan_finalize(target: int, current: int, members: Mapping[str, int],
                  levels: Mapping[int, Level] = LEVELS) -> FinalizePlan:
    """May the cluster's finalized level move from ``current`` to ``target``? ``members`` maps
    every controller and registered broker (by a name an operator recognises) to the highest
    level it reports supporting (``NOT_HEARD`` when it did not answer)."""
    known = sorted(levels)
    if target not in levels:
        return FinalizePlan(False, target, current,
                            f"feature level {target} is unknown here (this controller knows {known[0]}..{known[-1]})")
    behind = {name: lvl for name, lvl in sorted(members.items()) if lvl < target}
    if target > current and behind:
        who = ", ".join(f"{n} ({'no level heard: down, or older than 0.1.0' if lvl == NOT_HEARD else f'supports {lvl}'})"
                        for n, lvl in behind.items())
        return FinalizePlan(False, target, current,
                            f"feature level {target} refused: not every member supports it: {who}; "
                            f"upgrade them (or remove them) first", behind)
    if target < current:
        unsafe = [n for n in range(target + 1, current + 1) if n in levels and not levels[n].downgrade_safe]
        if unsafe or any(n not in levels for n in range(target + 1, current + 1)):
            first = unsafe[0] if unsafe else current
            return FinalizePlan(False, target, current,
                                f"feature level {current} -> {target} refused: records written at level {first} "
                                f"cannot be read at level {first - 1} (levels below it stay closed once it is "
                                f"finalized)")
    return FinalizePlan(True, target, current)


def unsupported(finalized: int, supported: int = SUPPORTED_LEVEL) -> str | None:
    """Why a member supporting ``supported`` must not run in a cluster finalized at ``finalized``
    (None when it may)."""
    if finalized > supported:
        return (f"the cluster's finalized feature level is {finalized}; this build supports up to {supported}: "
                f"run a version that supports it (docs/compatibility.md)")
    return None
