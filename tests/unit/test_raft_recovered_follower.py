"""After `recover-member` the node catches up while the same leader stays (issue 29, item 6: the
leader kept the node's old match index and ignored its rejections, so the cluster silently ran on
two of three). Sans-IO core in the in-process network, the recovered node booted as
recover-member leaves it: an empty log, hard state (highest term, vote = self), catch_up."""

from __future__ import annotations

import random

from autoswitch.controller.raft.core import RaftCore
from autoswitch.controller.raft.harness import SimNet, SimNode
from autoswitch.controller.raft.messages import HardState
from autoswitch.controller.raft.storage import MemoryStorage


def recover(net: SimNet, nid: str) -> SimNode:
    """What `autoswitch admin recover-member` writes, booted without a crash of the leader."""
    term = max(n.core.term for n in net.nodes.values())
    st = MemoryStorage()
    st.save(HardState(term, nid, 0), [])
    core = RaftCore(nid, [p for p in net.ids if p != nid], net.cfg, random.Random(7), net.now,
                    HardState(term, nid, 0), None, [], catch_up=True)
    from autoswitch.controller.raft.harness import KVStateMachine

    net.nodes[nid] = SimNode(core, st, KVStateMachine())
    return net.nodes[nid]


def test_a_recovered_follower_catches_up_under_the_same_leader():
    net = SimNet(["a", "b", "c"], seed=11)
    leader = net.wait_leader()
    for i in range(40):
        net.propose(leader, f"k{i}=v{i}".encode())
    net.run(500)
    lost = next(n for n in net.ids if n != leader)
    commit = net.nodes[leader].core.commit
    assert net.nodes[lost].core.log.last_index() >= commit
    net.crash(lost)
    net.run(50)
    recovered = recover(net, lost)
    for i in range(5):
        net.propose(leader, f"after{i}=x".encode())
    assert net.run_until(lambda: not recovered.core.catching_up
                         and recovered.core.log.last_index() >= net.nodes[leader].core.commit, 10_000), \
        ("the recovered node never caught up", recovered.core.log.last_index(), net.nodes[leader].core.commit)
    assert net.leader() == leader, "the same leader stayed"
    assert recovered.sm.kv.get("k0") == "v0" and recovered.sm.kv.get("after4") == "x"
