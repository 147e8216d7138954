"""Issue 13 part 2, preferred masters, with real processes: an operator names a slave the group's
preferred master; with auto_rebalance_masters on, the controller leader moves mastership to it
through the broker's graceful handover (drain, compare-and-set election), under acked produce,
and leaves it there. On mutual TLS with authorization, so the leader's call to the broker is
authorized as a controller (role peer), and a reader cannot set a preferred master.
"""

from __future__ import annotations

import asyncio
import json

import pytest
from autoswitch.controller.client import ControllerClient, ControllerRpcError
from autoswitch.controller.codes import Code

from autoswitch.proto import controller_pb2 as pb
from tests.integration.failover_harness import (
    GROUP,
    FailoverCluster,
    consume_routed,
    read_ack_log,
    wait_until,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]


def _call(c: FailoverCluster, method: str, req, identity: str = "admin"):
    async def run():
        async with ControllerClient(list(c.ctl_addrs.values()), tls=c.tls(identity)) as cl:
            return await cl.call(method, req)
    return asyncio.run(run())


def test_mastership_moves_back_to_the_preferred_master(procs, tmp_path):
    c = FailoverCluster(procs, tmp_path, secure=True)
    c.start_all()
    m1, e1 = c.wait_master(timeout=60)
    c.wait_sync_state_set({1, 2, 3}, timeout=60)
    preferred = min({1, 2, 3} - {m1})
    with pytest.raises(ControllerRpcError) as ei:
        _call(c, "SetPreferredMaster", pb.SetPreferredMasterRequest(broker_name=GROUP, broker_id=preferred),
              identity="reader/ops")
    assert ei.value.reply_code == Code.CONTROLLER_PERMISSION_DENIED
    r = _call(c, "SetPreferredMaster", pb.SetPreferredMasterRequest(broker_name=GROUP, broker_id=preferred))
    assert r.replica_info.preferred_master_broker_id == preferred
    assert c.replica_info().replica_info.master_broker_id == m1, "nothing moves while auto rebalance is off"

    ack_log = tmp_path / "acks.jsonl"
    prod = c.producer("producer", ack_log, duration_s=8)
    wait_until(lambda: len(read_ack_log(ack_log)) >= 30, 30, "30 acks before the rebalance")
    _call(c, "UpdateControllerConfig", pb.UpdateControllerConfigRequest(
        config={"auto_rebalance_masters": "true", "rebalance_delay_ms": "500"}))
    m2, e2 = c.wait_master(timeout=60, not_id=m1, min_epoch=e1 + 1)
    assert m2 == preferred

    async def history() -> list[dict]:
        async with ControllerClient(list(c.ctl_addrs.values()), tls=c.tls("reader/ops")) as cl:
            rep = await cl.call("ExportEvents", pb.ExportEventsRequest(from_line=0, max_lines=10_000))
            return [json.loads(x) for x in rep.lines]
    moves = [e for e in asyncio.run(history()) if e["event"] == "ElectMaster" and e["master_epoch"] == e2]
    assert moves and moves[0]["reason"].startswith("handover:"), moves

    prod.popen.wait(60)
    assert prod.popen.returncode == 0, prod.log_text()[-3000:]
    acks = read_ack_log(ack_log)
    consumed = {m["msg_id"] for m in consume_routed(c.namesrv, tls_args=c.tls_args("reader/ops"))}
    assert not [a["msg_id"] for a in acks if a["msg_id"] not in consumed], "acked messages lost"
    # The preferred master keeps the role: nothing hands it on (same epoch after more scans).
    c.wait_sync_state_set({1, 2, 3}, timeout=60)
    info = c.replica_info().replica_info
    assert (info.master_broker_id, info.master_epoch) == (m2, e2)


def test_new_controller_surfaces_refuse_hostile_callers(procs, tmp_path):
    """MoveLeader, SaveSnapshot and SetPreferredMaster need the admin role; a broker's certificate
    can hold a BrokerSession only for its own brokerId; a malformed session request is refused."""
    import grpc

    c = FailoverCluster(procs, tmp_path, secure=True)
    c.start_all()
    c.wait_master(timeout=60)
    for method, req in (("MoveLeader", pb.MoveLeaderRequest(to_node_id="n2")),
                        ("SaveSnapshot", pb.SaveSnapshotRequest()),
                        ("SetPreferredMaster", pb.SetPreferredMasterRequest(broker_name=GROUP, broker_id=1))):
        with pytest.raises(ControllerRpcError) as ei:
            _call(c, method, req, identity="reader/ops")
        assert ei.value.reply_code == Code.CONTROLLER_PERMISSION_DENIED, method

    async def session(identity: str, broker_id: int, ack_mode: str):
        async with ControllerClient(list(c.ctl_addrs.values()), tls=c.tls(identity)) as cl:
            call = cl.stub(c.ctl_addrs["n1"]).BrokerSession(pb.BrokerSessionRequest(
                cluster_name="c1", broker_name=GROUP, broker_id=broker_id, ack_mode=ack_mode))
            try:
                return await asyncio.wait_for(call.read(), 10)
            finally:
                call.cancel()
    with pytest.raises(grpc.aio.AioRpcError) as ei:
        asyncio.run(session("broker/g1/1", 2, "all"))          # another broker's id: would fake its crash
    assert ei.value.code() == grpc.StatusCode.PERMISSION_DENIED
    ev = asyncio.run(session("broker/g1/1", 1, "bogus"))
    assert ev.header.code == Code.CONTROLLER_MALFORMED_REQUEST and not ev.tracked
