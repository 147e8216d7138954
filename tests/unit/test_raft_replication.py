"""Replication on the sans-IO core in a deterministic virtual-time network: log matching, leader
completeness, the Figure 8 commit rule, snapshots to lagging followers, read-index, flow control."""

from __future__ import annotations

import random

import pytest
from autoswitch.controller.consensus.errors import NotLeader, ProposalDropped
from autoswitch.controller.raft.config import RaftConfig
from autoswitch.controller.raft.core import RaftCore
from autoswitch.controller.raft.harness import SimNet
from autoswitch.controller.raft.messages import (
    Entry,
    EntryKind,
    HardState,
    Message,
    MsgType,
    Role,
    VoteResult,
)


def _chaos(seed: int, rounds: int = 30, snapshots: bool = False):
    """Random partitions, crashes/restarts (memory storage) and 10% loss, with proposals (and, if
    asked, random snapshots + compaction); returns the net and every (index, term) ever seen
    committed, with the term it was committed under."""
    ids = ["n1", "n2", "n3", "n4", "n5"]
    net = SimNet(ids, seed=seed, latency_ms=(1, 6), config=RaftConfig(snapshot_chunk_bytes=50))
    rng = random.Random(seed * 7 + 1)
    net.filter = lambda m: rng.random() > 0.1
    committed: dict[int, int] = {}
    leaders: list[tuple[int, str]] = []
    for _ in range(rounds):
        net.heal()
        for nid in ids:
            if not net.nodes[nid].alive:
                net.restart(nid)
        if rng.random() < 0.4:
            net.isolate(rng.choice(ids))
        if rng.random() < 0.3:
            net.crash(rng.choice(ids))
        for _ in range(120):
            net.step_ms()
            ld = net.leader()
            if ld is not None and rng.random() < 0.05:
                try:
                    net.propose(ld, f"k{rng.randrange(4)}={rng.randrange(1000)}".encode())
                except (NotLeader, ProposalDropped):
                    pass
            if snapshots and rng.random() < 0.01:
                nid = rng.choice(ids)
                n = net.nodes[nid]
                if n.alive and n.core.applied > n.core.log.offset:
                    net.take_snapshot(nid)
            for nid, n in net.nodes.items():
                c = n.core
                if n.alive and c.role == Role.LEADER and (not leaders or leaders[-1] != (c.term, nid)):
                    leaders.append((c.term, nid))
                    # leader completeness: every entry committed so far is in the new leader's log
                    for idx, t in committed.items():
                        if idx > c.log.offset:
                            assert c.log.term(idx) == t, (seed, nid, idx, t, c.log.term(idx))
                for e in c.log.entries:
                    if e.index <= c.commit:
                        assert committed.setdefault(e.index, e.term) == e.term, (seed, nid, e.index)
    net.heal()
    for nid in ids:
        if not net.nodes[nid].alive:
            net.restart(nid)
    net.filter = None
    net.run(3000)
    return net, committed


@pytest.mark.parametrize("seed,snapshots", [(0, False), (1, False), (2, True), (3, True)])
def test_log_matching_and_leader_completeness_under_faults(seed, snapshots):
    net, committed = _chaos(seed, snapshots=snapshots)
    assert committed, "nothing was committed"
    cores = [n.core for n in net.nodes.values()]
    # log matching: same (index, term) in two logs => identical prefixes
    for a in cores:
        for b in cores:
            terms_a = {e.index: e.term for e in a.log.entries}
            terms_b = {e.index: e.term for e in b.log.entries}
            common = sorted(set(terms_a) & set(terms_b))
            for i in common:
                if terms_a[i] == terms_b[i]:
                    assert all(terms_a[j] == terms_b[j] for j in common if j <= i)
    # state machine safety: no two nodes ever applied different data at the same index
    applied = [{e.index: e.data for e in n.applied} for n in net.nodes.values()]
    for a in applied:
        for b in applied:
            assert all(a[i] == b[i] for i in set(a) & set(b))
    if not snapshots:
        assert len({len(a) for a in applied}) == 1    # and all applied the whole log after healing
    kvs = [n.sm.kv for n in net.nodes.values()]
    assert all(kv == kvs[0] for kv in kvs) and len({n.sm.last_index for n in net.nodes.values()}) == 1
    if snapshots:
        assert any(m.type == MsgType.SNAPSHOT for m in net.sent), "no follower needed a snapshot"


def _leader_core(log: list[Entry], term: int = 3) -> RaftCore:
    """Node s1 of five, elected in term+1 by answering its vote requests."""
    c = RaftCore("s1", ["s2", "s3", "s4", "s5"], RaftConfig(pre_vote=False), random.Random(0), 0,
                 HardState(term, None, 0), None, log)
    c.tick(10_000)
    rd = c.ready()
    c.advance(rd)
    for m in rd.messages:
        if m.type == MsgType.VOTE:
            c.step(Message(MsgType.VOTE_RESP, m.to, "s1", m.term, seq=m.seq, vote_result=VoteResult.ACCEPT))
    assert c.role == Role.LEADER
    c.advance(c.ready())
    return c


def test_figure8_old_term_entry_on_a_majority_is_not_committed_by_counting():
    # s1 holds (2, term 2) from its old leadership; s5 has a competing (2, term 3) (Raft paper Figure 8)
    c = _leader_core([Entry(1, 1), Entry(2, 2)], term=3)
    assert c.term == 4
    noop = c.log.entry(3)
    assert noop.kind == EntryKind.NOOP and noop.term == 4
    for peer in ("s2", "s3"):
        c.step(Message(MsgType.APPEND_RESP, peer, "s1", 4, index=2))
    assert c.commit == 0, "an entry of an older term must not be committed by counting replicas"
    for peer in ("s2", "s3"):
        c.step(Message(MsgType.APPEND_RESP, peer, "s1", 4, index=3))
    assert c.commit == 3     # the current-term no-op commits, and the old entries with it


