"""Three RaftNodes on real gRPC + real files on 127.0.0.1 (in one process): commit, kill the
leader, a new leader takes over, every surviving state machine ends equal."""

from __future__ import annotations

import asyncio

import grpc
import pytest
from autoswitch.controller.raft import (
    NotLeader,
    ProposalTimeout,
    QuorumUnavailable,
    RaftConfig,
    RaftNode,
    RaftStopped,
)
from autoswitch.controller.raft.harness import KVStateMachine
from autoswitch.controller.raft.storage import MemoryStorage
from autoswitch.controller.raft.transport import GrpcRaftTransport

from tests.procs import free_port

pytestmark = pytest.mark.integration


async def _leader(nodes: dict[str, RaftNode], timeout: float = 10.0) -> RaftNode:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while loop.time() < deadline:
        leaders = [n for n in nodes.values() if n.is_leader]
        if len(leaders) == 1:
            return leaders[0]
        await asyncio.sleep(0.02)
    raise AssertionError(f"no single leader: {[n.status() for n in nodes.values()]}")


async def _propose(nodes: dict[str, RaftNode], data: bytes, timeout: float = 10.0):
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        ld = await _leader(nodes, max(0.1, deadline - loop.time()))
        try:
            return await ld.propose(data, timeout_s=2.0)
        except (NotLeader, ProposalTimeout, QuorumUnavailable):     # retried: our writes are idempotent
            if loop.time() > deadline:
                raise
            await asyncio.sleep(0.05)


def _node(node_id, peers, data_dir, sm, cfg, *, seed, server=None, **kw) -> RaftNode:
    transport = GrpcRaftTransport(node_id, peers, cfg, "autoswitch", server=server)
    return RaftNode(node_id, peers, data_dir, sm, cfg, transport=transport, seed=seed, **kw)


async def _scenario(tmp_path) -> None:
    ids = ["c1", "c2", "c3"]
    peers = {i: f"127.0.0.1:{free_port()}" for i in ids}
    cfg = RaftConfig(snapshot_every=50, compaction_keep=5)
    sms = {i: KVStateMachine() for i in ids}
    # c1 shares a gRPC server the way the controller does (server= before server.start())
    shared = grpc.aio.server()
    shared.add_insecure_port(peers["c1"])
    nodes = {i: _node(i, peers, tmp_path / i, sms[i], cfg, seed=k, server=shared if i == "c1" else None)
             for k, i in enumerate(ids)}
    try:
        for n in nodes.values():
            await n.start()
        await shared.start()
        for k in range(60):
            await _propose(nodes, f"k{k % 7}=v{k}".encode())
        ld = await _leader(nodes)
        await ld.read_index(2.0)
        old = ld.node_id
        await ld.stop()
        if old == "c1":
            await shared.stop(0.2)      # free the port: the restarted c1 below binds its own server
        del nodes[old]
        # the new leader must carry every committed entry (leader completeness)
        new = await _leader(nodes)
        assert new.node_id != old and new.term > 0
        await _propose(nodes, b"after=failover")
        await new.read_index(2.0)
        expected = dict(sms[new.node_id].kv)
        for k in range(60):
            assert expected[f"k{k % 7}"].startswith("v")
        assert expected["k4"] == "v53" and expected["after"] == "failover"
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 60       # readiness; generous for a loaded machine
        while any(sms[i].kv != expected for i in nodes) and loop.time() < deadline:
            await asyncio.sleep(0.02)
        for i in nodes:
            assert sms[i].kv == expected, i
        # the old leader restarts from its snapshot + log files and catches up
        sms[old] = KVStateMachine()
        nodes[old] = _node(old, peers, tmp_path / old, sms[old], cfg, seed=9)
        await nodes[old].start()
        await _propose(nodes, b"back=1")
        expected = dict(sms[(await _leader(nodes)).node_id].kv)
        deadline = loop.time() + 5
        while sms[old].kv != expected and loop.time() < deadline:
            await asyncio.sleep(0.02)
        assert sms[old].kv == expected
        # leadership transfer through the driver
        cur = await _leader(nodes)
        to = next(i for i in nodes if i != cur.node_id)
        await cur.transfer_leadership(to, timeout_s=5)
        assert nodes[to].is_leader and cur.leader_id == to
        assert await nodes[to].propose(b"transferred=yes", timeout_s=2) > 0
        with pytest.raises(NotLeader) as ei:
            await cur.propose(b"x=1", timeout_s=1)
        assert ei.value.leader_id == to and ei.value.leader_addr == peers[to]
    finally:
        for n in nodes.values():
            await n.stop()
        await shared.stop(0.2)


def test_raft_three_nodes_commit_kill_leader_new_leader_state_equal(tmp_path):
    asyncio.run(asyncio.wait_for(_scenario(tmp_path), 60))


class _DiskFull(MemoryStorage):
    """Fails every save, like a full disk, once `full` is set."""

    full = False

    def save(self, hard_state, entries) -> None:
        if self.full:
            raise OSError(28, "No space left on device")
        super().save(hard_state, entries)


async def _solo(tmp_path, sm: KVStateMachine, cfg: RaftConfig, **kw) -> RaftNode:
    """A started one-member cluster (it elects itself)."""
    node = _node("solo", {"solo": f"127.0.0.1:{free_port()}"}, tmp_path / "solo", sm, cfg, seed=1, **kw)
    await node.start()
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 10
    while not node.is_leader and loop.time() < deadline:
        await asyncio.sleep(0.01)
    return node


async def _disk_full(tmp_path) -> None:
    sm = KVStateMachine()
    disk = _DiskFull()
    node = await _solo(tmp_path, sm, RaftConfig(), storage=disk)
    try:
        assert await node.propose(b"a=1", timeout_s=5) > 0
        disk.full = True
        with pytest.raises(RaftStopped):
            await node.propose(b"b=2", timeout_s=5)                 # its save fails: never acknowledged
        assert sm.kv == {"a": "1"} and not node.is_leader
        with pytest.raises(RaftStopped):
            await node.propose(b"c=3", timeout_s=1)
    finally:
        await node.stop()


def test_persistence_failure_stops_the_node_instead_of_acknowledging(tmp_path):
    asyncio.run(asyncio.wait_for(_disk_full(tmp_path), 30))


async def _propose_many(tmp_path) -> None:
    sm = KVStateMachine()
    node = await _solo(tmp_path, sm, RaftConfig(max_entry_bytes=64))
    try:
        out = await node.propose_many([b"a=1", b"big=" + b"x" * 100, b"b=2", b"a=3"], timeout_s=5)
        # each entry its own outcome, in order: apply results (the index) and the refused one's error
        assert isinstance(out[1], QuorumUnavailable) and out[1].details["reason"] == "entry_too_big"
        assert [type(x) for x in (out[0], out[2], out[3])] == [int, int, int]
        assert out[0] < out[2] < out[3]
        assert sm.kv == {"a": "3", "b": "2"}
        with pytest.raises(QuorumUnavailable):
            await node.propose(b"big=" + b"x" * 100, timeout_s=5)
        await node.stop()
        with pytest.raises(RaftStopped):
            await node.propose_many([b"c=1"], timeout_s=1)
    finally:
        await node.stop()


def test_propose_many_gives_each_entry_its_own_outcome(tmp_path):
    asyncio.run(asyncio.wait_for(_propose_many(tmp_path), 30))
