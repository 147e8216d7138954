"""Plain data exchanged by the sans-IO core: log entries, messages, Ready.

One flat ``Message`` like etcd's raftpb.Message keeps the wire mapping trivial;
which fields mean what depends on ``type`` (see docs/raft.md, "Messages").
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field


class Role(enum.Enum):
    FOLLOWER = "FOLLOWER"
    CANDIDATE = "CANDIDATE"
    LEADER = "LEADER"


class EntryKind(enum.IntEnum):
    NORMAL = 0
    NOOP = 1      # appended by every new leader: commits the previous terms' tail (Raft 5.4.2)
    CONFIG = 2    # a new membership (membership.py), in force from the moment it is in a log


class MsgType(enum.IntEnum):
    VOTE = 1
    VOTE_RESP = 2
    PRE_VOTE = 3
    PRE_VOTE_RESP = 4
    APPEND = 5
    APPEND_RESP = 6
    HEARTBEAT = 7
    HEARTBEAT_RESP = 8
    SNAPSHOT = 9          # one chunk of InstallSnapshot
    SNAPSHOT_RESP = 10    # chunk ack / resume offset
    TIMEOUT_NOW = 11      # leadership transfer: campaign now, skipping pre-vote and leases


class VoteResult(enum.IntEnum):
    """DLedger's vote answers (VoteResponse.RESULT)."""

    UNKNOWN = 0
    ACCEPT = 1
    REJECT_UNKNOWN_LEADER = 2
    REJECT_UNEXPECTED_LEADER = 3
    REJECT_EXPIRED_VOTE_TERM = 4
    REJECT_ALREADY_VOTED = 5
    REJECT_ALREADY_HAS_LEADER = 6
    REJECT_TERM_NOT_READY = 7
    REJECT_TERM_SMALL_THAN_LEDGER = 8
    REJECT_EXPIRED_LEDGER_TERM = 9
    REJECT_SMALL_LEDGER_END_INDEX = 10


class TallyOutcome(enum.Enum):
    """DLedger's VoteResponse.ParseResult."""

    PASSED = "PASSED"
    REVOTE_IMMEDIATELY = "REVOTE_IMMEDIATELY"
    WAIT_TO_REVOTE = "WAIT_TO_REVOTE"          # same term, after a random back-off
    WAIT_TO_VOTE_NEXT = "WAIT_TO_VOTE_NEXT"    # next term, after a random back-off


@dataclass(frozen=True, slots=True)
class Entry:
    index: int
    term: int
    data: bytes = b""
    kind: EntryKind = EntryKind.NORMAL


@dataclass(frozen=True, slots=True)
class HardState:
    term: int = 0
    vote: str | None = None
    commit: int = 0       # a lower bound only: persisted when term/vote change, not on every commit


@dataclass(frozen=True, slots=True)
class Snapshot:
    index: int
    term: int
    data: bytes


@dataclass(frozen=True, slots=True)
class ReadState:
    ctx: object
    index: int           # apply up to here, then read: linearizable


@dataclass(frozen=True, slots=True)
class SoftState:
    leader_id: str | None
    role: Role
    term: int


@dataclass(slots=True)
class Message:
    type: MsgType
    frm: str
    to: str
    term: int
    index: int = 0          # APPEND: prev index; VOTE: last log index; *_RESP: match index / hint
    log_term: int = 0       # APPEND: prev term; VOTE: last log term
    entries: tuple[Entry, ...] = ()
    commit: int = 0
    reject: bool = False
    reject_hint: int = 0    # APPEND_RESP reject: follower's last index (fast back-off)
    reject_term: int = 0    # APPEND_RESP reject: term at reject_hint
    vote_result: VoteResult = VoteResult.UNKNOWN
    seq: int = 0            # vote round id / heartbeat sequence, echoed by responses
    transfer: bool = False  # VOTE from a leadership transfer: voters ignore their leader lease
    snap_index: int = 0
    snap_term: int = 0
    snap_offset: int = 0
    snap_total: int = 0
    snap_crc: int = 0
    snap_done: bool = False
    snap_data: bytes = b""
    # *VOTE_RESP: the voters of the replier's configuration. A node whose configuration still
    # lists one of them as a learner (it missed the promotion) takes it as a voter on a voter's
    # word (RaftCore.vouch, docs/raft.md "Who may lead").
    voters: tuple[str, ...] = ()


@dataclass(slots=True)
class Ready:
    """What the driver must do, in this order:

    1. send ``messages_early`` (leader appends/heartbeats: they depend on nothing unpersisted),
    2. install ``snapshot`` (state machine restore + durable save),
    3. persist ``hard_state`` and ``entries`` (entries overwrite the log from entries[0].index),
    4. send ``messages`` (votes and acks that promise what was just persisted),
    5. apply ``committed_entries`` in order, answer ``read_states``,
    6. call ``advance(ready)``.
    """

    hard_state: HardState | None = None
    entries: list[Entry] = field(default_factory=list)
    snapshot: Snapshot | None = None
    committed_entries: list[Entry] = field(default_factory=list)
    messages_early: list[Message] = field(default_factory=list)
    messages: list[Message] = field(default_factory=list)
    read_states: list[ReadState] = field(default_factory=list)
    soft_state: SoftState | None = None
    # The node left catch-up mode (see RaftCore(catch_up=True)): once this Ready's entries are
    # durable, the driver removes its catch-up marker.
    caught_up: bool = False
    # A fresh node found an existing cluster's log (RaftCore.fresh): the driver writes the
    # catch-up marker BEFORE anything of this Ready is persisted, so a restart midway through
    # the catch-up (a partial log) still does not vote.
    catch_up_started: bool = False

    @property
    def must_sync(self) -> bool:
        return self.hard_state is not None or bool(self.entries) or self.snapshot is not None
