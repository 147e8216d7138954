"""Where the master learns its replicas' zones for min_in_sync_zones (ha/sync_state.py): from the
controllers' registry answer (each replica's zone as its heartbeats state it), never from the
replica itself, so the HA handshake stays as it is and one source names every zone.

An empty answer (a controller that has not heard that replica's heartbeat yet, say after a leader
change) keeps what was known: a zone forgotten for a moment would stall every ack.
"""

from __future__ import annotations

from typing import Protocol

from autoswitch.ha.sync_state import SyncStateTracker


class ZoneSource(Protocol):
    def zone(self, broker_id: int) -> str: ...
    async def refresh(self) -> None: ...


def learn(tracker: SyncStateTracker, source: ZoneSource) -> None:
    """Copy the zones ``source`` names for every replica the tracker knows or counts."""
    for b in set(tracker.replicas) | tracker.ack_set:
        if b != tracker.master_id and (z := source.zone(b)):
            tracker.set_zone(b, z)


def missing(tracker: SyncStateTracker) -> bool:
    """A member, or a connected replica that may become one, whose zone is not known yet."""
    t = tracker
    return t.config.min_in_sync_zones > 0 and any(
        b not in t.zones for b in t.ack_set | {b for b, r in t.replicas.items() if r.connected})


async def refresh(tracker: SyncStateTracker, source: ZoneSource) -> None:
    """Ask again (the source rate-limits) while a zone is missing."""
    if missing(tracker):
        await source.refresh()
        learn(tracker, source)
