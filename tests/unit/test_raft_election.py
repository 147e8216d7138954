"""DLedger-style election on the sans-IO core: vote reject reasons, tally outcomes, pre-vote,
check-quorum step-down, leadership transfer, election safety under random faults."""

from __future__ import annotations

import random

import pytest
from autoswitch.controller.consensus.errors import RaftError
from autoswitch.controller.consensus.membership import Member, Membership
from autoswitch.controller.raft.bounds import MAX_TERM_JUMP
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
    TallyOutcome,
    VoteResult,
)
from autoswitch.controller.raft.quorum import tally

V = VoteResult
PEERS = ["a", "b", "c"]


def core(node="a", term=5, vote=None, entries=(), now=0, cfg=None) -> RaftCore:
    return RaftCore(node, [p for p in PEERS if p != node], cfg or RaftConfig(), random.Random(1), now,
                    HardState(term, vote, 0), None, list(entries))


def vote_reply(c: RaftCore, m: Message) -> Message:
    c.step(m)
    rd = c.ready()
    replies = [x for x in rd.messages if x.type in (MsgType.VOTE_RESP, MsgType.PRE_VOTE_RESP)]
    assert len(replies) == 1, replies
    c.advance(rd)
    return replies[0]


def vote_reply_or_none(c: RaftCore, m: Message) -> Message | None:
    c.step(m)
    rd = c.ready()
    replies = [x for x in rd.messages if x.type in (MsgType.VOTE_RESP, MsgType.PRE_VOTE_RESP)]
    c.advance(rd)
    return replies[0] if replies else None


def vote(frm="b", term=5, last_index=0, last_term=0, pre=False, to="a") -> Message:
    return Message(MsgType.PRE_VOTE if pre else MsgType.VOTE, frm, to, term, index=last_index, log_term=last_term,
                   seq=7)


def follow(c: RaftCore, leader: str, now: int) -> None:
    """Make c a follower of `leader` in c's current term via a heartbeat."""
    c.tick(now)
    c.step(Message(MsgType.HEARTBEAT, leader, c.id, c.term, seq=1))
    c.advance(c.ready())


LOG = [Entry(1, 1), Entry(2, 3), Entry(3, 3)]


# ---------------------------------------------------------------- each vote answer
def test_vote_accept_when_term_current_not_voted_and_log_up_to_date():
    c = core(entries=LOG)
    r = vote_reply(c, vote(term=5, last_index=3, last_term=3))
    assert r.vote_result == V.ACCEPT and c.vote == "b"
    assert c.ready().hard_state is None      # the vote was handed out for persisting before the reply


def test_vote_reply_is_sent_only_after_the_vote_is_persisted():
    c = core()
    c.step(vote(term=5))
    rd = c.ready()
    assert rd.hard_state is not None and rd.hard_state.vote == "b"
    assert [m.vote_result for m in rd.messages] == [V.ACCEPT] and not rd.messages_early


def with_learner(node="a", learner="l", term=5, now=0) -> RaftCore:
    """A voter of a, b, c whose configuration lists ``learner`` as a learner."""
    conf = Membership.of_ids(PEERS).with_learner(learner, Member("127.0.0.1:1", "127.0.0.1:2"))
    return RaftCore(node, [p for p in PEERS if p != node], RaftConfig(), random.Random(1), now,
                    HardState(term, None, 0), None, [], membership=conf)


def test_a_learner_neither_leads_campaigns_nor_raises_a_term():
    """Issue 59, item 2: a learner's certificate sent one APPEND at term + 1 and a follower applied
    a forged entry. Leader messages and vote requests from a learner of our configuration are
    dropped and its term is not taken; its pre-vote is answered, never granted."""
    c = with_learner()
    forged = Entry(1, 6, b"forged")
    for m in (Message(MsgType.APPEND, "l", "a", 6, index=0, log_term=0, commit=1, entries=(forged,)),
              Message(MsgType.HEARTBEAT, "l", "a", 6, commit=1), vote(frm="l", term=6),
              Message(MsgType.TIMEOUT_NOW, "l", "a", 5)):
        assert vote_reply_or_none(c, m) is None
        assert c.term == 5 and c.leader_id is None and c.log.last_index() == 0
    r = vote_reply(c, vote(frm="l", term=6, last_index=9, last_term=5, pre=True))
    assert r.vote_result == V.REJECT_UNKNOWN_LEADER and r.reject and c.term == 5
    assert set(r.voters) == set(PEERS)          # the answer names our voters (see the vouch tests)


