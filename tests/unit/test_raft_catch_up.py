"""A recovered node (lost log; `recover-member`) neither votes nor campaigns until a leader caught it
up to the leader's commit index; and the bounds every message must respect. Sans-IO core."""

from __future__ import annotations

import random

from autoswitch.controller.raft.bounds import MAX_TERM
from autoswitch.controller.raft.config import RaftConfig
from autoswitch.controller.raft.core import RaftCore
from autoswitch.controller.raft.messages import Entry, HardState, Message, MsgType, Role, VoteResult


def recovered(term: int = 7) -> RaftCore:
    return RaftCore("a", ["b", "c"], RaftConfig(), random.Random(1), 0, HardState(term, "a", 0), None, [],
                    catch_up=True)


def votes_out(c: RaftCore) -> list[Message]:
    rd = c.ready()
    c.advance(rd)
    return [m for m in rd.messages_early + rd.messages if m.type in (MsgType.VOTE, MsgType.PRE_VOTE)]


def test_a_catching_up_node_never_campaigns():
    c = recovered()
    for now in range(0, 60_000, 50):
        c.tick(now)
        assert votes_out(c) == [], f"campaigned at {now} ms"
    assert c.role != Role.LEADER


def test_a_catching_up_node_grants_no_vote_then_votes_normally_once_caught_up():
    c = recovered(term=7)
    # The scenario it prevents: b lacks an entry the lost log held; with an empty voter's help it
    # could win. While catching up, the answer is no, in any term.
    for term, pre in ((8, True), (8, False), (7, False)):
        c.step(Message(MsgType.PRE_VOTE if pre else MsgType.VOTE, "b", "a", term, seq=1))
        rd = c.ready()
        c.advance(rd)
        reply = [m for m in rd.messages if m.type in (MsgType.VOTE_RESP, MsgType.PRE_VOTE_RESP)]
        assert [m.vote_result for m in reply] == [VoteResult.REJECT_ALREADY_VOTED]
        assert c.vote == "a" and c.term == 7
    # A leader of term 8 sends entries 1..2 with its commit index 2: caught up at once.
    c.step(Message(MsgType.APPEND, "c", "a", 8, index=0, log_term=0, commit=2,
                   entries=(Entry(1, 1), Entry(2, 8))))
    rd = c.ready()
    assert rd.caught_up and not c.catching_up
    assert [e.index for e in rd.entries] == [1, 2], "the Ready that clears the marker also persists the entries"
    c.advance(rd)


def test_caught_up_only_when_the_log_reaches_the_leaders_commit():
    c = recovered(term=7)
    c.step(Message(MsgType.APPEND, "c", "a", 8, index=0, log_term=0, commit=5, entries=(Entry(1, 1), Entry(2, 8))))
    rd = c.ready()
    c.advance(rd)
    assert c.catching_up and not rd.caught_up, "log ends at 2, the leader committed 5"
    c.step(Message(MsgType.APPEND, "c", "a", 8, index=2, log_term=8, commit=5,
                   entries=(Entry(3, 8), Entry(4, 8), Entry(5, 8))))
    rd = c.ready()
    assert rd.caught_up and not c.catching_up
    c.advance(rd)
    assert not c.ready().caught_up, "reported once"
    # From now on an ordinary voter: a candidate with an up-to-date log gets its vote.
    c.step(Message(MsgType.VOTE, "b", "a", 9, index=5, log_term=8, seq=2, transfer=True))
    rd = c.ready()
    c.advance(rd)
    results = [m.vote_result for m in rd.messages if m.type == MsgType.VOTE_RESP]
    assert results and results[0] != VoteResult.REJECT_SMALL_LEDGER_END_INDEX


def test_terms_and_indexes_beyond_the_bounds_are_dropped():
    c = RaftCore("a", ["b", "c"], RaftConfig(), random.Random(1), 0, HardState(3, None, 0), None, [])
    for m in (Message(MsgType.HEARTBEAT, "b", "a", (1 << 64) - 1),
              Message(MsgType.HEARTBEAT, "b", "a", MAX_TERM + 1),
              Message(MsgType.VOTE, "b", "a", (1 << 64) - 1, seq=1),
              Message(MsgType.APPEND, "b", "a", 4, index=1 << 63, log_term=3)):
        c.step(m)
        rd = c.ready()
        c.advance(rd)
        assert c.term == 3 and rd.hard_state is None and not rd.messages, m
    c.step(Message(MsgType.HEARTBEAT, "b", "a", 4))            # an ordinary newer term still counts
    assert c.term == 4
