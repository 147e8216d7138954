"""The HA master's registry cache (broker/replicas/replica_registry.py): how often it asks the
controllers. A restarted replica (a registered brokerId with an incarnation the cache has not
seen) is asked about again within STALE_REFRESH_S; a made-up brokerId at most every
min_refresh_s."""

from __future__ import annotations

import asyncio

from autoswitch.broker.replicas.replica_registry import STALE_REFRESH_S, ControllerReplicaRegistry
from autoswitch.controller.api import RegisteredReplica

from autoswitch.base.log import get_logger


class Controllers:
    """What the controllers have registered, and how often they were asked."""

    def __init__(self) -> None:
        self.members = {1: RegisteredReplica("m"), 2: RegisteredReplica("old")}
        self.asked = 0

    async def fetch(self) -> dict[int, RegisteredReplica]:
        self.asked += 1
        return dict(self.members)


def test_a_restarted_replica_is_admitted_once_the_controllers_registered_it():
    async def main():
        now = [0.0]
        ctl = Controllers()
        reg = ControllerReplicaRegistry(ctl.fetch, lambda: now[0], get_logger("test"), min_refresh_s=1.0)
        assert await reg.refusal(2, "old", fresh=True) is None
        assert ctl.asked == 1
        # broker 2 restarts and registers its new process; the master hears of it by asking
        ctl.members[2] = RegisteredReplica("new")
        now[0] = STALE_REFRESH_S / 2          # within the floor: answered from the cache
        assert await reg.refusal(2, "new") == "stale_incarnation"
        assert ctl.asked == 1
        now[0] = STALE_REFRESH_S * 1.5        # well before min_refresh_s: asked again
        assert await reg.refusal(2, "new") is None
        assert ctl.asked == 2
        # the old process is refused from the cache, without asking
        assert await reg.refusal(2, "old") == "stale_incarnation"
        assert ctl.asked == 2

    asyncio.run(main())


def test_made_up_ids_and_incarnations_are_asked_about_at_a_bounded_rate():
    async def main():
        now = [0.0]
        ctl = Controllers()
        reg = ControllerReplicaRegistry(ctl.fetch, lambda: now[0], get_logger("test"), min_refresh_s=1.0)
        await reg.refusal(1, "m", fresh=True)
        for i in range(1000):                  # 1 s of made-up ids and incarnations
            now[0] = i / 1000
            assert await reg.refusal(9 + i, "x") == "unknown_replica"
            assert await reg.refusal(2, f"fake{i}") == "stale_incarnation"
        # one ask per STALE_REFRESH_S for the fake incarnations (which also covers the ids)
        assert ctl.asked <= 1 + 1.0 / STALE_REFRESH_S + 1

    asyncio.run(main())