def test_a_sender_our_configuration_does_not_list_is_answered():
    """Raft thesis §4.1: a voter added while we lagged must get our vote (the simulator deadlocked
    without it); strangers are the transport's to refuse (GrpcRaftTransport admits members only)."""
    c = core()
    assert vote_reply(c, vote(frm="zz", term=5)).vote_result == V.ACCEPT


def test_a_voter_vouches_for_a_learner_we_missed_the_promotion_of():
    """A voter of ours answers a vote request naming ``l`` among its voters: l was promoted in
    entries we lack, and we follow it (seed 51: a node that missed the promotion of the new leader
    refused it for ever). The word lasts two election timeouts, renewed by each answer, and ends
    with our configuration; a learner's own answer vouches for nobody."""
    c = with_learner()
    c.step(Message(MsgType.PRE_VOTE_RESP, "l", "a", 5, reject=True, voters=("a", "b", "l")))
    assert not c.speaks_as_voter("l")
    c.step(Message(MsgType.PRE_VOTE_RESP, "b", "a", 5, reject=True, voters=("a", "b", "l")))
    assert c.speaks_as_voter("l")
    c.step(Message(MsgType.HEARTBEAT, "l", "a", 6, commit=0))
    assert c.term == 6 and c.leader_id == "l"
    c.tick(2 * c.cfg.election_timeout_min_ms + 1)
    assert not c.speaks_as_voter("l")
    c2 = with_learner()
    c2.step(Message(MsgType.VOTE_RESP, "c", "a", 5, reject=True, voters=("b", "c", "l")))
    c2.step(Message(MsgType.APPEND, "l", "a", 5, index=0, log_term=0, commit=1, entries=(
        Entry(1, 5, Membership.of_ids(["b", "c", "l"]).encode(), EntryKind.CONFIG),)))
    assert c2.voters == ("b", "c", "l") and c2.speaks_as_voter("l")


