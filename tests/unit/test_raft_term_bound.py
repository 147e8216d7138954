"""No single message can bring a node to the term bound, and no campaign enters it (issue 29,
critical 2: one heartbeat at term 2^40 stopped a controller cluster for good, since the next
election needed a term every node drops). Sans-IO core and the in-process network."""

from __future__ import annotations

import random

from autoswitch.controller.raft.bounds import MAX_TERM, MAX_TERM_JUMP, out_of_bounds
from autoswitch.controller.raft.config import RaftConfig
from autoswitch.controller.raft.core import RaftCore
from autoswitch.controller.raft.harness import SimNet
from autoswitch.controller.raft.messages import HardState, Message, MsgType, Role, VoteResult


def core(term: int) -> RaftCore:
    return RaftCore("a", ["b", "c"], RaftConfig(), random.Random(1), 0, HardState(term, None, 0), None, [])


def step(c: RaftCore, m: Message) -> list[Message]:
    c.step(m)
    rd = c.ready()
    c.advance(rd)
    return rd.messages_early + rd.messages


def test_a_heartbeat_at_the_bound_is_dropped_and_the_cluster_keeps_electing():
    net = SimNet(["a", "b", "c"], seed=3)
    leader = net.wait_leader()
    term = net.nodes[leader].core.term
    follower = next(n for n in net.ids if n != leader)
    net.nodes[follower].core.step(Message(MsgType.HEARTBEAT, leader, follower, MAX_TERM, commit=1))
    # the message is dropped; the term climbs at most one step towards it (the peer's budget for
    # this window, part of it spent by the election), no further
    assert term < net.nodes[follower].core.term <= term + MAX_TERM_JUMP, "the forged term was adopted"
    # and elections still work: the leader dies, another is elected in a term just above
    net.crash(leader)
    assert net.run_until(lambda: net.leader() not in (None, leader), 20_000)
    new = net.leader()
    assert new is not None and term < net.nodes[new].core.term < term + MAX_TERM_JUMP + 10


def test_the_jump_bound_and_its_neighbours():
    # within the jump the message is taken; beyond it the term climbs MAX_TERM_JUMP and the
    # message is dropped (no leader, no answer): a node far behind catches up in steps
    for jump, taken in ((MAX_TERM_JUMP - 1, True), (MAX_TERM_JUMP, True), (MAX_TERM_JUMP + 1, False)):
        c = core(5)
        step(c, Message(MsgType.HEARTBEAT, "b", "a", 5 + jump, commit=0))
        assert c.term == 5 + min(jump, MAX_TERM_JUMP) and (c.leader_id == "b") is taken, (jump, c.term)
    for t in (MAX_TERM_JUMP + 6, MAX_TERM):                   # votes too: no jump through a vote request
        c = core(5)
        out = step(c, Message(MsgType.VOTE, "b", "a", t, seq=1))
        assert c.term == 5 + MAX_TERM_JUMP and c.vote is None and not out


def test_the_field_bound_and_its_neighbours():
    assert out_of_bounds(Message(MsgType.HEARTBEAT, "b", "a", MAX_TERM)) is None
    assert out_of_bounds(Message(MsgType.HEARTBEAT, "b", "a", MAX_TERM + 1)) == "term"
    c = core(MAX_TERM - 3)
    step(c, Message(MsgType.HEARTBEAT, "b", "a", MAX_TERM + 1))
    assert c.term == MAX_TERM - 3
    step(c, Message(MsgType.HEARTBEAT, "b", "a", MAX_TERM - 2))
    assert c.term == MAX_TERM - 2 and c.leader_id == "b"


def test_no_campaign_enters_the_last_term():
    cfg = RaftConfig(pre_vote=False)
    for term, campaigns in ((MAX_TERM - 3, True), (MAX_TERM - 2, True), (MAX_TERM - 1, False)):
        c = RaftCore("a", ["b", "c"], cfg, random.Random(1), 0, HardState(term, None, 0), None, [])
        votes = []
        for now in range(0, 5_000, 10):
            c.tick(now)
            rd = c.ready()
            c.advance(rd)
            votes += [m for m in rd.messages_early + rd.messages if m.type == MsgType.VOTE]
        assert bool(votes) is campaigns, (term, votes[:1])
        assert c.term <= MAX_TERM - 1
        assert all(m.term < MAX_TERM for m in votes)


def test_a_node_far_behind_catches_up_in_bounded_steps():
    """Honest lag beyond the jump bound: the node's vote rounds learn the others' term from their
    rejections and climb to it in steps of at most MAX_TERM_JUMP, then follow the leader."""
    c = RaftCore("a", ["b", "c"], RaftConfig(pre_vote=False), random.Random(1), 0, HardState(5, None, 0), None, [])
    far = 5 + 3 * MAX_TERM_JUMP + 7
    now = 0
    for _ in range(40):
        if c.term >= far:
            break
        now += 2_000
        c.tick(now)
        rd = c.ready()
        c.advance(rd)
        for m in rd.messages_early + rd.messages:
            if m.type == MsgType.VOTE:
                before = c.term
                step(c, Message(MsgType.VOTE_RESP, m.to, "a", far, seq=m.seq, reject=True,
                                vote_result=VoteResult.REJECT_EXPIRED_VOTE_TERM))
                assert c.term - before <= MAX_TERM_JUMP
        now += 10
        c.tick(now)
    assert c.term >= far - MAX_TERM_JUMP, c.term
    step(c, Message(MsgType.HEARTBEAT, "b", "a", far, commit=0))
    assert c.term == far and c.role == Role.FOLLOWER and c.leader_id == "b"


def test_a_node_joining_a_cluster_past_the_jump_climbs_to_its_leaders_term():
    """A joining node (no configuration yet, term 0) used to drop every heartbeat of a leader more
    than MAX_TERM_JUMP terms ahead, for good: a cluster that had held 65 elections could not add a
    member. Each heartbeat now raises the term by what the bounds allow; within a few windows the
    node follows (the simulator found it, issue 59)."""
    from autoswitch.controller.consensus.membership import Membership

    c = RaftCore("n4", [], RaftConfig(), random.Random(1), 0, None, None, [], membership=Membership())
    window = c.cfg.election_timeout_min_ms
    now = 0
    for _ in range(10):
        c.tick(now)
        step(c, Message(MsgType.HEARTBEAT, "n1", "n4", 300, commit=0))
        if c.leader_id == "n1":
            break
        now += window
    assert c.term == 300 and c.leader_id == "n1"
    assert now <= 5 * window, now
