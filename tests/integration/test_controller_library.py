"""The library API: three ControllerNodes inside one asyncio program (real sockets and files)."""

from __future__ import annotations

import asyncio
import json

import pytest
from autoswitch.controller import config as cfgmod
from autoswitch.controller.client import ControllerClient
from autoswitch.controller.server.node import ControllerNode

from tests.integration.controller_harness import admin, wait_leader
from tests.procs import HOST, free_port
from tests.waiting import until

pytestmark = pytest.mark.integration


async def start_three(tmp_path) -> tuple[list[ControllerNode], str]:
    """Three started ControllerNodes of one cluster in this event loop, and their client spec."""
    ports = [free_port() for _ in range(3)]
    peers = ",".join(f"n{i + 1}={HOST}:{p}" for i, p in enumerate(ports))
    nodes = [ControllerNode(cfgmod.load(None, node_id=f"n{i + 1}", peers=peers, data_dir=str(tmp_path / f"n{i + 1}")))
             for i in range(3)]
    for n in nodes:
        await n.start()
    return nodes, ",".join(f"{HOST}:{p}" for p in ports)


def test_three_nodes_in_one_event_loop(tmp_path):
    async def go():
        nodes, spec = await start_three(tmp_path)
        try:
            async with ControllerClient(spec) as c:
                await wait_leader(c)
                await c.apply_broker_id("c", "lib", 1, "x")
                info = await c.register_broker("c", "lib", 1, f"{HOST}:1")
                assert info.broker_name == "lib"
                assert await c.get_next_broker_id("c", "lib") == 2
            # every node applied the entries and recorded them in its own events.jsonl
            loop = asyncio.get_running_loop()
            end = loop.time() + 60          # readiness; the bound only ends a stuck test
            # (a new cluster's leader also records each member's feature level, MemberLevel, whenever
            # its first heartbeats land: before, between or after these two; only the group's are compared)
            def group_events(n):
                lines, _, _ = n.read_events(0, 50)
                return [e for e in (json.loads(x)["event"] for x in lines) if e != "MemberLevel"]
            while not all(len(group_events(n)) >= 2 for n in nodes) and loop.time() < end:
                await asyncio.sleep(0.05)
            for n in nodes:
                assert group_events(n) == ["ApplyBrokerId", "RegisterBroker"]

            # admin CLI (a subprocess against the in-process nodes): typed refusal, then a cleanup
            r = await asyncio.to_thread(admin, "elect-master", "--controller", spec, "-b", "lib")
            # nobody alive (freshly started nodes cannot even call the broker dead): typed refusal
            assert not r["ok"] and r["error"]["code"] in ("CONTROLLER_MASTER_NOT_AVAILABLE",
                                                          "CONTROLLER_ELECT_MASTER_FAILED")
            r = await asyncio.to_thread(admin, "clean-broker-metadata", "--controller", spec, "-b", "lib",
                                        "--broker-ids", "1")
            assert r["ok"], r
            r = await asyncio.to_thread(admin, "get-sync-state-set", "--controller", spec)
            assert all(m["broker_id"] != 1 for g in r["result"]["groups"] if g["replica_info"]["broker_name"] == "lib"
                       for m in g["members"])
        finally:
            for n in nodes:
                await n.stop()
        assert all(n.server is not None for n in nodes)

    asyncio.run(go())


def test_an_essential_loop_that_ends_ends_the_process_and_a_stop_does_not(tmp_path):
    """A node whose dead-master scan ended kept serving and elected nobody (docs/CHANGELOG.md): now
    its end, here a cancellation from outside the node, exits the process (70); stop() does not."""
    port = free_port()
    exits: list[int] = []

    async def go():
        node = ControllerNode(cfgmod.load(None, node_id="n1", peers=f"n1={HOST}:{port}", data_dir=str(tmp_path)),
                              exit_process=exits.append)
        await node.start()
        try:
            tasks = {t.get_name(): t for t in asyncio.all_tasks()}
            assert {"dead-master-scan", "state-hash-check", "learner-promotion"} <= set(tasks)
            tasks["dead-master-scan"].cancel()
            await until(lambda: exits, "the process ended")
            assert exits == [70]
        finally:
            await node.stop()
        await asyncio.sleep(0)
        assert exits == [70], "the stop cancelled the other two loops: not an end"

    asyncio.run(go())


def test_raft_loops_that_end_before_stop_end_the_process(tmp_path, monkeypatch):
    """The Raft node's Ready loop and its senders to the peers run until stop(); a sender that
    ended would leave that peer without a log, a Ready loop that ended a node that answers but
    never commits (a persistence failure stops the node first, and is reported as RaftStopped)."""
    from autoswitch.base import supervise

    exits: list[int] = []
    monkeypatch.setattr(supervise, "process_exit", exits.append)

    async def go():
        nodes, _spec = await start_three(tmp_path)
        try:
            by_name: dict[str, list[asyncio.Task]] = {}
            for t in asyncio.all_tasks():
                by_name.setdefault(t.get_name(), []).append(t)
            assert len(by_name["raft-send-n2"]) == 2 and len(by_name["raft-n3"]) == 1
            for n, task in enumerate((by_name["raft-send-n2"][0], by_name["raft-n3"][0]), start=1):
                task.cancel()
                await until(lambda n=n: len(exits) >= n, f"{task.get_name()} ended the process")
                assert exits == [70] * n
        finally:
            for n in nodes:
                await n.stop()
        await asyncio.sleep(0)

    asyncio.run(go())
    assert exits == [70, 70], "the stops ended every other loop: not an end"
