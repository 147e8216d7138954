"""Elections of the Raft core (DLedger semantics, docs/raft.md "Election"): a candidate's vote
rounds (pre-vote, then vote) and tallies, and how a node answers a vote request. Functions over
the core's state (core.py), split from it by concern; like the core, no clock or I/O."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .bounds import MAX_TERM, MAX_TERM_JUMP
from .messages import Message, MsgType, Role, TallyOutcome, VoteResult
from .quorum import tally

if TYPE_CHECKING:
    from .core import RaftCore


@dataclass(slots=True)
class VoteRound:
    seq: int
    term: int
    pre: bool
    deadline_ms: int
    transfer: bool = False
    replies: dict[str, VoteResult] = field(default_factory=dict)
    max_term: int = 0



# answers that stay the same for the rest of the term (votes are durable; a log shrinks only under
# a leader of the term, whose messages end the candidacy anyway)
_NEVER_IN_THIS_TERM = frozenset({VoteResult.REJECT_ALREADY_VOTED, VoteResult.REJECT_EXPIRED_LEDGER_TERM,
                                 VoteResult.REJECT_SMALL_LEDGER_END_INDEX})


def maybe_campaign(core: RaftCore, transfer: bool = False) -> None:
    if core.role != Role.CANDIDATE or core._round is not None:
        return
    if core.id not in core.voters:
        ask_who_leads(core)
        return
    if core.catching_up or core.silenced is not None:
        return
    if core.term + 1 >= MAX_TERM:
        # the last term is never entered by a campaign: there would be none after it
        if not core._term_exhausted_logged:
            core._term_exhausted_logged = True
            core.log_.error("raft_term_exhausted", term=core.term, max_term=MAX_TERM,
                            hint="restore a snapshot into new directories (docs/operations-controller.md)")
        return
    if not transfer and (core.now < core.next_vote_ms or core.no_campaign):
        return
    increase = core.need_increase_term or core.vote not in (None, core.id)
    if increase and core.cfg.pre_vote and not transfer and len(core.voters) > 1:
        start_round(core, core.term + 1, pre=True, transfer=False)
        return
    if increase:
        core._set_term(core.term + 1)
    core.vote = core.id
    core.need_increase_term = False
    start_round(core, core.term, pre=False, transfer=transfer)


def ask_who_leads(core: RaftCore) -> None:
    """A learner that lost its leader asks the voters it knows, once per election timeout, with a
    pre-vote nobody grants: their answers carry their term and their voters. It may have missed
    the promotion of the learner that now leads (refused by _refused_sender until a voter names it,
    RaftCore.vouch), or be more than MAX_TERM_JUMP terms behind (its term climbs by the answers)."""
    if not core.voter_peers or core.now < core.next_vote_ms:
        return
    core.next_vote_ms = core.now + core.cfg.election_timeout_min_ms + core._vote_backoff()
    for p in core.voter_peers:
        core._send(Message(MsgType.PRE_VOTE, core.id, p, core.term + 1, index=core.log.last_index(),
                           log_term=core.log.last_term()))


def start_round(core: RaftCore, term: int, pre: bool, transfer: bool) -> None:
    core._round_seq += 1
    rnd = VoteRound(core._round_seq, term, pre, core.now + core.cfg.vote_round_timeout_ms, transfer)
    rnd.replies[core.id] = VoteResult.ACCEPT
    core._round = rnd
    core.log_.debug("raft_vote_round", term=term, pre=pre, seq=rnd.seq)
    t = MsgType.PRE_VOTE if pre else MsgType.VOTE
    for p in core.voter_peers:
        core._send(Message(t, core.id, p, term, index=core.log.last_index(), log_term=core.log.last_term(),
                           seq=rnd.seq, transfer=transfer))
    check_round(core)


def check_round(core: RaftCore) -> None:
    rnd = core._round
    assert rnd is not None
    accepted = sum(1 for r in rnd.replies.values() if r == VoteResult.ACCEPT)
    not_ready = sum(1 for r in rnd.replies.values() if r == VoteResult.REJECT_TERM_NOT_READY)
    outstanding = len(core.voters) - len(rnd.replies)
    # no need to wait for a dead voter once the outcome is PASSED or REVOTE_IMMEDIATELY, or once
    # the missing replies could not make it either (a split vote: back off now, not after the timeout)
    if (accepted + not_ready >= core.quorum or outstanding == 0
            or accepted + not_ready + outstanding < core.quorum):
        finish_round(core)


def finish_round(core: RaftCore) -> None:
    rnd = core._round
    assert rnd is not None
    core._round = None
    outcome = tally(rnd.replies, core.quorum, rnd.max_term, rnd.term)
    core.last_outcome = outcome
    core.log_.info("raft_vote_tally", term=rnd.term, pre=rnd.pre, outcome=outcome.value,
                   replies={k: v.name for k, v in rnd.replies.items()})
    if outcome == TallyOutcome.PASSED:
        if rnd.pre:
            assert rnd.term == core.term + 1      # any term change would have dropped the round
            core._set_term(rnd.term)
            core.vote = core.id
            core.need_increase_term = False
            start_round(core, core.term, pre=False, transfer=False)
        elif rnd.term == core.term and core.vote == core.id:
            core._become_leader()
        return
    if outcome == TallyOutcome.REVOTE_IMMEDIATELY:
        core.need_increase_term = False
        core.next_vote_ms = core.now
        if rnd.transfer:
            # the revote of a leadership transfer must still bypass the voters' leader lease
            maybe_campaign(core, transfer=True)
            return
    elif outcome == TallyOutcome.WAIT_TO_REVOTE:
        # DLedger revotes in the same term, waiting for the bigger log's owner to win. Only while
        # the term can still be won: a voter that voted for another or holds a bigger log never
        # grants it, and that owner may never campaign (no voter in its own configuration, one
        # appended and not yet committed: the simulator's seed 1716 hung split for good) -> the
        # next term (pre-vote first), which a majority of equal logs can win.
        settled = sum(1 for r in rnd.replies.values() if r in _NEVER_IN_THIS_TERM)
        core.need_increase_term = rnd.pre or len(core.voters) - settled < core.quorum
        core.next_vote_ms = core.now + core._vote_backoff()
    else:
        core.need_increase_term = True
        delay = core._vote_backoff()
        if any(r == VoteResult.REJECT_ALREADY_HAS_LEADER for r in rnd.replies.values()):
            # also after a refused pre-vote: retrying it every 50-200 ms instead broke liveness
            # in the simulator's vote-hunt schedule (tests/unit/test_sim_seeds.py), not analysed
            delay += core.cfg.election_timeout_min_ms
        core.next_vote_ms = core.now + delay
        if rnd.max_term > core.term:
            core._set_term(min(rnd.max_term, core.term + MAX_TERM_JUMP))
    if core.role == Role.CANDIDATE:
        maybe_campaign(core)


def in_lease(core: RaftCore) -> bool:
    """Has a leader been heard from recently (or are we an active leader)? Then refuse to elect."""
    if not core.cfg.check_quorum:
        return False
    if core.role == Role.LEADER:
        return core.quorum_active()
    return (core.role == Role.FOLLOWER and core.leader_id is not None
            and core.last_leader_contact_ms is not None
            and core.now - core.last_leader_contact_ms < core.cfg.election_timeout_min_ms)


def reply_vote(core: RaftCore, m: Message, result: VoteResult, term: int | None = None) -> None:
    t = MsgType.PRE_VOTE_RESP if m.type == MsgType.PRE_VOTE else MsgType.VOTE_RESP
    # the answer names our voters: a node that missed a promotion learns it from us (RaftCore.vouch)
    core._send(Message(t, core.id, m.frm, core.term if term is None else term, seq=m.seq, vote_result=result,
                       reject=result != VoteResult.ACCEPT, voters=core.voters))


def ledger_check(core: RaftCore, m: Message) -> VoteResult | None:
    if m.log_term < core.log.last_term():
        return VoteResult.REJECT_EXPIRED_LEDGER_TERM
    if m.log_term == core.log.last_term() and m.index < core.log.last_index():
        return VoteResult.REJECT_SMALL_LEDGER_END_INDEX
    return None


def handle_vote(core: RaftCore, m: Message) -> None:
    if m.frm == core.id:
        reply_vote(core, m, VoteResult.REJECT_UNEXPECTED_LEADER)
        return
    if not core.speaks_as_voter(m.frm):
        # a learner's pre-vote is a question (ask_who_leads), never granted; it changes nothing here
        # (a learner's vote request was dropped before: RaftCore._refused_sender)
        reply_vote(core, m, VoteResult.REJECT_UNKNOWN_LEADER)
        return
    if core.catching_up or core.silenced is not None:
        # silenced: our state machine differs from the others' (the state hash check).
        # our (lost) log may have been part of a committed majority: no say in elections.
        # (A learner does vote when asked: it may have been promoted without knowing yet, and
        # the candidate counts only the voters of its own configuration; etcd does the same.)
        # A plain no: "my log is longer" (REJECT_SMALL_LEDGER_END_INDEX, as before) made two
        # live voters that split a term re-ask that same term for ever (simulator, wipes).
        reply_vote(core, m, VoteResult.REJECT_ALREADY_VOTED)
        return
    if m.type == MsgType.PRE_VOTE:
        # pre-vote never changes our state (etcd's PreVote, Ongaro thesis 9.6)
        if m.term < core.term:
            reply_vote(core, m, VoteResult.REJECT_EXPIRED_VOTE_TERM)
        elif in_lease(core):
            reply_vote(core, m, VoteResult.REJECT_ALREADY_HAS_LEADER)
        elif (r := ledger_check(core, m)) is not None:
            reply_vote(core, m, r)
        elif m.term < core.log.last_term():
            reply_vote(core, m, VoteResult.REJECT_TERM_SMALL_THAN_LEDGER, core.log.last_term())
        else:
            reply_vote(core, m, VoteResult.ACCEPT)
        return
    if m.term > core.term and not m.transfer and in_lease(core):
        # check-quorum lease: a live leader is not deposed by a node that cannot hear it
        reply_vote(core, m, VoteResult.REJECT_ALREADY_HAS_LEADER)
        return
    if m.term < core.term:
        reply_vote(core, m, VoteResult.REJECT_EXPIRED_VOTE_TERM)
        return
    if m.term == core.term:
        if core.vote is not None and core.vote != m.frm:
            reply_vote(core, m, VoteResult.REJECT_ALREADY_HAS_LEADER if core.leader_id is not None
                             else VoteResult.REJECT_ALREADY_VOTED)
            return
    else:
        # DLedger: adopt the term as a candidate, answer "not ready"; the requester re-votes at once
        core.log_.info("raft_term_not_ready", term=core.term, new_term=m.term, frm=m.frm)
        core._become_candidate(m.term, reset_candidate_delay(core), increase=False)
        reply_vote(core, m, VoteResult.REJECT_TERM_NOT_READY)
        return
    if (r := ledger_check(core, m)) is not None:
        reply_vote(core, m, r)
        return
    if m.term < core.log.last_term():
        reply_vote(core, m, VoteResult.REJECT_TERM_SMALL_THAN_LEDGER, core.log.last_term())
        return
    core.vote = m.frm
    if core.role == Role.CANDIDATE:
        core._round = None
        core.next_vote_ms = core.now + core.cfg.election_timeout_min_ms + core._vote_backoff()
    else:
        core._reset_election_timer()
    reply_vote(core, m, VoteResult.ACCEPT)


def reset_candidate_delay(core: RaftCore) -> int:
    return core.cfg.election_timeout_min_ms + core.rng.randrange(0, core.cfg.election_jitter_ms + 1)


def handle_vote_resp(core: RaftCore, m: Message) -> None:
    if m.frm in core.voters:
        core.vouch(m.frm, m.voters)
        if core.id not in core.voters and m.term > core.term and core.role != Role.LEADER:
            # the answer to ask_who_leads: a voter's term, adopted in steps like a round's
            core._set_term(min(m.term, core.term + MAX_TERM_JUMP))
    rnd = core._round
    if core.role != Role.CANDIDATE or rnd is None or m.seq != rnd.seq:
        return
    if (m.type == MsgType.PRE_VOTE_RESP) != rnd.pre or m.frm not in core.voters:
        return
    if m.vote_result in (VoteResult.REJECT_EXPIRED_VOTE_TERM, VoteResult.REJECT_TERM_SMALL_THAN_LEDGER):
        rnd.max_term = max(rnd.max_term, m.term)
    rnd.replies[m.frm] = m.vote_result
    check_round(core)
