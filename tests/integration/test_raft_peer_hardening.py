"""Forged Raft messages sent with raw gRPC to a real 3-node controller cluster on 127.0.0.1.

Raft listens apart from the client port; every batch must carry the cluster id and a configured
member's name and member id, and every term/index must be in bounds. None of the forgeries below
changes a node's term or log, and the cluster keeps committing writes afterwards.
"""

from __future__ import annotations

import asyncio

import grpc
import pytest
from autoswitch.controller.client import ControllerClient
from autoswitch.controller.config import cluster_id
from autoswitch.controller.raft.messages import MsgType
from autoswitch.controller.raft.transport import member_id

from autoswitch.proto import controller_pb2 as pb
from autoswitch.proto import raft_pb2, raft_pb2_grpc
from tests.integration.controller_harness import Cluster, wait_leader

pytestmark = pytest.mark.integration

U64_MAX = (1 << 64) - 1


async def _send(addr: str, batch: raft_pb2.Batch) -> grpc.StatusCode:
    async with grpc.aio.insecure_channel(addr) as ch:
        try:
            await raft_pb2_grpc.RaftStub(ch).Stream(iter([batch]), timeout=60)
        except grpc.aio.AioRpcError as e:
            return e.code()
    return grpc.StatusCode.OK


async def _terms(c: ControllerClient, cl: Cluster) -> dict[str, int]:
    out = {}
    for nid, addr in cl.addrs.items():
        m = await c.call_node(addr, "GetMetaData", pb.GetMetaDataRequest(), timeout_s=30)
        out[nid] = m.raft_term
    return out


def test_forged_peer_messages_are_refused(procs, tmp_path):
    cl = Cluster(procs, tmp_path)
    cl.start_all()
    cid = cluster_id("autoswitch", cl.ids)

    async def scenario():
        async with ControllerClient(cl.spec, deadline_s=60) as c:
            await wait_leader(c)
            await c.apply_broker_id("c1", "g1", 1, "k1")          # a committed write: the log is not empty
            before = await _terms(c, cl)
            meta = await c.call_node(cl.addrs["n1"], "GetMetaData", pb.GetMetaDataRequest(), timeout_s=30)
            leader = meta.leader_id
            target = next(n for n in cl.ids if n != leader)
            raft_addr = cl.raft_addrs[target]
            poison = raft_pb2.RaftMessage(type=int(MsgType.HEARTBEAT), to=target, term=U64_MAX, commit=1,
                                          **{"from": leader})

            # 1. A non-member (claims a name nobody configured).
            evil = raft_pb2.RaftMessage(type=int(MsgType.HEARTBEAT), to=target, term=U64_MAX, **{"from": "evil"})
            code = await _send(raft_addr, raft_pb2.Batch(version=1, cluster=cid, messages=[evil], sender="evil",
                                                         sender_member=member_id(cid, "evil")))
            assert code == grpc.StatusCode.PERMISSION_DENIED
            # 2. The leader's name with a wrong member id.
            code = await _send(raft_addr, raft_pb2.Batch(version=1, cluster=cid, messages=[poison], sender=leader,
                                                         sender_member="0" * 16))
            assert code == grpc.StatusCode.PERMISSION_DENIED
            # 3. Another cluster's id.
            code = await _send(raft_addr, raft_pb2.Batch(version=1, cluster="not-this-cluster", messages=[poison],
                                                         sender=leader, sender_member=member_id(cid, leader)))
            assert code == grpc.StatusCode.FAILED_PRECONDITION
            # 4. Everything right but the term: beyond the bound, dropped by the core (no member
            #    id is a secret until mutual TLS proves who sends; the bound keeps the cluster alive).
            code = await _send(raft_addr, raft_pb2.Batch(version=1, cluster=cid, messages=[poison], sender=leader,
                                                         sender_member=member_id(cid, leader)))
            assert code == grpc.StatusCode.OK
            # 5. A forged APPEND from a non-member: claimed leader, term T+1, prev = (last index, T).
            t = before[target]
            forged = raft_pb2.RaftMessage(type=int(MsgType.APPEND), to=target, term=t + 1, index=3, log_term=t,
                                          commit=4, entries=[raft_pb2.Entry(index=4, term=t + 1, data=b"{}")],
                                          **{"from": "intruder"})
            code = await _send(raft_addr, raft_pb2.Batch(version=1, cluster=cid, messages=[forged],
                                                         sender="intruder", sender_member=member_id(cid, "intruder")))
            assert code == grpc.StatusCode.PERMISSION_DENIED
            # 6. The client port serves no Raft at all.
            code = await _send(cl.addrs[target], raft_pb2.Batch(version=1, cluster=cid, messages=[poison],
                                                                sender=leader, sender_member=member_id(cid, leader)))
            assert code == grpc.StatusCode.UNIMPLEMENTED

            after = await _terms(c, cl)
            assert all(v < 1 << 40 for v in after.values()), after
            assert after[target] <= before[target] + 2, (before, after)   # at most a real election or two
            # Still a working cluster: a write commits.
            await c.apply_broker_id("c1", "g1", 2, "k2")
            assert await c.get_next_broker_id("c1", "g1") == 3

    asyncio.run(scenario())
    log = cl.proc[next(n for n in cl.ids)].log_path.read_text() + "".join(
        cl.proc[n].log_path.read_text() for n in cl.ids[1:])
    assert '"raft_batch_refused"' in log and '"out_of_bounds"' in log


