"""The Batch RPC and the client's coalescing, on three real ControllerNodes (real gRPC, files).

Each call of a batch is handled as if it came alone: its own validation, typed reply and Raft
entry; a call that cannot be dispatched (unknown method, undecodable bytes) gets a typed code of
its own; an oversized batch is refused as a whole. The client coalesces concurrent calls into
few Batch RPCs, gives the same answers as unbatched calls, and falls back to unary RPCs against
a server without Batch.
"""

from __future__ import annotations

import asyncio

import pytest
from autoswitch.controller import config as cfgmod
from autoswitch.controller.client import ControllerClient
from autoswitch.controller.codes import Code
from autoswitch.controller.server import service as svc
from autoswitch.controller.server.node import ControllerNode

from autoswitch.proto import controller_pb2 as pb
from tests.integration.controller_harness import wait_leader
from tests.procs import HOST, free_port

pytestmark = pytest.mark.integration


async def _cluster(tmp_path):
    ports = [free_port() for _ in range(3)]
    peers = ",".join(f"n{i + 1}={HOST}:{p}" for i, p in enumerate(ports))
    nodes = [ControllerNode(cfgmod.load(None, node_id=f"n{i + 1}", peers=peers,
                                        data_dir=str(tmp_path / f"n{i + 1}")))
             for i in range(3)]
    for n in nodes:
        await n.start()
    return nodes, ",".join(f"{HOST}:{p}" for p in ports)


def _call(method: str, req) -> pb.BatchCall:
    return pb.BatchCall(method=method, request=req.SerializeToString())


def test_batch_calls_get_their_own_typed_replies(tmp_path):
    async def go():
        nodes, spec = await _cluster(tmp_path)
        try:
            async with ControllerClient(spec) as c:
                leader = await wait_leader(c)
                follower = next(a for a in spec.split(",") if a != leader)
                stub = c.stub(leader)
                reply = await stub.Batch(pb.BatchRequest(calls=[
                    _call("ApplyBrokerId", pb.ApplyBrokerIdRequest(cluster_name="c", broker_name="bt",
                                                                   applied_broker_id=1, register_check_code="x")),
                    pb.BatchCall(method="NoSuchMethod", request=b""),
                    pb.BatchCall(method="WatchReplicaInfo", request=b""),           # a stream: not batchable
                    pb.BatchCall(method="AlterSyncStateSet", request=b"\xff\xff\xff"),  # undecodable
                    _call("BrokerHeartbeat", pb.BrokerHeartbeatRequest(broker_name="bt", broker_id=0)),
                    _call("GetNextBrokerId", pb.GetNextBrokerIdRequest(cluster_name="c", broker_name="bt")),
                ]), timeout=10)
                assert reply.header.code == Code.SUCCESS
                r = reply.replies
                assert len(r) == 6
                assert r[0].code == 0 and pb.ApplyBrokerIdReply.FromString(r[0].reply).header.code == Code.SUCCESS
                assert r[1].code == Code.CONTROLLER_MALFORMED_REQUEST and not r[1].reply
                assert r[2].code == Code.CONTROLLER_MALFORMED_REQUEST
                assert r[3].code == Code.CONTROLLER_MALFORMED_REQUEST and "decode" in r[3].message
                hb = pb.BrokerHeartbeatReply.FromString(r[4].reply)
                assert r[4].code == 0 and hb.header.code == Code.CONTROLLER_MALFORMED_REQUEST
                # the calls of one batch run concurrently: the id read may or may not see the write
                assert pb.GetNextBrokerIdReply.FromString(r[5].reply).next_broker_id in (1, 2)

                # a follower answers each write with NOT_LEADER and the leader's address
                for _ in range(100):    # until the follower has heard from the new leader
                    reply = await c.stub(follower).Batch(pb.BatchRequest(calls=[
                        _call("ApplyBrokerId", pb.ApplyBrokerIdRequest(cluster_name="c", broker_name="bt",
                                                                       applied_broker_id=2, register_check_code="y"))]),
                        timeout=10)
                    sub = pb.ApplyBrokerIdReply.FromString(reply.replies[0].reply)
                    assert sub.header.code == Code.CONTROLLER_NOT_LEADER
                    if sub.header.leader_addr:
                        break
                    await asyncio.sleep(0.05)
                assert sub.header.leader_addr == leader

                # more calls than the limit: the whole batch is refused, nothing runs
                too_many = [pb.BatchCall(method="GetMetaData", request=b"")] * (svc.MAX_BATCH_CALLS + 1)
                reply = await stub.Batch(pb.BatchRequest(calls=too_many), timeout=10)
                assert reply.header.code == Code.CONTROLLER_MALFORMED_REQUEST and not reply.replies

                # the state saw exactly the one valid write
                assert await c.get_next_broker_id("c", "bt") == 2
        finally:
            for n in nodes:
                await n.stop()

    asyncio.run(go())


