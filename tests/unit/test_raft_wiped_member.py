"""Issue 30 item 3: a controller whose data directory was wiped restarts empty with the same id.
It used to be taken for a fresh member: no vote remembered, an empty log that makes every
candidate look up to date. With the committed entry on the leader and this node only, it helped
the third node -- which lacks the entry -- win, and the committed entry was replaced. Now an
empty node that sees any sign of an existing log (a candidate or leader with entries) becomes a
catching-up node: no votes, no campaign until a leader brought it up to its commit index."""

from __future__ import annotations

from autoswitch.controller.raft.harness import SimNet
from autoswitch.controller.raft.messages import Role


def test_a_wiped_member_does_not_help_elect_a_leader_lacking_a_committed_entry():
    net = SimNet(["a", "b", "c"], seed=5)
    leader = net.wait_leader()
    for i in range(5):
        net.propose(leader, f"k{i}=v{i}".encode())
    net.run(300)
    b, c = [n for n in net.ids if n != leader]
    net.isolate(c)                                   # c misses what follows
    idx = net.propose(leader, b"committed=yes")
    assert net.run_until(lambda: net.nodes[leader].core.commit >= idx, 5_000)
    assert net.nodes[c].core.log.last_index() < idx
    wiped = net.wipe(b)
    assert wiped.core.fresh
    net.heal()
    net.isolate(leader)                              # only the wiped node and c can talk
    net.run(5_000)
    assert wiped.core.catching_up and not wiped.core.fresh
    assert net.nodes[c].core.role != Role.LEADER, "c lacks a committed entry: it must not win"
    assert wiped.core.role != Role.LEADER
    net.heal()                                       # the old leader is back: b catches up from it
    assert net.run_until(lambda: not wiped.core.catching_up, 10_000)
    new_leader = net.wait_leader()
    assert net.run_until(lambda: all(n.sm.kv.get("committed") == "yes" for n in net.nodes.values()), 10_000), \
        f"the committed entry survived on every node (leader {new_leader})"


def test_a_new_cluster_of_empty_members_still_elects_and_a_late_member_catches_up():
    net = SimNet(["a", "b", "c"], seed=9)
    net.isolate("c")                                 # c starts late
    leader = net.wait_leader()
    idx = net.propose(leader, b"x=1")
    assert net.run_until(lambda: net.nodes[leader].core.commit >= idx, 5_000)
    assert all(not net.nodes[n].core.fresh for n in ("a", "b"))
    net.heal()
    cn = net.nodes["c"].core
    assert net.run_until(lambda: cn.log.last_index() >= idx and not cn.catching_up, 10_000)
    assert not cn.fresh


def test_a_wiped_member_catches_up_while_the_cluster_writes_nothing():
    """The leader's match for it dates from before the wipe and it had nothing new to append, so
    it sent only heartbeats and the node never caught up (seen with real processes). A catching-up
    node's heartbeat reply now says where its log ends."""
    net = SimNet(["a", "b", "c"], seed=3)
    leader = net.wait_leader()
    for i in range(5):
        net.propose(leader, f"k{i}=v{i}".encode())
    net.run(300)
    follower = next(n for n in net.ids if n != leader)
    wiped = net.wipe(follower)
    assert net.run_until(lambda: not wiped.core.catching_up and wiped.sm.kv.get("k4") == "v4", 10_000)
    assert not wiped.core.fresh
