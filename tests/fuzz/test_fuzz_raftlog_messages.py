"""Fuzz the Raft core's message input: arbitrary (often malformed or hostile) messages and ticks
are dropped, answered or refused with a typed RaftError; the core never raises anything else and
its invariants (term monotonic, commit <= last index, contiguous non-decreasing log) hold."""

from __future__ import annotations

import random

from autoswitch.controller.consensus.errors import RaftError
from autoswitch.controller.raft.config import RaftConfig
from autoswitch.controller.raft.core import RaftCore
from autoswitch.controller.raft.messages import (
    Entry,
    EntryKind,
    HardState,
    Message,
    MsgType,
    Snapshot,
    VoteResult,
)
from hypothesis import given, settings
from hypothesis import strategies as st

IDS = ["a", "b", "c", "zz"]

entries = st.lists(st.builds(Entry, st.integers(0, 12), st.integers(0, 6), st.binary(max_size=8),
                             st.sampled_from(list(EntryKind))), max_size=5)
messages = st.builds(
    Message,
    type=st.sampled_from(list(MsgType)),
    frm=st.sampled_from(IDS),
    to=st.sampled_from(["a", "a", "a", "b"]),
    term=st.integers(0, 6),
    index=st.integers(0, 12),
    log_term=st.integers(0, 6),
    entries=entries.map(tuple),
    commit=st.integers(0, 14),
    reject=st.booleans(),
    reject_hint=st.integers(0, 12),
    reject_term=st.integers(0, 6),
    vote_result=st.sampled_from(list(VoteResult)),
    seq=st.integers(0, 4),
    transfer=st.booleans(),
    snap_index=st.integers(0, 12),
    snap_term=st.integers(0, 6),
    snap_offset=st.integers(0, 8),
    snap_total=st.integers(0, 8),
    snap_crc=st.integers(0, 2**32 - 1),
    snap_done=st.booleans(),
    snap_data=st.binary(max_size=8),
)
actions = st.lists(st.one_of(messages, st.integers(1, 300)), max_size=40)
long_actions = st.lists(st.one_of(messages, messages, st.integers(1, 300)), min_size=15, max_size=40)


def check(c: RaftCore, last_term: int) -> None:
    assert c.term >= last_term
    assert c.applied <= c.commit <= c.log.last_index()
    prev_i, prev_t = c.log.offset, c.log.offset_term
    for e in c.log.entries:
        assert e.index == prev_i + 1 and e.term >= prev_t
        prev_i, prev_t = e.index, e.term
    assert c.log.last_term() <= c.term


@settings(max_examples=120, deadline=None)
@given(actions, st.integers(0, 3), st.booleans())
def test_arbitrary_messages_never_crash_the_core(acts, start_term, with_log):
    log = [Entry(1, 1), Entry(2, 1)] if with_log else []
    c = RaftCore("a", ["b", "c"], RaftConfig(snapshot_chunk_bytes=4), random.Random(0), 0,
                 HardState(max(start_term, 1 if with_log else 0), None, 0), None, log)
    now, term = 0, c.term
    for act in acts:
        try:
            if isinstance(act, int):
                now += act
                c.tick(now)
            else:
                c.step(act)
        except RaftError:
            pass
        check(c, term)
        term = c.term
        if c.has_ready():
            rd = c.ready()
            c.advance(rd)
            check(c, term)
        if c.is_leader and now % 3 == 0:
            c.propose(b"p")


def _leader(with_log: bool) -> RaftCore:
    log = [Entry(1, 1), Entry(2, 1)] if with_log else []
    c = RaftCore("a", ["b", "c"], RaftConfig(pre_vote=False, check_quorum=False, max_inflight=2, snapshot_chunk_bytes=2), random.Random(0), 0,
                 HardState(1, None, 0), None, log)
    c.tick(1000)
    rd = c.ready()
    c.advance(rd)
    req = next(m for m in rd.messages if m.type == MsgType.VOTE)
    c.step(Message(MsgType.VOTE_RESP, "b", "a", c.term, seq=req.seq, vote_result=VoteResult.ACCEPT))
    assert c.is_leader
    c.advance(c.ready())
    return c


@settings(max_examples=120, deadline=None)
@given(long_actions, st.booleans(), st.lists(st.integers(0, 3), max_size=6))
def test_arbitrary_messages_to_a_leader_never_crash_it(acts, with_log, reads):
    c = _leader(with_log)
    now, term = 1000, c.term
    for r in reads:
        c.read_index(r)
    for act in acts:
        try:
            if isinstance(act, int):
                now += act
                c.tick(now)
            else:
                # point acks at our term often enough to exercise the leader paths
                if act.seq != 4:        # mostly keep the leader in office
                    act.term = min(act.term, c.term)
                if act.term >= c.term - 1 and act.type in (MsgType.APPEND_RESP, MsgType.HEARTBEAT_RESP,
                                                           MsgType.SNAPSHOT_RESP):
                    act.term = c.term
                c.step(act)
        except RaftError:
            pass
        check(c, term)
        term = c.term
        if c.has_ready():
            c.advance(c.ready())
            check(c, term)
        if c.is_leader and isinstance(act, int) and act % 5 == 0:
            c.propose(b"p")
        if isinstance(act, int) and act % 7 == 0 and c.applied > c.log.offset:
            # compact so that lagging followers need InstallSnapshot
            c.compact(Snapshot(c.applied, c.log.term(c.applied) or 0, b"snap"))
