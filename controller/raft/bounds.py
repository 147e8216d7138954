"""The bounds on what a Raft message may carry (pure): a message outside them is forged or
corrupt and is dropped before any of it is believed."""

from __future__ import annotations

from autoswitch.base.limits import MAX_CONTROLLERS

from .messages import Message

# Largest term and index a message may carry. 2^40 elections or 2^62 entries never happen in a
# real cluster; a message beyond them is forged or corrupt, and adopting it would leave no room
# for the next term (uint64 on the wire).
MAX_TERM = 1 << 40
MAX_INDEX = 1 << 62
# The most one message may raise our term by. Legitimate terms climb one election at a time; a
# forged or corrupt term far above ours is dropped, so no single message can bring a node near
# MAX_TERM (issue 29: one heartbeat at the bound stopped the cluster for good). A node that is
# honestly behind still catches up: the term its vote rounds learn from rejections is adopted in
# steps of at most this much (a node 10,000 elections behind: ~160 rounds).
MAX_TERM_JUMP = 64
# The most one peer may raise our term by within one election_timeout_min window, whatever it sends
# (issue 59, item 1: a stream of heartbeats, each within the per-message bound above the last,
# walked every node to MAX_TERM in 34 s). Honest terms rise about once per election timeout per
# campaigning node; this leaves a far-behind node catching up in a few seconds, and a stream signed
# with a voter's own key needs 2^40 / 64 windows (at 150 ms, about 80 years) to exhaust the space.
# Members that are not voters raise no term at all (core.RaftCore.step).
TERM_RISE_PER_WINDOW = 64
# A vote answer names its configuration's voters: at most MAX_CONTROLLERS ids, each far shorter
# than this; more is forged.
MAX_NAMED_VOTER_LEN = 256
_INDEX_FIELDS = ("index", "commit", "reject_hint", "snap_index", "snap_offset", "snap_total")
_TERM_FIELDS = ("term", "log_term", "reject_term", "snap_term")


def out_of_bounds(m: Message) -> str | None:
    """The first field of ``m`` outside [0, bound], or None."""
    for name in _TERM_FIELDS:
        if not 0 <= getattr(m, name) <= MAX_TERM:
            return name
    for name in _INDEX_FIELDS:
        if not 0 <= getattr(m, name) <= MAX_INDEX:
            return name
    if len(m.voters) > MAX_CONTROLLERS or any(len(v) > MAX_NAMED_VOTER_LEN for v in m.voters):
        return "voters"
    for e in m.entries:
        if not (0 <= e.index <= MAX_INDEX and 0 <= e.term <= MAX_TERM):
            return "entries"
    return None
