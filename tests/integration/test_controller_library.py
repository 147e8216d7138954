"""The library API: three ControllerNodes inside one asyncio program (real sockets and files)."""

from __future__ import annotations

import asyncio
import json

import pytest
from autoswitch.controller import config as cfgmod
from autoswitch.controller.client import ControllerClient
from autoswitch.controller.node import ControllerNode

from tests.integration.controller_harness import wait_leader
from tests.procs import HOST, free_port

pytestmark = pytest.mark.integration


def test_three_nodes_in_one_event_loop(tmp_path):
    ports = [free_port() for _ in range(3)]
    peers = ",".join(f"n{i + 1}={HOST}:{p}" for i, p in enumerate(ports))
    spec = ",".join(f"{HOST}:{p}" for p in ports)

    async def go():
        nodes = [ControllerNode(cfgmod.load(None, node_id=f"n{i + 1}", peers=peers,
                                            data_dir=str(tmp_path / f"n{i + 1}")))
                 for i in range(3)]
        for n in nodes:
            await n.start()
        try:
            async with ControllerClient(spec) as c:
                await wait_leader(c)
                await c.apply_broker_id("c", "lib", 1, "x")
                info = await c.register_broker("c", "lib", 1, f"{HOST}:1")
                assert info.broker_name == "lib"
                assert await c.get_next_broker_id("c", "lib") == 2
            # every node applied the entries and recorded them in its own events.jsonl
            for _ in range(50):
                if all(len(n.events) >= 2 for n in nodes):
                    break
                await asyncio.sleep(0.05)
            for n in nodes:
                lines, _, _ = n.read_events(0, 10)
                assert [json.loads(x)["event"] for x in lines] == ["ApplyBrokerId", "RegisterBroker"]
        finally:
            for n in nodes:
                await n.stop()
        assert all(n.server is not None for n in nodes)

    asyncio.run(go())