def test_leader_counts_its_own_entry_only_after_persisting_it():
    c = _leader_core([], term=1)
    idx = c.propose(b"x=1")
    for peer in ("s2", "s3"):
        c.step(Message(MsgType.APPEND_RESP, peer, "s1", c.term, index=idx))
    assert c.commit < idx               # 2 of 5 have it durably; s1's own copy is not yet persisted
    rd = c.ready()
    assert rd.entries and rd.entries[-1].index == idx
    c.advance(rd)                       # persisted: s1 + s2 + s3 are a majority of 5
    assert c.commit == idx


def test_snapshot_is_sent_in_chunks_to_a_lagging_follower():
    cfg = RaftConfig(snapshot_chunk_bytes=64)
    net = SimNet(["a", "b", "c"], seed=4, config=cfg)
    ld = net.wait_leader()
    lag = next(p for p in ("a", "b", "c") if p != ld)
    net.isolate(lag)
    net.heal()
    net.cut(lag, ld)
    net.cut(lag, next(p for p in ("a", "b", "c") if p not in (ld, lag)))
    for k in range(40):
        net.propose(ld, f"key{k % 9}=value{k}".encode())
        net.run(2)
    net.run(50)
    snap = net.take_snapshot(ld)
    assert net.nodes[ld].core.log.offset == snap.index > 40
    net.heal()
    assert net.run_until(lambda: net.nodes[lag].sm.kv == net.nodes[ld].sm.kv, 3000)
    chunks = [m for m in net.sent if m.type == MsgType.SNAPSHOT and m.to == lag]
    assert len(chunks) >= 3 and chunks[-1].snap_done and len(chunks[0].snap_data) == 64
    assert net.nodes[lag].core.log.offset >= snap.index
    # the follower keeps replicating normally after the snapshot
    net.propose(ld, b"after=snap")
    assert net.run_until(lambda: net.nodes[lag].sm.kv.get("after") == "snap", 1000)


def test_read_index_confirms_leadership_with_a_quorum_before_answering():
    net = SimNet(["a", "b", "c"], seed=8)
    ld = net.wait_leader()
    net.propose(ld, b"x=1")
    net.run(20)
    c = net.nodes[ld].core
    c.read_index("r2")
    rd = c.ready()
    assert not rd.read_states           # not before a quorum acknowledged the heartbeat round
    c.advance(rd)
    for m in rd.messages_early:
        if m.type == MsgType.HEARTBEAT:
            c.step(Message(MsgType.HEARTBEAT_RESP, m.to, ld, c.term, seq=m.seq))
            break
    rd = c.ready()
    assert [(r.ctx, r.index) for r in rd.read_states] == [("r2", c.commit)]
    c.advance(rd)


def test_isolated_old_leader_never_answers_a_read_index():
    net = SimNet(["a", "b", "c"], seed=9)
    ld = net.wait_leader()
    net.isolate(ld)
    c = net.nodes[ld].core
    c.read_index("stale")
    seen = []
    for _ in range(2000):
        net.now += 1
        c.tick(net.now)
        rd = c.ready()
        seen += rd.read_states
        c.advance(rd)
    assert seen == [] and c.role != Role.LEADER


def test_read_index_waits_for_the_new_leaders_noop_to_commit():
    c = _leader_core([Entry(1, 1)], term=1)
    c.read_index("r")
    assert c.reads.waiting_commit == ["r"]
    c.advance(c.ready())
    for peer in ("s2", "s3"):
        c.step(Message(MsgType.APPEND_RESP, peer, "s1", c.term, index=2))
    assert c.commit == 2 and not c.reads.waiting_commit and len(c.reads.pending) == 1


def test_inflight_appends_per_follower_are_bounded():
    cfg = RaftConfig(max_inflight=3, max_append_entries=1)
    c = _leader_core([], term=1)
    c.cfg = cfg
    for peer in ("s2", "s3", "s4", "s5"):
        c.step(Message(MsgType.APPEND_RESP, peer, "s1", c.term, index=1))    # into REPLICATE
    c.advance(c.ready())
    for k in range(20):
        c.propose(f"k={k}".encode())
    rd = c.ready()
    to_s2 = [m for m in rd.messages_early if m.type == MsgType.APPEND and m.to == "s2"]
    assert len(to_s2) == 3 and len(c.prs["s2"].inflight) == 3


def test_uncommitted_bytes_limit_drops_proposals():
    c = _leader_core([], term=1)
    c.cfg = RaftConfig(max_uncommitted_bytes=100, max_entry_bytes=64)
    c.propose(b"x" * 60)
    with pytest.raises(ProposalDropped) as ei:
        c.propose(b"y" * 60)
    assert ei.value.reason == "uncommitted_limit"
    with pytest.raises(ProposalDropped):
        c.propose(b"z" * 65)


def test_follower_refuses_proposals_with_leader_hint():
    net = SimNet(["a", "b", "c"], seed=1)
    ld = net.wait_leader()
    f = next(p for p in ("a", "b", "c") if p != ld)
    with pytest.raises(NotLeader) as ei:
        net.nodes[f].core.propose(b"x=1")
    assert ei.value.leader_id == ld
