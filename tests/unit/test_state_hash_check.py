"""The online state hash check (controller/server/state_check.py): the hash is equal wherever the
same entries were applied and differs otherwise; the verdict names the odd member; a silenced
Raft node neither votes, campaigns nor leads. Sans-IO: the state machine and the Raft core."""

from __future__ import annotations

import asyncio
import random
from types import SimpleNamespace

from autoswitch.controller import messages as m
from autoswitch.controller.raft.config import RaftConfig
from autoswitch.controller.raft.core import RaftCore
from autoswitch.controller.raft.messages import Entry, HardState, Message, MsgType, Role, VoteResult
from autoswitch.controller.server.state_check import (
    OK,
    PEERS_DIFFER,
    SELF_DIFFERS,
    UNDECIDED,
    StateCheck,
    verdict,
)
from autoswitch.controller.state.statemachine import ControllerStateMachine


def _sm(*reqs: m.Request) -> ControllerStateMachine:
    sm = ControllerStateMachine()
    for r in reqs:
        sm.apply(sm.last_applied_index + 1, m.encode_request(r))
    return sm


REG = m.ApplyBrokerIdRequest(cluster_name="c", broker_name="g", applied_broker_id=1, register_check_code="x", ts_ms=5)


def test_members_that_applied_the_same_entries_hash_alike_at_the_same_index():
    a, b = _sm(REG), _sm(REG)
    ra = a.apply(2, m.encode_request(m.CheckStateHashRequest(ts_ms=9)))
    rb = b.apply(2, m.encode_request(m.CheckStateHashRequest(ts_ms=9)))
    assert ra.ok and ra.data == rb.data and list(a.state_hashes) == list(b.state_hashes) == [(2, ra.data["hash"])]
    c = _sm(m.ApplyBrokerIdRequest(cluster_name="c", broker_name="g", applied_broker_id=1, register_check_code="y",
                                   ts_ms=5))
    rc = c.apply(2, m.encode_request(m.CheckStateHashRequest(ts_ms=9)))
    assert rc.data != ra.data, "another check code registered: another state, another hash"
    # the marker changes no group, and a snapshot round trip keeps the hash
    d = ControllerStateMachine()
    d.restore(a.snapshot())
    assert d.apply(3, m.encode_request(m.CheckStateHashRequest())).data == a.apply(
        3, m.encode_request(m.CheckStateHashRequest())).data


def test_verdict_names_the_odd_member():
    assert verdict("h", {"b": "h", "c": "h"}, 3) == verdict("h", {"b": "h", "c": None}, 3)
    assert verdict("h", {"b": "h", "c": "h"}, 3).kind == OK
    v = verdict("x", {"b": "h", "c": "h"}, 3)
    assert (v.kind, v.differ, v.majority_hash) == (SELF_DIFFERS, ("b", "c"), "h")
    assert verdict("h", {"b": "h", "c": "x"}, 3).kind == PEERS_DIFFER
    assert verdict("h", {"b": "x", "c": "y"}, 3).kind == UNDECIDED
    assert verdict("x", {"b": "h", "c": None}, 3).kind == UNDECIDED, "one other member is not a majority"
    assert verdict("x", {"b": "h", "c": "h", "d": None, "e": None}, 5).kind == UNDECIDED
    assert verdict("x", {"b": "h", "c": "h", "d": "h", "e": None}, 5).kind == SELF_DIFFERS


def test_a_member_in_the_minority_silences_itself_once():
    silenced: list[str] = []
    peers = SimpleNamespace(state_hashes=lambda index, t: _answers({"b": "h", "c": "h"}))
    check = StateCheck("a", lambda: [(7, "x")], peers, lambda: 3, _no_propose, silenced.append, 1.0, 0.1,
                       _Log())
    v = asyncio.run(check.compare(7, "x"))
    assert v.kind == SELF_DIFFERS and silenced == ["state_hash_mismatch"] and check.corrupt
    assert check.mismatches == 1 and check.last["differ"] == ["b", "c"]


async def _answers(hashes: dict[str, str]) -> dict[str, SimpleNamespace]:
    return {p: SimpleNamespace(found=True, hash=h) for p, h in hashes.items()}


async def _no_propose(req: m.Request) -> None:
    raise AssertionError("not the leader here")


class _Log:
    def __getattr__(self, name: str):
        return lambda *a, **k: None


def _node(term: int = 3) -> RaftCore:
    return RaftCore("a", ["b", "c"], RaftConfig(), random.Random(1), 0, HardState(term, None, 0), None, [])


def _out(c: RaftCore) -> list[Message]:
    rd = c.ready()
    c.advance(rd)
    return rd.messages_early + rd.messages


def test_a_silenced_node_grants_no_vote_and_never_campaigns():
    c = _node()
    c.silence("state_hash_mismatch")
    for term, pre in ((4, True), (4, False)):
        c.step(Message(MsgType.PRE_VOTE if pre else MsgType.VOTE, "b", "a", term, seq=1))
        replies = [x.vote_result for x in _out(c) if x.type in (MsgType.VOTE_RESP, MsgType.PRE_VOTE_RESP)]
        assert replies == [VoteResult.REJECT_ALREADY_VOTED]
    for now in range(0, 30_000, 50):
        c.tick(now)
        assert not [x for x in _out(c) if x.type in (MsgType.VOTE, MsgType.PRE_VOTE)], f"campaigned at {now}"
    # it still follows a leader (its log stays whole for recover-member)
    c.step(Message(MsgType.APPEND, "b", "a", 5, index=0, log_term=0, commit=1, entries=(Entry(1, 5),)))
    _out(c)
    assert c.log.last_index() == 1 and c.role == Role.FOLLOWER and c.leader_id == "b"


def test_a_silenced_leader_steps_down():
    c = RaftCore("a", [], RaftConfig(), random.Random(1), 0, HardState(1, "a", 0), None, [])
    for now in range(0, 10_000, 50):
        c.tick(now)
        _out(c)
        if c.role == Role.LEADER:
            break
    assert c.role == Role.LEADER
    c.silence("state_hash_mismatch")
    assert c.role == Role.FOLLOWER and c.leader_id is None
    for now in range(10_000, 30_000, 50):
        c.tick(now)
        _out(c)
        assert c.role != Role.LEADER
