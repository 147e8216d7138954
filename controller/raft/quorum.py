"""Majorities: how many make a quorum, which index a quorum holds, and how a vote round ends.
Shared by the Raft core and the controller's liveness rule (a master is DEAD when a majority of
controller nodes says so), so both count the same way."""

from __future__ import annotations

from collections.abc import Iterable

from autoswitch.base.quorum import majority

from .messages import TallyOutcome, VoteResult

__all__ = ["majority", "quorum_index", "tally"]


def quorum_index(matches: Iterable[int], quorum: int) -> int:
    """The largest index that at least ``quorum`` of ``matches`` have reached."""
    return sorted(matches, reverse=True)[quorum - 1]


def tally(replies: dict[str, VoteResult], quorum: int, max_term: int, term: int) -> TallyOutcome:
    """DLedger DLedgerLeaderElector.maintainAsCandidate's parse of the vote replies (self included)."""
    accepted = sum(1 for r in replies.values() if r == VoteResult.ACCEPT)
    valid = sum(1 for r in replies.values() if r != VoteResult.REJECT_UNKNOWN_LEADER)
    not_ready = sum(1 for r in replies.values() if r == VoteResult.REJECT_TERM_NOT_READY)
    bigger_ledger = sum(1 for r in replies.values()
                        if r in (VoteResult.REJECT_EXPIRED_LEDGER_TERM, VoteResult.REJECT_SMALL_LEDGER_END_INDEX))
    has_leader = any(r == VoteResult.REJECT_ALREADY_HAS_LEADER for r in replies.values())
    # PASSED first (DLedger checks it after the bigger-term / has-leader cases): we close a round as
    # soon as a majority accepted, so the outcome must not depend on which other replies came first.
    # A majority of votes in this term is all Raft's election safety needs.
    if accepted >= quorum:
        return TallyOutcome.PASSED
    if max_term > term:
        return TallyOutcome.WAIT_TO_VOTE_NEXT
    if has_leader:
        return TallyOutcome.WAIT_TO_VOTE_NEXT
    if valid < quorum:
        return TallyOutcome.WAIT_TO_REVOTE
    if accepted + not_ready >= quorum:
        return TallyOutcome.REVOTE_IMMEDIATELY
    if accepted + bigger_ledger >= quorum:
        return TallyOutcome.WAIT_TO_REVOTE
    return TallyOutcome.WAIT_TO_VOTE_NEXT