def test_client_coalesces_concurrent_calls_with_the_same_answers(tmp_path, monkeypatch):
    batches: list[int] = []
    real = svc.ControllerServicer.Batch

    async def counting(self, request, context):
        batches.append(len(request.calls))
        return await real(self, request, context)

    monkeypatch.setattr(svc.ControllerServicer, "Batch", counting)

    async def go():
        nodes, spec = await _cluster(tmp_path)
        try:
            async with ControllerClient(spec) as c, ControllerClient(spec, batch=False) as plain:
                await wait_leader(c)
                n = 64
                await asyncio.gather(*(c.apply_broker_id("c", f"g{i}", 1, f"code{i}") for i in range(n)))
                batches.clear()
                got = await asyncio.gather(*(c.register_broker("c", f"g{i}", 1, f"{HOST}:{1000 + i}")
                                             for i in range(n)))
                # 64 concurrent writes travelled in a handful of RPCs, each answered on its own
                assert sum(batches) == n and len(batches) <= 8, batches
                assert [g.broker_name for g in got] == [f"g{i}" for i in range(n)]
                before = len(batches)
                via_plain = await asyncio.gather(*(plain.get_replica_info(f"g{i}") for i in range(n)))
                assert len(batches) == before          # batch=False: plain unary calls
                via_batch = await asyncio.gather(*(c.get_replica_info(f"g{i}") for i in range(n)))
                assert [x.SerializeToString() for x in via_batch] == [x.SerializeToString() for x in via_plain]
                # a typed refusal reaches its own caller only
                res = await asyncio.gather(c.apply_broker_id("c", "g0", 1, "other-code"),
                                           c.get_next_broker_id("c", "g1"), return_exceptions=True)
                assert getattr(res[0], "code", None) is not None and res[1] == 2
        finally:
            for n in nodes:
                await n.stop()

    asyncio.run(go())


def test_batched_writes_answer_exactly_like_unary_ones(tmp_path):
    """The writes a Batch proposes together (ApplyBrokerId, RegisterBroker, AlterSyncStateSet)
    get the same typed codes a unary call gets: validation errors, state-machine refusals, and a
    proposed member nobody heard (that call goes through the full handler: peers are asked)."""

    def alter(group, epoch, members, sss_epoch):
        return pb.AlterSyncStateSetRequest(broker_name=group, master_broker_id=1, master_epoch=epoch,
                                           new_sync_state_set=members, sync_state_set_epoch=sss_epoch)

    async def go():
        nodes, spec = await _cluster(tmp_path)
        try:
            async with ControllerClient(spec, batch=False) as c:
                leader = await wait_leader(c)
                for bid in (1, 2):
                    await c.apply_broker_id("c", "bq", bid, f"code-{bid}")
                    await c.register_broker("c", "bq", bid, f"{HOST}:{30000 + bid}")
                    await c.heartbeat_all(pb.BrokerHeartbeatRequest(
                        cluster_name="c", broker_name="bq", broker_id=bid, broker_address=f"{HOST}:{30000 + bid}",
                        epoch=1, max_offset=10, confirm_offset=10))
                info = await c.elect_master("c", "bq", 1, designate=True)
                ep, sse = info.master_epoch, info.sync_state_set_epoch
                calls = [
                    ("AlterSyncStateSet", alter("bq", ep, [1, 2], sse)),           # ok
                    ("AlterSyncStateSet", alter("bq", ep, [1, 1], sse)),           # duplicates
                    ("AlterSyncStateSet", alter("bq", ep + 5, [1], sse)),          # stale/wrong epoch
                    ("AlterSyncStateSet", alter("bq", ep, [1, 2, 7], sse + 1)),    # 7: heard by nobody
                    ("RegisterBroker", pb.RegisterBrokerRequest(cluster_name="c", broker_name="bq", broker_id=2,
                                                                broker_address="no-port")),
                    ("ApplyBrokerId", pb.ApplyBrokerIdRequest(cluster_name="c", broker_name="bq2",
                                                              applied_broker_id=1, register_check_code="z")),
                    ("ApplyBrokerId", pb.ApplyBrokerIdRequest(cluster_name="c", broker_name="bq2",
                                                              applied_broker_id=1, register_check_code="other")),
                ]
                batch = await c.stub(leader).Batch(pb.BatchRequest(calls=[_call(m, r) for m, r in calls]),
                                                   timeout=10)
                got = [svc.BATCHABLE[m][1].FromString(sub.reply).header.code
                       for (m, _r), sub in zip(calls, batch.replies, strict=True)]
                assert got[0] == Code.SUCCESS
                assert got[1] == Code.CONTROLLER_MALFORMED_REQUEST
                assert got[2] == Code.CONTROLLER_FENCED_MASTER_EPOCH
                assert got[3] == Code.CONTROLLER_INVALID_REPLICAS    # asked the peers, nobody heard 7
                assert got[4] == Code.CONTROLLER_MALFORMED_REQUEST
                assert got[5] == Code.SUCCESS
                assert got[6] == int(Code.CONTROLLER_BROKER_ID_INVALID)   # id 1 taken under another check code
                # the same refusals, asked one by one (the state moved on only by calls 0 and 5)
                stub = c.stub(leader)
                for k in (1, 2, 3, 4, 6):
                    m, r = calls[k]
                    unary = await getattr(stub, m)(r, timeout=10)
                    assert unary.header.code == got[k], (m, k, unary.header)
        finally:
            for n in nodes:
                await n.stop()

    asyncio.run(go())
