"""Lease holds across a controller restart: the wall time of a node's last DEAD report is on
disk (data_dir/last_dead_report, fsynced before the report leaves), so a restarted node pauses
lease grants only for what is left of that hold — not at all when it never reported one."""

from __future__ import annotations

import asyncio

import pytest
from autoswitch.controller import config as cfgmod
from autoswitch.controller.failover.liveness import Opinion
from autoswitch.controller.server.node import ControllerNode
from autoswitch.controller.server.service_common import checked_heartbeat
from autoswitch.controller.server.sm_adapter import wall_ms

from autoswitch.proto import controller_pb2 as pb
from tests.procs import HOST, free_port

pytestmark = pytest.mark.integration


def test_restart_pause_follows_the_last_dead_report_on_disk(tmp_path):
    peers = f"n1={HOST}:{free_port()}"
    now = [1_000.0]                      # the node's liveness clock (s), moved by hand
    data = tmp_path / "n1"
    marker = data / "last_dead_report"

    def make() -> ControllerNode:
        return ControllerNode(cfgmod.load(None, node_id="n1", peers=peers, data_dir=str(data)),
                              clock=lambda: now[0])

    async def go():
        node = make()
        await node.start()
        try:
            hold = node.liveness.heartbeats.hold_ms
            assert node.liveness.heartbeats.startup_grace() == 0          # a new data dir: never reported
            assert marker.read_text() == "never"
            node.liveness.record_heartbeat(checked_heartbeat(pb.BrokerHeartbeatRequest(broker_name="g", broker_id=1,
                                                            broker_address=f"{HOST}:1", epoch=1)))
            now[0] += 60                 # a minute without a heartbeat
            before = wall_ms()
            [op] = node.liveness.local_opinions([("g", 1)])
            assert op.opinion is Opinion.DEAD
            assert int(marker.read_text()) >= before
        finally:
            await node.stop()

        node = make()                    # restarted right after that report: holds (almost) all of it
        await node.start()
        try:
            assert hold - 5_000 <= node.liveness.heartbeats.startup_grace() <= hold
        finally:
            await node.stop()

        marker.write_text(str(wall_ms() - hold - 1))   # the last report is older than a hold
        node = make()
        await node.start()
        try:
            assert node.liveness.heartbeats.startup_grace() == 0
        finally:
            await node.stop()

        marker.unlink()                  # a node with a Raft log but no marker: unknown, hold it all
        node = make()
        await node.start()
        try:
            assert node.liveness.heartbeats.startup_grace() == hold
        finally:
            await node.stop()

    asyncio.run(asyncio.wait_for(go(), 60))
