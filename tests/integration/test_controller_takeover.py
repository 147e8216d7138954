"""Issue 30, item 2 (found by the data simulator, soak seed 1580): a process that does not follow
the registered one of a brokerId (a copy of a running broker's directory) takes the id over only
when a controller majority holds the registered process dead. Three ControllerNodes in one
program (real sockets and files); the registered process heartbeats the two followers only, as
under a one-way cut to the leader."""

from __future__ import annotations

import asyncio

import pytest
from autoswitch.controller import config as cfgmod
from autoswitch.controller.api import BrokerReport, ControllerCallFailed, Heartbeat, connect
from autoswitch.controller.client import ControllerClient
from autoswitch.controller.server.node import ControllerNode

from tests.integration.controller_harness import wait_leader
from tests.procs import HOST, free_port
from tests.waiting import until

pytestmark = pytest.mark.integration

TIMEOUT_MS = 2000


def _hb(incarnation: str) -> Heartbeat:
    return Heartbeat("c", "g", BrokerReport(broker_id=1, address=f"{HOST}:1", assumed_timeout_ms=TIMEOUT_MS,
                                            incarnation=incarnation))


def test_a_copy_takes_a_brokerid_over_only_once_a_majority_holds_the_original_dead(tmp_path):
    ports = [free_port() for _ in range(3)]
    peers = ",".join(f"n{i + 1}={HOST}:{p}" for i, p in enumerate(ports))
    addrs = {f"n{i + 1}": f"{HOST}:{p}" for i, p in enumerate(ports)}

    async def go():
        nodes = [ControllerNode(cfgmod.load(None, node_id=f"n{i + 1}", peers=peers, data_dir=str(tmp_path / f"n{i + 1}"),
                                            sm={"heartbeat_timeout_ms": str(TIMEOUT_MS)}))
                 for i in range(3)]
        for n in nodes:
            await n.start()
        api = connect(addrs.values(), rpc_timeout_s=10)
        try:
            async with ControllerClient(",".join(addrs.values())) as c:
                leader = await wait_leader(c)
            followers = [a for a in addrs.values() if a != leader]
            await api.apply_broker_id("c", "g", 1, "code-1")
            await api.register_broker("c", "g", 1, f"{HOST}:1", "", incarnation="orig")
            beating = True

            async def original() -> None:          # heard by the followers only
                while beating:
                    for a in followers:
                        try:
                            await api.heartbeat(a, _hb("orig"), 2.0)
                        except ControllerCallFailed:
                            pass
                    await asyncio.sleep(0.1)

            task = asyncio.create_task(original())
            refusals: list[str] = []

            async def copy_registers() -> bool:
                try:
                    await api.register_broker("c", "g", 1, f"{HOST}:2", "", clean_shutdown=False, incarnation="copy")
                    return True
                except ControllerCallFailed as e:
                    assert e.reply_name == "CONTROLLER_BROKER_INCARNATION_CONFLICT", e.to_dict()
                    refusals.append(e.message)
                    return False

            async def refused_by_the_majority() -> bool:
                # first the leader's start-up and takeover grace refuse it, then the majority rule
                assert not await copy_registers(), "a majority hears the original: the copy is refused"
                return "majority does not hold" in refusals[-1]

            await until(refused_by_the_majority, "the copy refused because a majority hears the original")
            assert (await api.group_members("g"))[1].incarnation == "orig"
            beating = False
            await task
            await until(copy_registers, "the copy registers once a majority holds the original dead")
            assert (await api.group_members("g"))[1].incarnation == "copy"
        finally:
            await api.close()
            for n in nodes:
                await n.stop()

    asyncio.run(asyncio.wait_for(go(), 120))
