"""PeerSender against a real gRPC server on 127.0.0.1: failed connects leave no consumer that
steals later messages, and after the peer comes back every message sent is delivered in order."""

from __future__ import annotations

import asyncio

import grpc
import pytest
from autoswitch.controller.raft.config import RaftConfig
from autoswitch.controller.raft.messages import Message, MsgType
from autoswitch.controller.raft.transport import PeerSender, RaftServicer, grpc_options

from autoswitch.proto import raft_pb2_grpc
from tests.procs import free_port

pytestmark = pytest.mark.integration


def _hb(seq: int) -> Message:
    return Message(MsgType.HEARTBEAT, "a", "b", 1, seq=seq)


async def _serve(addr: str, cfg: RaftConfig, got: list[int]) -> grpc.aio.Server:
    server = grpc.aio.server(options=grpc_options(cfg))
    raft_pb2_grpc.add_RaftServicer_to_server(RaftServicer("autoswitch", lambda ms: got.extend(m.seq for m in ms),
                                                                 "b", members=("a", "b")),
                                             server)
    assert server.add_insecure_port(addr) != 0
    await server.start()
    return server


def test_sender_delivers_every_message_after_the_peer_returns_from_failed_connects():
    async def scenario() -> None:
        cfg = RaftConfig(reconnect_min_ms=10, reconnect_max_ms=40)
        addr = f"127.0.0.1:{free_port()}"
        sender = PeerSender("a", "b", addr, cfg, "autoswitch")
        sender.start()
        loop = asyncio.get_running_loop()
        try:
            # the peer is down: traffic makes the sender retry (and fail) many times
            deadline = loop.time() + 10
            seq = 0
            while sender.attempts < 8 and loop.time() < deadline:
                seq += 1
                sender.send(_hb(seq))
                await asyncio.sleep(0.01)
            assert sender.attempts >= 8
            await asyncio.sleep(0.1)
            # before the fix each failed call left a task blocked in queue.get(), one per attempt
            assert len(sender.queue._getters) <= 1, len(sender.queue._getters)

            got: list[int] = []
            server = await _serve(addr, cfg, got)
            try:
                deadline = loop.time() + 10
                while not got and loop.time() < deadline:       # until the stream is up
                    seq += 1
                    sender.send(_hb(seq))
                    await asyncio.sleep(0.02)
                assert got, "no message delivered after the peer came back"
                first_after = seq + 1
                for i in range(first_after, first_after + 20):
                    sender.send(_hb(i))
                    await asyncio.sleep(0)
                deadline = loop.time() + 10
                while (not got or got[-1] < first_after + 19) and loop.time() < deadline:
                    await asyncio.sleep(0.02)
                tail = [s for s in got if s >= first_after]
                assert tail == list(range(first_after, first_after + 20))
            finally:
                await server.stop(0)
        finally:
            await sender.stop()

    asyncio.run(scenario())
