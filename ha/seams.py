"""What the HA master asks of the broker around it (ha/io/master.py): an authority for its
SyncStateSet changes, and, in controller mode, the controllers' registry of the group's replicas.
"""

from __future__ import annotations

from typing import Protocol

from autoswitch.ha import zones

Leaving = tuple[tuple[int, str], ...]   # (brokerId, why it leaves the set), e.g. (3, "quarantined")


class SyncStateProposer(Protocol):
    async def propose(self, master_epoch: int, sync_state_set_epoch: int,
                      new_set: frozenset[int], leaving: Leaving = ()) -> tuple[frozenset[int], int]:
        """Carry an AlterSyncStateSet to the controller, with why members leave (a quarantined one
        holds no acknowledged copy: never eligible); returns (accepted set, its epoch); raises on
        rejection."""
        ...


class ReplicaRegistry(zones.ZoneSource, Protocol):
    """Who may replicate from this master: the replicas the controller registered for the group,
    each as the process (incarnation) the controllers registered for its brokerId (and, as a
    ZoneSource, the zone they know for it)."""

    async def registered(self, fresh: bool = False) -> dict[int, str] | None:
        """The process registered for each of the group's brokerIds ("" = not stated), asked of
        the controllers now when ``fresh``; None when they could not be asked."""
        ...

    async def refusal(self, broker_id: int, incarnation: str, fresh: bool = False) -> str | None:
        """None when ``broker_id`` is registered and ``incarnation`` is its registered process
        ("" stated or registered: not checkable, admitted); else the refusal reason
        (``unknown_replica``, ``stale_incarnation``). ``fresh``: ask the controllers now."""
        ...


class LocalSyncStateProposer:
    """Static-role mode: the master is the authority and accepts every proposal."""

    async def propose(self, master_epoch: int, sync_state_set_epoch: int,
                      new_set: frozenset[int], leaving: Leaving = ()) -> tuple[frozenset[int], int]:
        return frozenset(new_set), sync_state_set_epoch + 1
