"""The HA master's ReplicaRegistry (ha/io/master.py) backed by the controller: the brokerIds registered
in our group and the incarnation registered for each, so a master serves its log only to a replica
the controllers know, run by the process they registered.

Answers from a cache; an id not in it triggers one GetSyncStateData at most every
``min_refresh_s`` (a flood of made-up ids costs the controller one call a second); ``fresh`` (a
SyncStateSet expansion, rare) asks at once. A registered id stating an incarnation the cache does
not have is most likely a replica that restarted and registered a moment ago: that asks again at
most every ``stale_refresh_s`` (STALE_REFRESH_S), so the restarted replica is admitted at its
first handshake rather than after a second of refusals and backoffs. An unreachable controller
answers "no": an unknown peer gets no log.

The same answer names each replica's zone (as its heartbeats state it to the controllers), which
the master's min_in_sync_zones rule counts (ha/sync_state.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from autoswitch.controller.api import RegisteredReplica
from autoswitch.ha.sync_state import admission_refusal

from autoswitch.base.log import EventLogger

# Asks for a registered brokerId with a new incarnation: at most 20 a second per master (a flood of
# made-up incarnations for a real id costs the controllers that, coalesced by the lock below).
STALE_REFRESH_S = 0.05


class ControllerReplicaRegistry:
    def __init__(self, fetch: Callable[[], Awaitable[dict[int, RegisteredReplica]]], clock: Callable[[], float],
                 log: EventLogger, min_refresh_s: float = 1.0, stale_refresh_s: float = STALE_REFRESH_S) -> None:
        self._fetch = fetch
        self._clock = clock
        self._log = log
        self.min_refresh_s = min_refresh_s
        self.stale_refresh_s = min(stale_refresh_s, min_refresh_s)
        self._members: dict[int, RegisteredReplica] = {}
        self._incarnations: dict[int, str] = {}      # brokerId -> its registered process, of _members
        self._fetched_at: float | None = None
        self._lock = asyncio.Lock()

    def _verdict(self, broker_id: int, incarnation: str) -> str | None:
        return admission_refusal(broker_id, incarnation, self._incarnations)

    async def registered(self, fresh: bool = False) -> dict[int, str] | None:
        if not await self._ask(fresh, self.min_refresh_s) and fresh:
            return None
        return dict(self._incarnations)

    def zone(self, broker_id: int) -> str:
        """The zone the controllers last named for ``broker_id`` ("" = not known)."""
        r = self._members.get(broker_id)
        return r.zone if r is not None else ""

    async def refresh(self) -> None:
        """Ask again (at most every ``min_refresh_s``): a zone not known yet."""
        await self._ask(False, self.min_refresh_s)

    async def refusal(self, broker_id: int, incarnation: str, fresh: bool = False) -> str | None:
        """None when ``broker_id`` is registered and ``incarnation`` is its registered process;
        else why not (``unknown_replica``, ``stale_incarnation``, ``registry_unavailable``)."""
        verdict = self._verdict(broker_id, incarnation)
        if not fresh and verdict is None:
            return None
        every = self.stale_refresh_s if verdict == "stale_incarnation" else self.min_refresh_s
        if not await self._ask(fresh, every) and fresh:
            return "registry_unavailable"
        return self._verdict(broker_id, incarnation)

    async def _ask(self, fresh: bool, every: float) -> bool:
        """One GetSyncStateData (now when ``fresh``, else at most every ``every`` seconds); False
        when the controllers could not be asked (what was known stays)."""
        async with self._lock:
            now = self._clock()
            if not fresh and self._fetched_at is not None and now - self._fetched_at < every:
                return True
            self._fetched_at = now
            try:
                self._members = await self._fetch()
                self._incarnations = {b: r.incarnation for b, r in self._members.items()}
            except Exception as e:  # noqa: BLE001 - fail closed, say why once per refresh
                self._log.warning("replica_registry_unavailable", error=repr(e)[:200])
                return False
            return True
