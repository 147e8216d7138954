"""The broker's view of the controller (autoswitch.controller.api) over real gRPC to real controller
processes: typed answers, and failures classified the way the ReplicasManager acts on them
(NOT_LEADER with the leader's address, CONFLICT for a taken brokerId, REJECTED for a refusal)."""

from __future__ import annotations

import asyncio

import pytest
from autoswitch.controller.api import (
    BrokerReport,
    ControllerCallFailed,
    FailKind,
    Heartbeat,
    ReplicaInfo,
    connect,
)
from autoswitch.controller.client import ControllerClient

from tests.integration.controller_harness import Cluster, wait_leader
from tests.waiting import until

pytestmark = pytest.mark.integration


def _hb(bid: int) -> Heartbeat:
    return Heartbeat("c1", "g1", BrokerReport(broker_id=bid, address=f"127.0.0.1:{30000 + bid}",
                                              incarnation="inc-one"))   # the process registered below


def test_typed_calls_and_classified_failures_against_real_controllers(procs, tmp_path):
    cl = Cluster(procs, tmp_path)
    cl.start_all()

    async def scenario():
        async with ControllerClient(cl.spec, deadline_s=15) as raw:
            leader = await wait_leader(raw)
        api = connect(cl.addrs.values(), rpc_timeout_s=15)
        try:
            assert await until(api.leader_address, "a leader is known") == leader
            assert (await api.heartbeat_timeout_ms() or 0) > 0
            assert await api.get_next_broker_id("c1", "g1") == 1
            await api.apply_broker_id("c1", "g1", 1, "check-1")
            with pytest.raises(ControllerCallFailed) as taken:
                await api.apply_broker_id("c1", "g1", 1, "someone-else")
            assert taken.value.kind == FailKind.CONFLICT and taken.value.reply_name == "CONTROLLER_BROKER_ID_INVALID"
            info = await api.register_broker("c1", "g1", 1, "127.0.0.1:30001", "127.0.0.1:30101",
                                             incarnation="inc-one")
            assert isinstance(info, ReplicaInfo)
            # a broker that never heartbeat is not alive: the election is refused, not retried
            with pytest.raises(ControllerCallFailed) as refused:
                await api.elect_master("c1", "g1", 1)
            assert refused.value.kind == FailKind.REJECTED, refused.value.to_dict()
            follower = next(a for a in cl.addrs.values() if a != leader)

            async def alive_everywhere():
                answers = [await api.heartbeat(a, _hb(1), 5.0) for a in cl.addrs.values()]
                return all(answers) and answers
            answers = await until(alive_everywhere, "heartbeats answered by every node")
            assert sum(a.is_leader for a in answers) == 1
            elected = await until(lambda: _elect(api), "broker 1 elected once the controllers see it alive")
            assert (elected.master_id, elected.master_ha_addr) == (1, "127.0.0.1:30101")
            assert elected.sync_state_set == frozenset({1}) and elected.master_epoch >= 1
            assert await api.get_replica_info("g1") == elected
            assert {b: r.incarnation for b, r in (await api.group_members("g1")).items()} == {1: "inc-one"}   # the master admits this process only
            with pytest.raises(ControllerCallFailed) as fenced:
                await api.alter_sync_state_set("g1", 1, elected.master_epoch + 5, frozenset({1}),
                                               elected.sync_state_set_epoch)
            assert fenced.value.kind == FailKind.REJECTED
            assert fenced.value.reply_name == "CONTROLLER_FENCED_MASTER_EPOCH"
            # A watch streams the node's applied state, then each applied change: the follower may
            # not have applied the election yet, so its first push can still show no master.
            pushes = api.watch_replica_info("g1", follower)

            async def follower_shows_the_master():
                return (await anext(pushes)).master_id == 1
            await asyncio.wait_for(until(follower_shows_the_master, "the follower's watch shows broker 1 as master"), 90)
        finally:
            await api.close()

    asyncio.run(asyncio.wait_for(scenario(), 240))


async def _elect(api) -> ReplicaInfo | None:
    try:
        return await api.elect_master("c1", "g1", 1)
    except ControllerCallFailed as e:
        if e.kind in (FailKind.REJECTED, FailKind.RETRY):
            return None
        raise