def test_a_flood_of_bad_input_writes_a_bounded_log(procs, tmp_path):
    """Issue 29, item 7: malformed Batch calls wrote 16.7 MB of log in 1.3 s and forged Raft
    messages over plaintext another 10.7 MB. One line per (peer, reason) per 10 s now."""
    cl = Cluster(procs, tmp_path)
    cl.start_all()
    cid = cluster_id("autoswitch", cl.ids)

    async def scenario():
        async with ControllerClient(cl.spec, deadline_s=60) as c:
            await wait_leader(c)
            # any member may claim to send (plaintext: names are claimed); the core drops the terms
            leader, target = cl.ids[0], cl.ids[1]
            before = cl.proc[target].log_path.stat().st_size
            bad_calls = [pb.BatchCall(method=m, request=b"\xff\xff\xff") for m in ("ElectMaster", "NoSuchMethod")]
            async with grpc.aio.insecure_channel(cl.addrs[target]) as ch:
                batch_rpc = ch.unary_unary("/autoswitch.controller.ControllerService/Batch",
                                           request_serializer=pb.BatchRequest.SerializeToString,
                                           response_deserializer=pb.BatchReply.FromString)
                for _ in range(5):
                    await batch_rpc(pb.BatchRequest(calls=bad_calls * 2000), timeout=60)
            poison = [raft_pb2.RaftMessage(type=int(MsgType.HEARTBEAT), to=target, term=U64_MAX, commit=1,
                                           **{"from": leader}) for _ in range(1000)]
            for _ in range(5):
                assert await _send(cl.raft_addrs[target], raft_pb2.Batch(
                    version=1, cluster=cid, messages=poison, sender=leader,
                    sender_member=member_id(cid, leader))) == grpc.StatusCode.OK
            for _ in range(50):         # new connections, wrong cluster: one voice per host
                await _send(cl.raft_addrs[target], raft_pb2.Batch(version=1, cluster="other", messages=poison[:1],
                                                                  sender=leader, sender_member="x"))
            await c.call_node(cl.addrs[target], "GetMetaData", pb.GetMetaDataRequest(), timeout_s=30)
            return target, before

    target, before = asyncio.run(scenario())
    grown = cl.proc[target].log_path.stat().st_size - before
    assert grown < 64 * 1024, f"{grown} bytes of log for 20,000 bad calls and 5,050 bad Raft messages"