def test_a_learner_that_lost_its_leader_asks_the_voters_and_climbs_to_their_term():
    """A learner never campaigns; with its leader gone it asks the voters it knows (a pre-vote
    nobody grants) once per election timeout, and takes their term in steps of MAX_TERM_JUMP: a
    learner added to a cluster past term 64 refused every heartbeat before (simulator)."""
    conf = Membership.of_ids(["b", "c"]).with_learner("a", Member("127.0.0.1:1", "127.0.0.1:2"))
    c = RaftCore("a", ["b", "c"], RaftConfig(), random.Random(1), 0, HardState(1, None, 0), None, [], membership=conf)
    asked = []
    for now in range(0, 3_000, 10):
        c.tick(now)
        rd = c.ready()
        c.advance(rd)
        asked += [m for m in rd.messages_early + rd.messages if m.type == MsgType.PRE_VOTE]
    assert {m.to for m in asked} == {"b", "c"} and not any(m.type == MsgType.VOTE for m in asked)
    assert len(asked) <= 2 * (3_000 // c.cfg.election_timeout_min_ms + 1)
    c.step(Message(MsgType.PRE_VOTE_RESP, "b", "a", 200, reject=True, voters=("b", "c")))
    assert c.term == 1 + MAX_TERM_JUMP
    c.step(Message(MsgType.PRE_VOTE_RESP, "b", "a", 200, reject=True, voters=("b", "c")))
    c.step(Message(MsgType.PRE_VOTE_RESP, "c", "a", 200, reject=True, voters=("b", "c")))
    assert c.term == 1 + 2 * MAX_TERM_JUMP + min(200 - 1 - 2 * MAX_TERM_JUMP, MAX_TERM_JUMP)
    c.step(Message(MsgType.HEARTBEAT, "b", "a", 200, commit=0))
    assert c.term == 200 and c.leader_id == "b"


def test_vote_reject_unexpected_leader_when_request_claims_our_own_id():
    c = core()
    assert vote_reply(c, vote(frm="a")).vote_result == V.REJECT_UNEXPECTED_LEADER


def test_vote_reject_expired_vote_term():
    c = core(term=5)
    r = vote_reply(c, vote(term=3))
    assert r.vote_result == V.REJECT_EXPIRED_VOTE_TERM and r.term == 5


def test_vote_reject_already_voted():
    c = core(term=5, vote="c")
    assert vote_reply(c, vote(frm="b", term=5)).vote_result == V.REJECT_ALREADY_VOTED


def test_vote_reject_already_has_leader():
    c = core(term=5, vote="c")
    follow(c, "c", now=10)
    assert vote_reply(c, vote(frm="b", term=5)).vote_result == V.REJECT_ALREADY_HAS_LEADER


def test_vote_reject_term_not_ready_adopts_term_as_candidate_then_accepts_revote():
    c = core(term=5)
    r = vote_reply(c, vote(term=6))
    assert r.vote_result == V.REJECT_TERM_NOT_READY
    assert c.term == 6 and c.role == Role.CANDIDATE and c.vote is None
    assert vote_reply(c, vote(term=6)).vote_result == V.ACCEPT


def test_vote_reject_expired_ledger_term():
    c = core(entries=LOG)
    assert vote_reply(c, vote(term=5, last_index=9, last_term=2)).vote_result == V.REJECT_EXPIRED_LEDGER_TERM


def test_vote_reject_small_ledger_end_index():
    c = core(entries=LOG)
    assert vote_reply(c, vote(term=5, last_index=2, last_term=3)).vote_result == V.REJECT_SMALL_LEDGER_END_INDEX


def test_vote_reject_term_small_than_ledger():
    # defensive DLedger check: a voter whose ledger holds a newer term than the vote term
    # (e.g. hard state restored from an old backup) refuses and reports its ledger term
    c = core(term=2, entries=LOG)
    r = vote_reply(c, vote(term=2, last_index=3, last_term=3))
    assert r.vote_result == V.REJECT_TERM_SMALL_THAN_LEDGER and r.term == 3


def test_vote_with_higher_term_refused_inside_leader_lease():
    c = core(term=5, vote="c")
    follow(c, "c", now=1000)
    r = vote_reply(c, vote(frm="b", term=9))
    assert r.vote_result == V.REJECT_ALREADY_HAS_LEADER and c.term == 5 and c.role == Role.FOLLOWER


def test_pre_vote_does_not_change_voter_state():
    c = core(term=5)
    r = vote_reply(c, vote(term=6, pre=True))
    assert r.type == MsgType.PRE_VOTE_RESP and r.vote_result == V.ACCEPT
    assert (c.term, c.vote) == (5, None)


# ---------------------------------------------------------------- tally outcomes
def test_tally_passed_with_majority_accept():
    assert tally({"a": V.ACCEPT, "b": V.ACCEPT, "c": V.REJECT_ALREADY_VOTED}, 2, 0, 5) == TallyOutcome.PASSED


def test_tally_revote_immediately_when_accept_plus_not_ready_is_majority():
    assert tally({"a": V.ACCEPT, "b": V.REJECT_TERM_NOT_READY}, 2, 0, 5) == TallyOutcome.REVOTE_IMMEDIATELY


def test_tally_wait_to_revote_without_enough_valid_replies():
    assert tally({"a": V.ACCEPT, "b": V.REJECT_UNKNOWN_LEADER}, 2, 0, 5) == TallyOutcome.WAIT_TO_REVOTE


def test_tally_wait_to_revote_when_bigger_ledgers_block_a_majority():
    replies = {"a": V.ACCEPT, "b": V.REJECT_SMALL_LEDGER_END_INDEX, "c": V.REJECT_ALREADY_VOTED}
    assert tally(replies, 2, 0, 5) == TallyOutcome.WAIT_TO_REVOTE


def test_tally_wait_to_vote_next_on_known_bigger_term_or_existing_leader():
    assert tally({"a": V.ACCEPT, "b": V.REJECT_EXPIRED_VOTE_TERM}, 2, 9, 5) == TallyOutcome.WAIT_TO_VOTE_NEXT
    assert tally({"a": V.ACCEPT, "b": V.REJECT_ALREADY_HAS_LEADER}, 2, 0, 5) == TallyOutcome.WAIT_TO_VOTE_NEXT
    assert tally({"a": V.ACCEPT, "b": V.REJECT_ALREADY_VOTED, "c": V.REJECT_ALREADY_VOTED}, 2, 0, 5) \
        == TallyOutcome.WAIT_TO_VOTE_NEXT


def test_candidate_learning_bigger_term_moves_to_it_and_votes_next():
    cfg = RaftConfig(pre_vote=False)
    c = core(term=5, cfg=cfg)
    c.tick(1000)
    rd = c.ready()
    reqs = [m for m in rd.messages if m.type == MsgType.VOTE]
    assert reqs and c.term == 6
    c.advance(rd)
    c.step(Message(MsgType.VOTE_RESP, "b", "a", 9, seq=reqs[0].seq, vote_result=V.REJECT_EXPIRED_VOTE_TERM))
    c.step(Message(MsgType.VOTE_RESP, "c", "a", 9, seq=reqs[0].seq, vote_result=V.REJECT_EXPIRED_VOTE_TERM))
    assert c.last_outcome == TallyOutcome.WAIT_TO_VOTE_NEXT and c.term == 9 and c.role == Role.CANDIDATE


def test_first_election_goes_through_term_not_ready_and_revote():
    net = SimNet(PEERS, seed=3)
    ld = net.wait_leader(3000)
    results = {m.vote_result for m in net.sent if m.type == MsgType.VOTE_RESP}
    assert V.REJECT_TERM_NOT_READY in results and V.ACCEPT in results
    assert net.nodes[ld].core.role == Role.LEADER


# ---------------------------------------------------------------- pre-vote, check-quorum, transfer
@pytest.mark.parametrize("pre_vote", [True, False])
def test_pre_vote_stops_a_rejoining_node_from_disrupting_the_leader(pre_vote):
    net = SimNet(PEERS, seed=11, config=RaftConfig(pre_vote=pre_vote))
    ld = net.wait_leader()
    term = net.nodes[ld].core.term
    other = next(p for p in PEERS if p != ld)
    net.isolate(other)
    net.run(3000)                       # the isolated node keeps campaigning
    net.heal()
    net.run(1500)
    disrupted = net.leader() != ld or net.nodes[ld].core.term != term
    if pre_vote:
        assert not disrupted and net.nodes[other].core.term == term
        assert net.nodes[other].core.role == Role.FOLLOWER
    else:
        assert disrupted   # without pre-vote the rejoining node's inflated term deposes the leader


def test_leader_without_quorum_steps_down_and_majority_elects_new_leader():
    cfg = RaftConfig()
    net = SimNet(PEERS, seed=5, config=cfg)
    ld = net.wait_leader()
    net.isolate(ld)
    net.run(cfg.election_timeout_min_ms + 2 * cfg.heartbeat_interval_ms)
    assert net.nodes[ld].core.role != Role.LEADER
    net.run(1500)
    new = net.leader()
    assert new is not None and new != ld


def test_leadership_transfer_hands_over_within_one_election_timeout():
    cfg = RaftConfig()
    net = SimNet(PEERS, seed=2, config=cfg)
    ld = net.wait_leader()
    net.propose(ld, b"k=v")
    net.run(50)
    term = net.nodes[ld].core.term
    to = next(p for p in PEERS if p != ld)
    net.nodes[ld].core.transfer_leadership(to)
    net.process(ld)
    assert net.run_until(lambda: net.leader() == to, cfg.election_timeout_min_ms)
    assert net.nodes[to].core.term == term + 1
    assert any(m.type == MsgType.TIMEOUT_NOW for m in net.sent)
    net.run(100)
    assert net.nodes[ld].core.role == Role.FOLLOWER and net.nodes[ld].core.leader_id == to


def test_leader_refuses_proposals_during_transfer():
    from autoswitch.controller.consensus.errors import ProposalDropped
    net = SimNet(PEERS, seed=2)
    ld = net.wait_leader()
    to = next(p for p in PEERS if p != ld)
    net.cut(ld, to)                       # keep the transfer pending
    net.nodes[ld].core.transfer_leadership(to)
    with pytest.raises(ProposalDropped):
        net.nodes[ld].core.propose(b"x=1")


# ---------------------------------------------------------------- election safety under faults
@pytest.mark.parametrize("seed", range(6))
def test_election_safety_at_most_one_leader_per_term_under_random_faults(seed):
    ids = ["n1", "n2", "n3", "n4", "n5"]
    net = SimNet(ids, seed=seed, latency_ms=(1, 8))
    rng = random.Random(seed)
    net.filter = lambda m: rng.random() > 0.1
    leaders_by_term: dict[int, set[str]] = {}
    for _ in range(40):
        net.heal()
        if rng.random() < 0.5:
            net.isolate(rng.choice(ids))
        if rng.random() < 0.3:
            net.cut(rng.choice(ids), rng.choice(ids))
        for _ in range(100):
            net.step_ms()
            for nid, n in net.nodes.items():
                if n.core.role == Role.LEADER:
                    leaders_by_term.setdefault(n.core.term, set()).add(nid)
        ld = net.leader()
        if ld is not None and rng.random() < 0.7:
            try:
                net.propose(ld, f"k{rng.randrange(5)}={rng.randrange(100)}".encode())
            except RaftError:       # NotLeader / ProposalDropped: this round proposes nothing
                pass
    assert all(len(v) == 1 for v in leaders_by_term.values()), leaders_by_term
    assert leaders_by_term, "no leader was ever elected"


def test_leader_reports_quorum_lost_before_it_steps_down():
    cfg = RaftConfig()
    net = SimNet(PEERS, seed=5, config=cfg)
    ld = net.wait_leader()
    c = net.nodes[ld].core
    assert c.quorum_active(2 * cfg.heartbeat_interval_ms)
    net.isolate(ld)
    net.run(2 * cfg.heartbeat_interval_ms + 20)
    assert c.role == Role.LEADER and not c.quorum_active(2 * cfg.heartbeat_interval_ms)


def test_transfer_revote_after_term_not_ready_still_bypasses_leader_leases():
    c = core(node="b", term=5, vote="a")
    follow(c, "a", now=10)
    c.step(Message(MsgType.TIMEOUT_NOW, "a", "b", 5))
    rd = c.ready()
    first = [m for m in rd.messages if m.type == MsgType.VOTE]
    assert first and all(m.transfer for m in first) and c.term == 6
    c.advance(rd)
    c.step(Message(MsgType.VOTE_RESP, "a", "b", 6, seq=first[0].seq, vote_result=V.REJECT_TERM_NOT_READY))
    assert c.last_outcome == TallyOutcome.REVOTE_IMMEDIATELY
    revote = [m for m in c.ready().messages if m.type == MsgType.VOTE]
    assert revote and all(m.transfer and m.term == 6 and m.seq != first[0].seq for m in revote)


def test_majority_accept_passes_whatever_else_was_answered_first():
    replies = {"a": V.ACCEPT, "b": V.REJECT_ALREADY_HAS_LEADER, "c": V.ACCEPT}
    assert tally(replies, 2, 0, 5) == TallyOutcome.PASSED
    assert tally({"a": V.ACCEPT, "b": V.ACCEPT}, 2, 9, 5) == TallyOutcome.PASSED
