"""Core rules behind the failover and restart figures: a pre-vote is granted once the minimum
election timeout passed without leader contact (refused within it), a pre-vote refused by a lease
retries after the short back-off, and committed entries are handed out in bounded slices."""

from __future__ import annotations

import random

from autoswitch.controller.raft.config import RaftConfig
from autoswitch.controller.raft.core import RaftCore
from autoswitch.controller.raft.messages import Entry, HardState, Message, MsgType, Role, VoteResult

V = VoteResult
CFG = RaftConfig()          # heartbeat 100 ms x leak 4: minimum election timeout 400 ms


def _core(node: str = "a", term: int = 5, entries=(), commit: int = 0, cfg: RaftConfig = CFG) -> RaftCore:
    return RaftCore(node, [p for p in "abc" if p != node], cfg, random.Random(3), 0,
                    HardState(term, None, commit), None, list(entries))


def _follow(c: RaftCore, leader: str, now: int) -> None:
    c.tick(now)
    c.step(Message(MsgType.HEARTBEAT, leader, c.id, c.term, seq=1))
    c.advance(c.ready())


def _pre_vote_answer(c: RaftCore, now: int) -> VoteResult:
    c.tick(now)
    c.step(Message(MsgType.PRE_VOTE, "b", c.id, c.term + 1, index=0, log_term=0, seq=9))
    rd = c.ready()
    c.advance(rd)
    (r,) = [m for m in rd.messages if m.type == MsgType.PRE_VOTE_RESP]
    return r.vote_result


def test_pre_vote_refused_within_the_minimum_timeout_after_leader_contact():
    c = _core()
    _follow(c, "c", now=1000)
    assert _pre_vote_answer(c, 1000 + CFG.election_timeout_min_ms - 1) == V.REJECT_ALREADY_HAS_LEADER
    assert c.role == Role.FOLLOWER and c.term == 5


def test_pre_vote_granted_once_the_minimum_timeout_passed_even_before_own_timer_fires():
    c = _core()
    _follow(c, "c", now=1000)
    at = 1000 + CFG.election_timeout_min_ms
    assert c.election_deadline_ms > at or CFG.election_jitter_ms == 0   # our own timer has not fired
    assert _pre_vote_answer(c, at) == V.ACCEPT
    assert c.role == Role.FOLLOWER and c.term == 5 and c.vote is None    # a pre-vote changes nothing


def test_committed_entries_are_handed_out_in_slices_of_max_apply_entries():
    cfg = RaftConfig(max_apply_entries=7)
    ents = [Entry(i, 1, b"x") for i in range(1, 31)]
    c = _core(term=1, entries=ents, commit=30, cfg=cfg)
    sizes = []
    while c.has_ready():
        rd = c.ready()
        assert len(rd.committed_entries) <= 7
        if rd.committed_entries:
            assert rd.committed_entries[0].index == c.applied + 1
            sizes.append(len(rd.committed_entries))
        c.advance(rd)
    assert sum(sizes) == 30 and c.applied == 30 and len(sizes) == 5
