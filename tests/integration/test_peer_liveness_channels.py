"""A liveness query in flight when its peer leaves the voters (real gRPC on 127.0.0.1).

Closing a grpc.aio channel cancels the calls on it, and the CancelledError surfaces in the task
that awaits them. The leader's dead-master scan awaits these queries; a membership change that
closed a peer's channel mid-query once ended that scan for good: the node, leader later, saw its
master crash and elected nobody (found in a full test run: 60 s without a master)."""

from __future__ import annotations

import asyncio

import grpc
import pytest
from autoswitch.controller.config import ControllerConfig
from autoswitch.controller.failover.peers import PeerLiveness

from autoswitch.proto import controller_pb2 as pb
from autoswitch.proto import controller_pb2_grpc as pbg


class _SlowPeer(pbg.ControllerServiceServicer):
    def __init__(self) -> None:
        self.asked = asyncio.Event()

    async def QueryLiveness(self, request, context):
        self.asked.set()
        await asyncio.sleep(0.5)
        return pb.QueryLivenessReply(header=pb.ReplyHeader(code=0), opinions=[
            pb.LivenessOpinion(broker=k, no_opinion=True, last_heard_ms_ago=-1) for k in request.brokers])


async def _with_peer(body) -> None:
    server = grpc.aio.server()
    peer = _SlowPeer()
    pbg.add_ControllerServiceServicer_to_server(peer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        cfg = ControllerConfig(node_id="n1", peers={"n1": "127.0.0.1:1", "n2": f"127.0.0.1:{port}"})
        peers = PeerLiveness(cfg, "n1")
        try:
            await body(peers, peer)
        finally:
            await peers.close()
    finally:
        await server.stop(None)


def test_a_peer_leaving_mid_query_is_a_missing_answer_not_the_end_of_the_asker():
    async def body(peers: PeerLiveness, peer: _SlowPeer) -> None:
        q = asyncio.create_task(peers.query([("g1", 1)], timeout_s=5))
        await asyncio.wait_for(peer.asked.wait(), 10)
        peers.set_peers({"n1": "127.0.0.1:1"})          # n2 left the voters while we ask it
        got = await asyncio.wait_for(q, 10)             # no CancelledError into the scan
        assert set(got) <= {"n2"}
        assert not q.cancelled()

    asyncio.run(_with_peer(body))


def test_a_query_whose_channel_closes_under_it_counts_the_peer_as_silent():
    async def body(peers: PeerLiveness, peer: _SlowPeer) -> None:
        q = asyncio.create_task(peers.query([("g1", 1)], timeout_s=5))
        await asyncio.wait_for(peer.asked.wait(), 10)
        await peers._channels["n2"].close()             # what a close without grace does to a call
        assert await asyncio.wait_for(q, 10) == {}

    asyncio.run(_with_peer(body))


def test_cancelling_the_asker_still_cancels_it():
    async def body(peers: PeerLiveness, peer: _SlowPeer) -> None:
        q = asyncio.create_task(peers.query([("g1", 1)], timeout_s=5))
        await asyncio.wait_for(peer.asked.wait(), 10)
        q.cancel()
        with pytest.raises(asyncio.CancelledError):
            await q

    asyncio.run(_with_peer(body))
