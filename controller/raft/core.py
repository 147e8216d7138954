"""Sans-IO Raft core with DLedger election semantics (like etcd-io/raft's ``raft.go``).

Inputs: ``step(msg)``, ``tick(now_ms)``, ``propose(data)``, ``read_index(ctx)``,
``transfer_leadership(to)``, ``compact(snapshot)``. Output: ``ready()`` / ``advance(ready)``.
No clock, sockets, files or threads here: time is ``now_ms`` passed in and randomness is the
``random.Random`` passed in, so a simulator can replay any run from a seed.

Election (docs/raft.md "Election"): nodes start as CANDIDATE; voters answer ACCEPT or a DLedger reject
reason; the candidate tallies replies into PASSED / REVOTE_IMMEDIATELY / WAIT_TO_REVOTE /
WAIT_TO_VOTE_NEXT. On top: pre-vote, check-quorum + leader lease, TimeoutNow transfer,
chunked InstallSnapshot, read-index, flow control.

One concept, one module: the state every role transition reads (term, vote, log, commit, role,
configuration), the transitions, and every message handler that acts on that state (the
campaign and vote answers, the leader's replication, the follower's side) are read together to
check Raft's safety, so they live together, as etcd keeps its ``raft.go`` whole. The sections
below: construction and configuration, role changes, tick, step, proposals and Ready, then the
elections, the leader side and the follower side. What is a data structure
with its own tests lives beside it and never reaches into this class: bounds.py (message bounds),
progress.py (per-follower flow control), quorum.py, readonly.py, snapshot_transfer.py,
raftlog.py, membership.py. (Until issue 60 the handlers were three modules of functions that
read and wrote 21 private fields of this class: a concept cut in two by a line count.)
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from autoswitch.controller.consensus.errors import NotLeader, ProposalDropped, RaftError
from autoswitch.controller.consensus.membership import BadMembership, Membership

from autoswitch.base.log import RateLimitedLog, get_logger

from .bounds import MAX_TERM, MAX_TERM_JUMP, TERM_RISE_PER_WINDOW, out_of_bounds
from .config import RaftConfig
from .membership import ConfHistory, base_conf_index, snapshot_membership
from .messages import (
    Entry,
    EntryKind,
    HardState,
    Message,
    MsgType,
    ReadState,
    Ready,
    Role,
    Snapshot,
    SoftState,
    TallyOutcome,
    VoteResult,
)
from .progress import Progress, ProgressState
from .quorum import majority, quorum_index, tally
from .raftlog import LogCompacted, RaftLog
from .readonly import ReadOnly
from .snapshot_transfer import Received, SnapshotReceiver, SnapshotSender

_FROM_LEADER = frozenset({MsgType.APPEND, MsgType.HEARTBEAT, MsgType.SNAPSHOT, MsgType.TIMEOUT_NOW})
_RESPONSES = {MsgType.VOTE_RESP, MsgType.PRE_VOTE_RESP, MsgType.APPEND_RESP, MsgType.HEARTBEAT_RESP,
              MsgType.SNAPSHOT_RESP}
# What only a voter sends: a leader's messages and a candidate's requests (issue 59, item 2)
_LEADER_OR_CANDIDATE = _FROM_LEADER | {MsgType.VOTE, MsgType.PRE_VOTE}
MAX_TERM_RISE_PEERS = 64        # peers whose term rises are tracked (members: MAX_CONTROLLERS and a few)
# answers that stay the same for the rest of the term (votes are durable; a log shrinks only under
# a leader of the term, whose messages end the candidacy anyway)
_NEVER_IN_THIS_TERM = frozenset({VoteResult.REJECT_ALREADY_VOTED, VoteResult.REJECT_EXPIRED_LEDGER_TERM,
                                 VoteResult.REJECT_SMALL_LEDGER_END_INDEX})


@dataclass(slots=True)
class VoteRound:
    """A candidate's round of (pre-)vote requests and the replies so far (self included)."""

    seq: int
    term: int
    pre: bool
    deadline_ms: int
    transfer: bool = False
    replies: dict[str, VoteResult] = field(default_factory=dict)
    max_term: int = 0


class RaftCore:
    def __init__(self, node_id: str, peers: list[str] | tuple[str, ...], config: RaftConfig, rng: random.Random,
                 now_ms: int, hard_state: HardState | None = None, snapshot: Snapshot | None = None,
                 entries: list[Entry] | None = None, catch_up: bool = False,
                 membership: Membership | None = None) -> None:
        """``catch_up``: this node lost its log (a replaced disk, `recover-member`). It neither
        votes nor campaigns until a leader has brought its log up to that leader's commit index:
        an empty voter could otherwise help elect a candidate that lacks committed entries the
        lost log held (Leader Completeness).

        ``membership``: the bootstrap configuration (default: ``peers`` and this node as voters),
        used until the snapshot or a CONFIG entry of the log says otherwise (membership.py). An
        empty one is a node joining an existing cluster: it knows no members, never campaigns,
        and takes its configuration from the first leader that replicates to it."""
        self.id = node_id
        self._term_exhausted_logged = False
        self.catching_up = catch_up
        # Why the process silenced this node (its state machine differs from the others': the
        # state hash check), or None: a silenced node neither votes, campaigns nor leads.
        self.silenced: str | None = None
        # In maintenance (the controller state says so): votes and follows, but never starts a
        # campaign of its own; a leadership transfer to it still does (the operator asked).
        self.no_campaign = False
        self._caught_up_pending = False
        # Fresh: nothing on disk (no term, no vote, no log, no snapshot). A new cluster's members
        # start so, and so does a member whose data directory was wiped -- which must not vote:
        # it may have voted in the current term already, and its empty log makes any candidate
        # look up to date, one that lacks committed entries too. Until its log holds something a
        # leader sent, a fresh node watches for evidence of an existing log (a candidate with a
        # non-empty log, a leader with a commit index or previous entries, a snapshot) and on the
        # first such message turns into a catching-up node (no votes, no campaign) for good.
        self.fresh = (not catch_up and snapshot is None and not entries
                      and (hard_state is None or (hard_state.term == 0 and hard_state.vote is None)))
        self._catch_up_started_pending = False
        self.voters: tuple[str, ...] = ()
        self.learners: tuple[str, ...] = ()
        self._vouched: dict[str, int] = {}      # learner -> until when a voter's word makes it a voter: vouch()
        self.peers: tuple[str, ...] = ()        # every other member: replication and heartbeats
        self.voter_peers: tuple[str, ...] = ()  # the other voters: votes, commit, leases
        self.quorum = 1
        self.conf_version = 0                   # bumped on every change of the configuration in force
        self.cfg = config
        self.rng = rng
        self.now = now_ms
        # peer -> (window start, how far it raised our term in that window): TERM_RISE_PER_WINDOW
        self._term_rises: dict[str, tuple[int, int]] = {}
        self.log_ = get_logger("raft", node=node_id)
        # what a peer's input makes us say: one line per (peer, reason) per 10 s of our clock
        self._peer_log = RateLimitedLog(self.log_, clock=lambda: self.now / 1000)
        hs = hard_state or HardState()
        self.term = hs.term
        self.vote = hs.vote
        snap_index = snapshot.index if snapshot else 0
        snap_term = snapshot.term if snapshot else 0
        loaded = [e for e in (entries or []) if e.index > snap_index]
        if loaded and loaded[0].index != snap_index + 1:
            raise RaftError(f"log starts at {loaded[0].index} but snapshot ends at {snap_index}")
        self.log = RaftLog(snap_index, snap_term, loaded)
        snap_conf, conf_index, _ = snapshot_membership(snapshot.data) if snapshot else (None, None, b"")
        base = snap_conf or membership or Membership.of_ids([*peers, node_id])
        self.confs = ConfHistory(base_conf_index(conf_index, snap_index), snap_term, base)
        for e in loaded:
            if e.kind == EntryKind.CONFIG:
                self.confs.add(e.index, e.term, Membership.decode(e.data))
        self.prs: dict[str, Progress] = {}
        self.role = Role.CANDIDATE
        self._set_conf(self.confs.current)
        self.snapshot: Snapshot | None = snapshot      # latest snapshot, sent to lagging followers
        self.commit = max(snap_index, min(hs.commit, self.log.last_index()))
        self.applied = snap_index
        # When this node first saw the newest voter change committed, on the tick clock: the fact
        # voter-change pacing (a lease policy: controller/server/membership_ops.py) is measured from. The
        # index of the newest configuration that changed the voters (any configuration but the
        # bootstrap one counts after a restart: we cannot tell, and counting it only delays).
        self._voter_change_index = self.confs.index
        # The bootstrap voters stood from the beginning: no lease was ever counted under voters
        # before them, so the first change need not wait.
        self._voters_settled_ms: int | None = (
            -(1 << 62) if self.confs.index == 0 else now_ms if self.commit >= self.confs.index else None)
        self.role = Role.CANDIDATE                      # DLedger: everyone starts as a candidate
        self.leader_id: str | None = None
        self._persisted_hs = HardState(self.term, self.vote, self.commit)
        self._prev_soft = SoftState(None, Role.CANDIDATE, self.term)
        self._msgs_early: list[Message] = []
        self._msgs: list[Message] = []
        self._read_states: list[ReadState] = []
        self._pending_snapshot: Snapshot | None = None
        # election state
        self.need_increase_term = True
        self.next_vote_ms = now_ms + self.rng.randrange(0, self.cfg.max_vote_interval_ms + 1)
        self._round: VoteRound | None = None
        self._round_seq = 0
        self.last_outcome: TallyOutcome | None = None
        self.election_deadline_ms = 0
        self.last_leader_contact_ms: int | None = None
        # leader state
        self.became_leader_ms = 0
        self.next_heartbeat_ms = 0
        self.hb_seq = 0
        self.reads = ReadOnly()
        self.transferee: str | None = None
        self.transfer_deadline_ms = 0
        self._uncommitted = 0          # payload bytes proposed by this leader and not yet committed
        self._bcast_pending = False    # proposals appended since the last Ready, not yet sent
        self._snap_rx = SnapshotReceiver(config.max_snapshot_bytes)
        self._snap_tx = SnapshotSender(config.snapshot_chunk_bytes)

    # ------------------------------------------------------------------ debug accessors
    def hard_state(self) -> HardState:
        return HardState(self.term, self.vote, self.commit)

    def soft_state(self) -> SoftState:
        return SoftState(self.leader_id, self.role, self.term)

    def log_entries(self) -> list[Entry]:
        return list(self.log.entries)

    @property
    def is_leader(self) -> bool:
        return self.role == Role.LEADER

    @property
    def may_lack_committed(self) -> bool:
        """Its log may lack entries the cluster committed: catching up, or fresh with nothing a
        leader sent yet (a wiped member looks like a new cluster's until the leader's first
        message; a new cluster has no master to grant a lease to before its first entry anyway)."""
        return self.catching_up or (self.fresh and self.log.last_index() == 0 and self.log.offset == 0)

    def quorum_active(self, window_ms: int | None = None) -> bool:
        """Leader: has a majority answered within window_ms (default: the check-quorum window)?"""
        if self.role != Role.LEADER:
            return False
        window = self.cfg.election_timeout_min_ms if window_ms is None else window_ms
        active = self._self_votes() + sum(1 for p in self.voter_peers if self.now - self.prs[p].last_ack_ms < window)
        return active >= self.quorum

    def _self_votes(self) -> int:
        """1 when this node counts in its own majorities (a leader that removed itself does not)."""
        return 1 if self.id in self.voters else 0

    # ------------------------------------------------------------------ membership
    @property
    def membership(self) -> Membership:
        return self.confs.current

    def _set_conf(self, conf: Membership) -> None:
        self.voters = conf.voter_ids
        self.learners = conf.learner_ids
        self._vouched = {}
        self.peers = tuple(sorted(p for p in conf.all() if p != self.id))
        self.voter_peers = tuple(p for p in self.voters if p != self.id)
        self.quorum = majority(len(self.voters)) if self.voters else 1
        self.conf_version += 1
        if self.role == Role.LEADER:
            last = self.log.last_index()
            for p in self.peers:
                if p not in self.prs:
                    self.prs[p] = Progress(match=0, next=last + 1, last_ack_ms=self.now)
            for p in [p for p in self.prs if p not in self.peers]:
                del self.prs[p]
        self.log_.info("raft_membership", voters=list(self.voters), learners=list(self.learners),
                       index=self.confs.index, term=self.term)

    def _sync_confs(self, entries: tuple[Entry, ...] | list[Entry]) -> None:
        """After the log changed: configurations of a truncated tail are gone, those of new
        CONFIG entries are in force at once (committed or not: Raft thesis §4.1)."""
        changed = self.confs.truncate(lambda i, t: i <= self.log.last_index() and self.log.term(i) == t)
        for e in entries:
            if e.kind == EntryKind.CONFIG and e.index > self.confs.index and self.log.term(e.index) == e.term:
                conf = Membership.decode(e.data)
                self._note_voter_change(e.index, conf)
                self.confs.add(e.index, e.term, conf)
                changed = True
        if changed:
            self._set_conf(self.confs.current)

    def _note_voter_change(self, index: int, conf: Membership) -> None:
        """A configuration about to be in force at ``index``: the voters settle anew if they differ.
        (A truncated change keeps its index as the reference: the commit of whatever replaces it
        comes later than the commit of the change before it, so the pause only gets longer.)"""
        if self.confs.current.voter_change(conf) > 0 and index > self._voter_change_index:
            self._voter_change_index = index
            self._voters_settled_ms = None

    def _voters_settled(self) -> int | None:
        if self._voters_settled_ms is None and self.commit >= self._voter_change_index:
            self._voters_settled_ms = self.now
        return self._voters_settled_ms

    def voters_settled(self) -> tuple[int | None, int]:
        """(when this node first saw the newest voter change committed, or None: not yet; now),
        both on the tick clock. Voter-change pacing counts from it (membership_ops.pacing_wait_ms)."""
        return self._voters_settled(), self.now

    def conf_change_blocked(self) -> str | None:
        """Why the leader may not propose a configuration change now, or None: Raft's own rules
        (one change at a time, after a commit of its term, not during a leadership transfer).
        Voter-change pacing is the controller's lease policy (membership_ops.pacing_wait_ms)."""
        if self.role != Role.LEADER:
            return "not_leader"
        if self.confs.index > self.commit:
            return "change_in_progress"          # one at a time: the previous one must commit first
        if self.log.term(self.commit) != self.term:
            return "no_commit_in_term"           # Ongaro's fix: a commit of our own term first
        if self.transferee is not None:
            return "leadership_transfer"
        return None

    def applied_conf(self) -> tuple[int, Membership, bool]:
        """(index, configuration) in force after the applied entries, and whether it is also the
        configuration in force (no change appended but not yet applied)."""
        index, conf = self.confs.newest_at(self.applied)
        return index, conf, index == self.confs.index

    def propose_conf(self, conf: Membership) -> int:
        """Append a configuration change (one voter added or removed at most); in force at once."""
        if self.role != Role.LEADER:
            raise NotLeader(self.leader_id)
        why = self.conf_change_blocked()
        if why is not None:
            raise ProposalDropped(why)
        if self.membership.voter_change(conf) > 1:
            raise BadMembership("a configuration change may add or remove one voter at a time")
        if not conf.voters:
            raise BadMembership("a configuration needs a voter")
        data = conf.encode()
        idx = self.log.last_index() + 1
        self._append_local([Entry(idx, self.term, data, EntryKind.CONFIG)])
        self._note_voter_change(idx, conf)
        self.confs.add(idx, self.term, conf)
        self._set_conf(conf)
        self._bcast_pending = True
        return idx

    def promotable(self) -> list[str]:
        """Leader: learners whose log has reached the commit index (ready to become voters)."""
        if self.role != Role.LEADER:
            return []
        return [p for p in self.learners if p in self.prs and self.prs[p].match >= self.commit]

    # ------------------------------------------------------------------ role changes
    def _set_term(self, term: int) -> None:
        assert term >= self.term
        if term > self.term:
            self.term = term
            self.vote = None
            self.leader_id = None

    def _reset_election_timer(self) -> None:
        self.election_deadline_ms = (self.now + self.cfg.election_timeout_min_ms
                                     + self.rng.randrange(0, self.cfg.election_jitter_ms + 1))

    def _vote_backoff(self) -> int:
        return self.rng.randrange(self.cfg.min_vote_interval_ms, self.cfg.max_vote_interval_ms + 1)

    def _become_follower(self, term: int, leader: str | None) -> None:
        if self.role == Role.LEADER:
            self._drop_leader_state()
        self._set_term(term)
        self.role = Role.FOLLOWER
        self.leader_id = leader
        self._round = None
        self._reset_election_timer()
        if leader is not None:
            self.last_leader_contact_ms = self.now

    def _become_candidate(self, term: int, delay_ms: int, increase: bool) -> None:
        if self.role == Role.LEADER:
            self._drop_leader_state()
        self._set_term(term)
        self.role = Role.CANDIDATE
        self.leader_id = None
        self._round = None
        self.need_increase_term = increase
        self.next_vote_ms = self.now + delay_ms

    def _drop_leader_state(self) -> None:
        self.prs = {}
        self.reads.clear()
        self.transferee = None

    def _become_leader(self) -> None:
        assert self.role == Role.CANDIDATE and self.vote == self.id
        self.role = Role.LEADER
        self.leader_id = self.id
        self._round = None
        self.became_leader_ms = self.now
        last = self.log.last_index()
        self.prs = {p: Progress(match=0, next=last + 1, last_ack_ms=self.now) for p in self.peers}
        self.hb_seq = 0
        # like etcd: only this leader's own proposals count (what it inherited is bounded already)
        self._uncommitted = 0
        self.log_.info("raft_became_leader", term=self.term, last_index=last)
        # Raft 5.4.2: earlier terms' entries commit only under a current-term entry.
        self._append_local([Entry(last + 1, self.term, b"", EntryKind.NOOP)])
        self.next_heartbeat_ms = self.now + self.cfg.heartbeat_interval_ms
        self._broadcast_append()

    # ------------------------------------------------------------------ tick
    def tick(self, now_ms: int) -> None:
        assert now_ms >= self.now, "time went backwards"
        self.now = now_ms
        self._voters_settled()
        if self.role == Role.LEADER:
            self._tick_leader()
        elif self.role == Role.FOLLOWER:
            if now_ms >= self.election_deadline_ms:
                self.log_.info("raft_leader_lost", term=self.term, leader=self.leader_id)
                self._become_candidate(self.term, 0, increase=True)
                self._maybe_campaign()
        else:
            if self._round is not None and now_ms >= self._round.deadline_ms:
                self._finish_round()
            self._maybe_campaign()

    def _tick_leader(self) -> None:
        if self.transferee is not None and self.now >= self.transfer_deadline_ms:
            self.log_.warning("raft_transfer_aborted", to=self.transferee, term=self.term)
            self.transferee = None
        if (self.cfg.check_quorum and self.now - self.became_leader_ms >= self.cfg.election_timeout_min_ms
                and not self.quorum_active()):
            self.log_.warning("raft_step_down_no_quorum", term=self.term)
            self._become_candidate(self.term, self._vote_backoff(), increase=True)
            return
        if self.now >= self.next_heartbeat_ms:
            self.next_heartbeat_ms = self.now + self.cfg.heartbeat_interval_ms
            self._broadcast_heartbeat()

    def _refused_sender(self, m: Message) -> str | None:
        """A learner never leads or campaigns: a learner's certificate sent one APPEND at term + 1
        and a follower applied a forged entry (issue 59, item 2). Refused: leader messages and vote
        requests from a sender this node's configuration lists as a learner, unless a voter of it
        named the sender as one of its own voters (vouch: we missed its promotion). A learner's
        pre-vote is answered, never granted (_handle_vote); its replies still count. A sender
        the configuration does not list at all is the transport's to judge (GrpcRaftTransport
        admits members of this configuration only): the core cannot tell a stranger from a member
        added while this node was away, and Raft takes a leader's messages from outside its own
        configuration (docs/raft.md, "Who may lead")."""
        if m.type in _LEADER_OR_CANDIDATE and m.type != MsgType.PRE_VOTE and not self.speaks_as_voter(m.frm):
            return "not_a_voter"
        return None

    def speaks_as_voter(self, nid: str) -> bool:
        """May ``nid`` lead, campaign and raise our term? Anyone but a learner of our configuration
        that no voter of it has lately named a voter (see vouch)."""
        return nid not in self.learners or self._vouched.get(nid, -1) >= self.now

    def vouch(self, frm: str, voters: tuple[str, ...]) -> None:
        """``frm``, a voter of our configuration, answered a vote request naming the voters of its
        own: a learner of ours among them was promoted in entries we have not received, and we take
        it as a voter (without counting it in our quorum) for two election timeouts, renewed by
        each such answer, or until our configuration changes. Only a leader's configuration entry
        makes a voter, so a learner cannot name itself; the expiry leaves a member demoted since
        no voice a stale word gave it. Without this, a node that missed a promotion refused the
        promoted member as leader and as candidate and, when the cluster needed both, nobody could
        lead (simulator, seeds 51 and 83)."""
        if frm not in self.voters:
            return
        until = self.now + 2 * self.cfg.election_timeout_min_ms
        for v in voters:
            if v in self.learners:
                if not self.speaks_as_voter(v):
                    self.log_.info("raft_learner_vouched", frm=frm, learner=v, term=self.term,
                                   note="a voter counts it among its voters: its promotion is in entries this "
                                        "node lacks")
                self._vouched[v] = until

    def _term_rise(self, m: Message) -> tuple[int, str | None]:
        """How far ``m``, whose term is above ours, raises it: (the term we take, why not m.term or
        None). A learner raises no term (a sender the configuration does not list: see
        _refused_sender); a vote answer's term is adopted by the round (_finish_round, in steps); a
        pre-vote request raises nothing here; anything else raises it by at most MAX_TERM_JUMP per
        message and TERM_RISE_PER_WINDOW per peer and election_timeout_min window. A message from
        further ahead raises our term by what the bounds allow and is dropped: a node that is
        honestly far behind (a learner joining a cluster past term 64) climbs to its leader's term
        in a few windows; a stream cannot walk faster than the budget."""
        if m.type in (MsgType.VOTE_RESP, MsgType.PRE_VOTE_RESP, MsgType.PRE_VOTE):
            return m.term, None
        if not self.speaks_as_voter(m.frm):
            return self.term, "term_from_non_voter"
        rise = m.term - self.term
        start, risen = self._term_rises.get(m.frm, (self.now, 0))
        if self.now - start >= self.cfg.election_timeout_min_ms:
            start, risen = self.now, 0
        allowed = max(0, min(rise, MAX_TERM_JUMP, TERM_RISE_PER_WINDOW - risen))
        if allowed and (m.frm in self._term_rises or len(self._term_rises) < MAX_TERM_RISE_PEERS):
            self._term_rises[m.frm] = (start, risen + allowed)
        elif allowed:
            allowed = 0         # too many peers tracked already: nothing untracked raises a term
        if allowed == rise:
            return m.term, None
        return self.term + allowed, "term_jump" if rise > MAX_TERM_JUMP else "term_rise_rate"

    def _watch_for_an_existing_log(self, m: Message) -> None:
        """See ``fresh`` in __init__ (issue 30: a wiped controller rejoined as a new member)."""
        if self.log.last_index() > 0 or self.log.offset > 0:
            self.fresh = False          # it holds entries a leader of a new cluster sent: a member like any
            return
        if m.type in (MsgType.VOTE, MsgType.PRE_VOTE):
            existing = m.index > 0 or m.log_term > 0
        elif m.type in (MsgType.APPEND, MsgType.HEARTBEAT):
            existing = m.commit > 0 or m.index > 0
        else:
            existing = m.type == MsgType.SNAPSHOT
        if not existing:
            return
        self.fresh = False
        self.catching_up = True
        self._catch_up_started_pending = True
        # Not an alarm by itself: a member's first start looks the same until it has caught up, and
        # only then can the controller tell, from the replicated state, whether it ran here before
        # (ControllerNode: controller_first_start_caught_up / controller_rejoined_with_empty_data_dir).
        self.log_.info("raft_empty_node_catching_up", term=self.term, frm=m.frm, type=m.type.name,
                       note="this node has no log but the cluster has one: no votes and no campaign until a leader "
                            "brought it up to its commit index")

    # ------------------------------------------------------------------ step
    def step(self, m: Message) -> None:
        """Feed one message from a peer. Malformed/stale input is dropped with a log line."""
        # Who may talk is the transport's check (it authenticates); the core answers a sender its
        # configuration does not list, as Raft requires (thesis §4.1): a node that missed a
        # membership change must still follow a leader added meanwhile, and vote for a candidate it
        # has never heard of (the simulator deadlocked when a lagging voter refused the only
        # candidate that could win, seed 160). A learner of its configuration is another matter
        # (_refused_sender), unless a voter vouched for it (a promotion we missed: vouch).
        # A removed node cannot disrupt: its pre-vote meets the leader lease of the others.
        if m.to != self.id:
            self._peer_log.warning((m.frm[:64], "not_for_us"), "raft_drop_message", reason="not_for_us", frm=m.frm[:64],
                                   to=m.to[:64], type=m.type.name)
            return

        bad = out_of_bounds(m)
        if bad is not None:
            # Adopting such a term would poison the hard state for good (the next term cannot
            # be encoded, even after restarts); no real cluster gets near the bounds.
            self._peer_log.warning((m.frm, "out_of_bounds"), "raft_drop_message", reason="out_of_bounds", field=bad,
                                   frm=m.frm, type=m.type.name,
                              term=m.term)
            return
        if self._refused_sender(m) is not None:
            self._peer_log.warning((m.frm, "not_a_voter"), "raft_drop_message", reason="not_a_voter", frm=m.frm,
                                   type=m.type.name, term=m.term, voters=list(self.voters))
            return
        if m.term > self.term:
            term, why = self._term_rise(m)
            if why is not None:
                self._peer_log.warning((m.frm, why), "raft_drop_message", reason=why, frm=m.frm,
                                       type=m.type.name, term=self.term, msg_term=m.term, climbed_to=term,
                                       max_jump=MAX_TERM_JUMP, per_window=TERM_RISE_PER_WINDOW)
                if term > self.term:
                    self._become_follower(term, None)
                return
        if self.fresh:
            self._watch_for_an_existing_log(m)
        if m.type in (MsgType.VOTE, MsgType.PRE_VOTE):
            self._handle_vote(m)
            return
        problem = self._malformed(m)
        if problem is not None:
            self._peer_log.warning((m.frm, problem), "raft_drop_message", reason=problem, frm=m.frm, type=m.type.name,
                                   term=m.term)
            return
        if m.type in (MsgType.VOTE_RESP, MsgType.PRE_VOTE_RESP):
            self._handle_vote_resp(m)
            return
        if m.term > self.term:
            if m.type in _RESPONSES:
                # a reply from a newer term: we are stale (a deposed leader learns it here)
                self.log_.info("raft_newer_term_seen", term=self.term, new_term=m.term, frm=m.frm)
                self._become_follower(m.term, None)
                return
            self._become_follower(m.term, m.frm)
        elif m.term < self.term:
            if m.type in (MsgType.APPEND, MsgType.HEARTBEAT, MsgType.SNAPSHOT):
                # tell the stale leader about the newer term so it steps down
                self._send(Message(MsgType.APPEND_RESP, self.id, m.frm, self.term, reject=True))
            return
        # Same term from here on: what a message means depends on our role (etcd stepLeader /
        # stepCandidate / stepFollower).
        if self.role == Role.LEADER:
            self._step_leader(m)
        elif self.role == Role.CANDIDATE:
            self._step_candidate(m)
        else:
            self._step_follower(m)

    def _step_leader(self, m: Message) -> None:
        if m.type in _FROM_LEADER:
            self._peer_log.warning((m.frm, "two_leaders"), "raft_two_leaders_same_term", term=self.term, other=m.frm)
        elif m.type == MsgType.APPEND_RESP:
            self._handle_append_resp(m)
        elif m.type == MsgType.HEARTBEAT_RESP:
            self._handle_heartbeat_resp(m)
        elif m.type == MsgType.SNAPSHOT_RESP:
            self._handle_snapshot_resp(m)

    def _step_candidate(self, m: Message) -> None:
        if m.type in _FROM_LEADER:   # a leader of our term exists: follow it
            self._become_follower(m.term, m.frm)
            self._step_follower(m)
        # responses to a leader we no longer are: stale, dropped

    def _step_follower(self, m: Message) -> None:
        if m.type not in _FROM_LEADER:
            return                   # responses to a leader we no longer are: stale, dropped
        if self.leader_id != m.frm:
            self._become_follower(m.term, m.frm)
        self.last_leader_contact_ms = self.now
        self._reset_election_timer()
        if m.type == MsgType.APPEND:
            self._handle_append(m)
        elif m.type == MsgType.HEARTBEAT:
            self._handle_heartbeat(m)
        elif m.type == MsgType.SNAPSHOT:
            self._handle_snapshot(m)
        else:
            self._handle_timeout_now(m)

    def _malformed(self, m: Message) -> str | None:
        """Structural checks that do not depend on our state; such input is dropped, never applied."""
        if m.frm == self.id:
            return "from_self"
        if m.type == MsgType.APPEND:
            prev_i, prev_t = m.index, m.log_term
            for e in m.entries:
                if e.index != prev_i + 1 or e.term < prev_t or e.term > m.term:
                    return "entries_not_contiguous"
                if len(e.data) > self.cfg.max_entry_bytes:
                    return "entry_too_big"
                if e.kind == EntryKind.CONFIG:
                    try:
                        Membership.decode(e.data)
                    except BadMembership:
                        return "bad_config_entry"
                prev_i, prev_t = e.index, e.term
            if m.log_term > m.term:
                return "prev_term_after_term"
        elif m.type == MsgType.APPEND_RESP and not m.reject and m.term == self.term \
                and self.role == Role.LEADER and m.index > self.log.last_index():
            return "ack_beyond_log"
        elif m.type == MsgType.SNAPSHOT:
            if m.snap_term > m.term or m.snap_offset + len(m.snap_data) > m.snap_total:
                return "bad_snapshot_chunk"
        return None

    # ------------------------------------------------------------------ log
    def _append_local(self, entries: list[Entry]) -> None:
        # the leader's own copy counts towards commit only once persisted (advance -> log.stable)
        self.log.append(entries)

    # ------------------------------------------------------------------ client API
    def propose(self, data: bytes) -> int:
        """Append data as a new entry; returns its index. Raises NotLeader / ProposalDropped."""
        if self.role != Role.LEADER:
            raise NotLeader(self.leader_id)
        if self.transferee is not None:
            raise ProposalDropped("leadership_transfer", to=self.transferee)
        if len(data) > self.cfg.max_entry_bytes:
            raise ProposalDropped("entry_too_big", size=len(data), limit=self.cfg.max_entry_bytes)
        if self._uncommitted + len(data) > self.cfg.max_uncommitted_bytes:
            raise ProposalDropped("uncommitted_limit", limit=self.cfg.max_uncommitted_bytes)
        idx = self.log.last_index() + 1
        self._append_local([Entry(idx, self.term, bytes(data))])
        self._uncommitted += len(data)
        # Broadcast once per Ready, not once per proposal: proposals made in the same event-loop
        # pass (a Batch RPC's writes) travel in one AppendEntries per follower instead of one
        # each, and each follower acks once (was ~2 x N Raft messages per N writes).
        self._bcast_pending = True
        return idx

    def read_index(self, ctx: object) -> None:
        """Ask for a ReadState(ctx, index): apply up to index, then a local read is linearizable."""
        if self.role != Role.LEADER:
            raise NotLeader(self.leader_id)
        if len(self.reads) >= self.cfg.max_pending_reads:
            raise ProposalDropped("too_many_pending_reads", limit=self.cfg.max_pending_reads)
        if self.log.term(self.commit) != self.term:
            # our commit index may be stale until our no-op commits (Raft 6.4)
            self.reads.wait_for_commit(ctx)
            return
        self._start_read(ctx)




    def transfer_leadership(self, to: str) -> None:
        if self.role != Role.LEADER:
            raise NotLeader(self.leader_id)
        if to == self.id:
            return
        if to not in self.voter_peers:
            raise RaftError(f"unknown transfer target {to!r} (not a voter)", to=to)
        self.transferee = to
        self.transfer_deadline_ms = self.now + self.cfg.election_timeout_min_ms
        self.log_.info("raft_transfer_start", to=to, term=self.term)
        if self.prs[to].match == self.log.last_index():
            self._send(Message(MsgType.TIMEOUT_NOW, self.id, to, self.term))
        else:
            self._send_append(to)

    def silence(self, reason: str) -> None:
        """No votes, no campaign, no leadership from now on (a leader steps down); the node keeps
        following, so the log stays whole for `recover-member` to rebuild the state from."""
        if self.silenced is None:
            self.log_.error("raft_silenced", reason=reason, term=self.term, role=self.role.name)
        self.silenced = reason
        if self.role == Role.LEADER:
            self._become_follower(self.term, None)

    def compact(self, snapshot: Snapshot, keep: int = 0) -> None:
        """The driver took (and durably saved) a snapshot of applied state up to snapshot.index."""
        assert snapshot.index <= self.applied, (snapshot.index, self.applied)
        assert self.log.term(snapshot.index) in (snapshot.term, None)
        if self.snapshot is None or snapshot.index > self.snapshot.index:
            self.snapshot = snapshot
        self.log.compact(max(self.log.offset, snapshot.index - keep))
        self.confs.compact(self.log.offset)

    # ------------------------------------------------------------------ output
    def _send(self, m: Message) -> None:
        if m.type in (MsgType.APPEND, MsgType.HEARTBEAT, MsgType.SNAPSHOT, MsgType.TIMEOUT_NOW):
            self._msgs_early.append(m)      # leader traffic: its term is already durable
        else:
            self._msgs.append(m)            # replies/vote requests promise persisted state

    def has_ready(self) -> bool:
        return bool(self._bcast_pending or self._msgs or self._msgs_early or self._read_states or self._pending_snapshot
                    or self.log.stable < self.log.last_index() or self.commit > self.applied
                    or (self.term, self.vote) != (self._persisted_hs.term, self._persisted_hs.vote)
                    or self.soft_state() != self._prev_soft or self._catch_up_started_pending)

    def ready(self) -> Ready:
        if self._bcast_pending:
            self._bcast_pending = False
            if self.role == Role.LEADER:
                self._broadcast_append()
        rd = Ready()
        if (self.term, self.vote) != (self._persisted_hs.term, self._persisted_hs.vote):
            rd.hard_state = self.hard_state()
        rd.entries = self.log.unstable()
        rd.snapshot = self._pending_snapshot
        if self.commit > self.applied:
            lo = self.applied + 1
            try:
                rd.committed_entries = self.log.slice(lo, self.commit, self.cfg.max_apply_bytes,
                                                      self.cfg.max_apply_entries)
            except LogCompacted:
                rd.committed_entries = []
        rd.messages_early, self._msgs_early = self._msgs_early, []
        rd.messages, self._msgs = self._msgs, []
        rd.read_states, self._read_states = self._read_states, []
        rd.caught_up = self._caught_up_pending
        rd.catch_up_started = self._catch_up_started_pending
        ss = self.soft_state()
        if ss != self._prev_soft:
            rd.soft_state = ss
            self._prev_soft = ss
        return rd

    def advance(self, rd: Ready) -> None:
        if rd.caught_up:
            self._caught_up_pending = False
        if rd.catch_up_started:
            self._catch_up_started_pending = False
        if rd.hard_state is not None:
            self._persisted_hs = rd.hard_state
        if rd.snapshot is not None and self._pending_snapshot is rd.snapshot:
            self._pending_snapshot = None
        if rd.entries:
            last = rd.entries[-1]
            self.log.stable_to(last.index, last.term)
        if rd.committed_entries:
            self.applied = max(self.applied, rd.committed_entries[-1].index)
        if self.role == Role.LEADER:
            self._commit_and_spread()

    # ------------------------------------------------------------------ elections: campaigns, vote answers
    def _maybe_campaign(self, transfer: bool = False) -> None:
        if self.role != Role.CANDIDATE or self._round is not None:
            return
        if self.id not in self.voters:
            self._ask_who_leads()
            return
        if self.catching_up or self.silenced is not None:
            return
        if self.term + 1 >= MAX_TERM:
            # the last term is never entered by a campaign: there would be none after it
            if not self._term_exhausted_logged:
                self._term_exhausted_logged = True
                self.log_.error("raft_term_exhausted", term=self.term, max_term=MAX_TERM,
                                hint="restore a snapshot into new directories (docs/operations-controller.md)")
            return
        if not transfer and (self.now < self.next_vote_ms or self.no_campaign):
            return
        increase = self.need_increase_term or self.vote not in (None, self.id)
        if increase and self.cfg.pre_vote and not transfer and len(self.voters) > 1:
            self._start_round(self.term + 1, pre=True, transfer=False)
            return
        if increase:
            self._set_term(self.term + 1)
        self.vote = self.id
        self.need_increase_term = False
        self._start_round(self.term, pre=False, transfer=transfer)

    def _ask_who_leads(self) -> None:
        """A learner that lost its leader asks the voters it knows, once per election timeout, with a
        pre-vote nobody grants: their answers carry their term and their voters. It may have missed
        the promotion of the learner that now leads (refused by _refused_sender until a voter names it,
        RaftCore.vouch), or be more than MAX_TERM_JUMP terms behind (its term climbs by the answers)."""
        if not self.voter_peers or self.now < self.next_vote_ms:
            return
        self.next_vote_ms = self.now + self.cfg.election_timeout_min_ms + self._vote_backoff()
        for p in self.voter_peers:
            self._send(Message(MsgType.PRE_VOTE, self.id, p, self.term + 1, index=self.log.last_index(),
                               log_term=self.log.last_term()))

    def _start_round(self, term: int, pre: bool, transfer: bool) -> None:
        self._round_seq += 1
        rnd = VoteRound(self._round_seq, term, pre, self.now + self.cfg.vote_round_timeout_ms, transfer)
        rnd.replies[self.id] = VoteResult.ACCEPT
        self._round = rnd
        self.log_.debug("raft_vote_round", term=term, pre=pre, seq=rnd.seq)
        t = MsgType.PRE_VOTE if pre else MsgType.VOTE
        for p in self.voter_peers:
            self._send(Message(t, self.id, p, term, index=self.log.last_index(), log_term=self.log.last_term(),
                               seq=rnd.seq, transfer=transfer))
        self._check_round()

    def _check_round(self) -> None:
        rnd = self._round
        assert rnd is not None
        accepted = sum(1 for r in rnd.replies.values() if r == VoteResult.ACCEPT)
        not_ready = sum(1 for r in rnd.replies.values() if r == VoteResult.REJECT_TERM_NOT_READY)
        outstanding = len(self.voters) - len(rnd.replies)
        # no need to wait for a dead voter once the outcome is PASSED or REVOTE_IMMEDIATELY, or once
        # the missing replies could not make it either (a split vote: back off now, not after the timeout)
        if (accepted + not_ready >= self.quorum or outstanding == 0
                or accepted + not_ready + outstanding < self.quorum):
            self._finish_round()

    def _finish_round(self) -> None:
        rnd = self._round
        assert rnd is not None
        self._round = None
        outcome = tally(rnd.replies, self.quorum, rnd.max_term, rnd.term)
        self.last_outcome = outcome
        self.log_.info("raft_vote_tally", term=rnd.term, pre=rnd.pre, outcome=outcome.value,
                       replies={k: v.name for k, v in rnd.replies.items()})
        if outcome == TallyOutcome.PASSED:
            if rnd.pre:
                assert rnd.term == self.term + 1      # any term change would have dropped the round
                self._set_term(rnd.term)
                self.vote = self.id
                self.need_increase_term = False
                self._start_round(self.term, pre=False, transfer=False)
            elif rnd.term == self.term and self.vote == self.id:
                self._become_leader()
            return
        if outcome == TallyOutcome.REVOTE_IMMEDIATELY:
            self.need_increase_term = False
            self.next_vote_ms = self.now
            if rnd.transfer:
                # the revote of a leadership transfer must still bypass the voters' leader lease
                self._maybe_campaign(transfer=True)
                return
        elif outcome == TallyOutcome.WAIT_TO_REVOTE:
            # DLedger revotes in the same term, waiting for the bigger log's owner to win. Only while
            # the term can still be won: a voter that voted for another or holds a bigger log never
            # grants it, and that owner may never campaign (no voter in its own configuration, one
            # appended and not yet committed: the simulator's seed 1716 hung split for good) -> the
            # next term (pre-vote first), which a majority of equal logs can win.
            settled = sum(1 for r in rnd.replies.values() if r in _NEVER_IN_THIS_TERM)
            self.need_increase_term = rnd.pre or len(self.voters) - settled < self.quorum
            self.next_vote_ms = self.now + self._vote_backoff()
        else:
            self.need_increase_term = True
            delay = self._vote_backoff()
            if any(r == VoteResult.REJECT_ALREADY_HAS_LEADER for r in rnd.replies.values()):
                # also after a refused pre-vote: retrying it every 50-200 ms instead broke liveness
                # in the simulator's vote-hunt schedule (tests/unit/test_sim_seeds.py), not analysed
                delay += self.cfg.election_timeout_min_ms
            self.next_vote_ms = self.now + delay
            if rnd.max_term > self.term:
                self._set_term(min(rnd.max_term, self.term + MAX_TERM_JUMP))
        if self.role == Role.CANDIDATE:
            self._maybe_campaign()

    def _in_lease(self) -> bool:
        """Has a leader been heard from recently (or are we an active leader)? Then refuse to elect."""
        if not self.cfg.check_quorum:
            return False
        if self.role == Role.LEADER:
            return self.quorum_active()
        return (self.role == Role.FOLLOWER and self.leader_id is not None
                and self.last_leader_contact_ms is not None
                and self.now - self.last_leader_contact_ms < self.cfg.election_timeout_min_ms)

    def _reply_vote(self, m: Message, result: VoteResult, term: int | None = None) -> None:
        t = MsgType.PRE_VOTE_RESP if m.type == MsgType.PRE_VOTE else MsgType.VOTE_RESP
        # the answer names our voters: a node that missed a promotion learns it from us (RaftCore.vouch)
        self._send(Message(t, self.id, m.frm, self.term if term is None else term, seq=m.seq, vote_result=result,
                           reject=result != VoteResult.ACCEPT, voters=self.voters))

    def _ledger_check(self, m: Message) -> VoteResult | None:
        if m.log_term < self.log.last_term():
            return VoteResult.REJECT_EXPIRED_LEDGER_TERM
        if m.log_term == self.log.last_term() and m.index < self.log.last_index():
            return VoteResult.REJECT_SMALL_LEDGER_END_INDEX
        return None

    def _handle_vote(self, m: Message) -> None:
        if m.frm == self.id:
            self._reply_vote(m, VoteResult.REJECT_UNEXPECTED_LEADER)
            return
        if not self.speaks_as_voter(m.frm):
            # a learner's pre-vote is a question (ask_who_leads), never granted; it changes nothing here
            # (a learner's vote request was dropped before: RaftCore._refused_sender)
            self._reply_vote(m, VoteResult.REJECT_UNKNOWN_LEADER)
            return
        if self.catching_up or self.silenced is not None:
            # silenced: our state machine differs from the others' (the state hash check).
            # our (lost) log may have been part of a committed majority: no say in elections.
            # (A learner does vote when asked: it may have been promoted without knowing yet, and
            # the candidate counts only the voters of its own configuration; etcd does the same.)
            # A plain no: "my log is longer" (REJECT_SMALL_LEDGER_END_INDEX, as before) made two
            # live voters that split a term re-ask that same term for ever (simulator, wipes).
            self._reply_vote(m, VoteResult.REJECT_ALREADY_VOTED)
            return
        if m.type == MsgType.PRE_VOTE:
            # pre-vote never changes our state (etcd's PreVote, Ongaro thesis 9.6)
            if m.term < self.term:
                self._reply_vote(m, VoteResult.REJECT_EXPIRED_VOTE_TERM)
            elif self._in_lease():
                self._reply_vote(m, VoteResult.REJECT_ALREADY_HAS_LEADER)
            elif (r := self._ledger_check(m)) is not None:
                self._reply_vote(m, r)
            elif m.term < self.log.last_term():
                self._reply_vote(m, VoteResult.REJECT_TERM_SMALL_THAN_LEDGER, self.log.last_term())
            else:
                self._reply_vote(m, VoteResult.ACCEPT)
            return
        if m.term > self.term and not m.transfer and self._in_lease():
            # check-quorum lease: a live leader is not deposed by a node that cannot hear it
            self._reply_vote(m, VoteResult.REJECT_ALREADY_HAS_LEADER)
            return
        if m.term < self.term:
            self._reply_vote(m, VoteResult.REJECT_EXPIRED_VOTE_TERM)
            return
        if m.term == self.term:
            if self.vote is not None and self.vote != m.frm:
                self._reply_vote(m, VoteResult.REJECT_ALREADY_HAS_LEADER if self.leader_id is not None
                                 else VoteResult.REJECT_ALREADY_VOTED)
                return
        else:
            # DLedger: adopt the term as a candidate, answer "not ready"; the requester re-votes at once
            self.log_.info("raft_term_not_ready", term=self.term, new_term=m.term, frm=m.frm)
            self._become_candidate(m.term, self._reset_candidate_delay(), increase=False)
            self._reply_vote(m, VoteResult.REJECT_TERM_NOT_READY)
            return
        if (r := self._ledger_check(m)) is not None:
            self._reply_vote(m, r)
            return
        if m.term < self.log.last_term():
            self._reply_vote(m, VoteResult.REJECT_TERM_SMALL_THAN_LEDGER, self.log.last_term())
            return
        self.vote = m.frm
        if self.role == Role.CANDIDATE:
            self._round = None
            self.next_vote_ms = self.now + self.cfg.election_timeout_min_ms + self._vote_backoff()
        else:
            self._reset_election_timer()
        self._reply_vote(m, VoteResult.ACCEPT)

    def _reset_candidate_delay(self) -> int:
        return self.cfg.election_timeout_min_ms + self.rng.randrange(0, self.cfg.election_jitter_ms + 1)

    def _handle_vote_resp(self, m: Message) -> None:
        if m.frm in self.voters:
            self.vouch(m.frm, m.voters)
            if self.id not in self.voters and m.term > self.term and self.role != Role.LEADER:
                # the answer to ask_who_leads: a voter's term, adopted in steps like a round's
                self._set_term(min(m.term, self.term + MAX_TERM_JUMP))
        rnd = self._round
        if self.role != Role.CANDIDATE or rnd is None or m.seq != rnd.seq:
            return
        if (m.type == MsgType.PRE_VOTE_RESP) != rnd.pre or m.frm not in self.voters:
            return
        if m.vote_result in (VoteResult.REJECT_EXPIRED_VOTE_TERM, VoteResult.REJECT_TERM_SMALL_THAN_LEDGER):
            rnd.max_term = max(rnd.max_term, m.term)
        rnd.replies[m.frm] = m.vote_result
        self._check_round()

    # ------------------------------------------------------------------ the leader side: replication, commit, reads
    def _handle_append_resp(self, m: Message) -> None:
        pr = self.prs.get(m.frm)
        if self.role != Role.LEADER or pr is None:      # pr None: not (or no longer) a member
            return
        pr.last_ack_ms = self.now
        if m.reject:
            rejected = m.index
            if rejected > pr.match and m.reject_hint < pr.match:
                self._follower_lost_entries(m.frm, pr, m.reject_hint)
            if pr.state == ProgressState.REPLICATE:
                if rejected <= pr.match:
                    return                      # stale reject of something since acknowledged
                pr.become_probe()
            elif pr.state == ProgressState.PROBE and rejected != pr.next - 1:
                return                          # reply to an older probe
            # fast back-off (etcd findConflictByTerm): the largest index <= hint whose term <= hint term
            hint = min(rejected, m.reject_hint)
            if m.reject_term:
                while hint > self.log.offset and (self.log.term(hint) or 0) > m.reject_term:
                    hint -= 1
                if hint == self.log.offset and self.log.offset_term > m.reject_term:
                    hint -= 1     # conflict at our snapshot index: only the snapshot repairs it (sim seed 240)
            if hint + 1 >= pr.next:
                hint = pr.next - 2          # every reject moves the probe back at least one entry
            pr.next = max(pr.match + 1, hint + 1)
            pr.paused = False
            self._send_append(m.frm)
            return
        pr.acked(m.index)
        if pr.state == ProgressState.SNAPSHOT and pr.match >= pr.snap_index:
            pr.state = ProgressState.PROBE
        if pr.state == ProgressState.PROBE:
            pr.become_replicate()
        pr.paused = False
        self._commit_and_spread()
        if self.transferee == m.frm and pr.match == self.log.last_index():
            self._send(Message(MsgType.TIMEOUT_NOW, self.id, m.frm, self.term))
        if self.role == Role.LEADER:
            while self._send_append(m.frm):
                pass

    def _handle_heartbeat_resp(self, m: Message) -> None:
        pr = self.prs.get(m.frm)
        if self.role != Role.LEADER or pr is None:
            return
        pr.last_ack_ms = self.now
        pr.hb_acked = max(pr.hb_acked, m.seq)
        pr.paused = False
        if m.reject and m.index < pr.match:
            self._follower_lost_entries(m.frm, pr, m.index)
            pr.next = m.index + 1       # probe from where its log really ends
        if pr.state == ProgressState.SNAPSHOT:
            if self.now - pr.snap_sent_ms >= self.cfg.election_timeout_min_ms:
                self._send_snapshot_chunk(m.frm)       # a chunk or its ack was lost
        elif pr.match < self.log.last_index():
            if pr.state == ProgressState.REPLICATE and len(pr.inflight) >= self.cfg.max_inflight:
                # appends (or their acks) were lost: free a slot so the follower hears from us again;
                # a gap makes it reject, which sends us back to probing (etcd does the same)
                pr.inflight.popleft()
            # even with nothing new to send: an empty append at next-1 makes a follower that lost
            # appends reject, which drops us back to probing from its real end (etcd sendIfEmpty)
            self._send_append(m.frm, send_empty=True)
        self._release_reads()

    def _follower_lost_entries(self, peer: str, pr: Progress, now_has: int) -> None:
        """It no longer holds what it acknowledged: its log was lost and it rejoined (recover-member,
        a replaced disk, a wiped directory). Our match for it is void; without this reset every probe
        went back to match + 1 for ever and it never caught up (issue 29)."""
        self.log_.warning("raft_follower_lost_entries", peer=peer, match=pr.match, now_has=now_has)
        pr.match = now_has
        pr.become_probe()

    def _handle_snapshot_resp(self, m: Message) -> None:
        pr = self.prs.get(m.frm)
        if self.role != Role.LEADER or pr is None:
            return
        pr.last_ack_ms = self.now
        if pr.state != ProgressState.SNAPSHOT or m.snap_index != pr.snap_index:
            return
        pr.snap_offset = m.index
        self._send_snapshot_chunk(m.frm)

    def _maybe_commit(self) -> None:
        mine = [self.log.stable] if self.id in self.voters else []
        n = quorum_index([*mine, *(self.prs[p].match for p in self.voter_peers)], self.quorum)
        # Figure 8: only an entry of the current term is committed by counting replicas
        if n > self.commit and self.log.term(n) == self.term:
            self._uncommitted = max(0, self._uncommitted - sum(len(e.data) for e in self.log.slice(self.commit + 1, n)))
            self.commit = n
            for ctx in self.reads.take_waiting():
                self._start_read(ctx)
            if self.id not in self.voters and self.confs.index <= self.commit:
                # our own removal committed: hand over to the voters (they elect after their
                # election timeout; the controller moves leadership first to make that instant)
                self.log_.info("raft_removed_step_down", term=self.term, index=self.confs.index)
                self._become_follower(self.term, None)

    def _commit_and_spread(self) -> None:
        """Advance the commit index; when it moved, tell every follower now (etcd's bcastAppend
        after maybeCommit): a follower applies an entry, and pushes it to the brokers watching it,
        only once it learns the entry is committed, which would otherwise wait for the next
        heartbeat (a handover's new master heard of its election ~50-90 ms late)."""
        before = self.commit
        self._maybe_commit()
        if self.commit > before and self.role == Role.LEADER:
            for p in self.peers:
                self._send_append(p, send_empty=True)

    def _send_append(self, to: str, send_empty: bool = False) -> bool:
        """Send one AppendEntries if flow control allows; True if something was sent."""
        pr = self.prs[to]
        if pr.state == ProgressState.SNAPSHOT:
            return False
        if pr.paused or len(pr.inflight) >= self.cfg.max_inflight:
            return False
        prev = pr.next - 1
        prev_term = self.log.term(prev)
        if prev_term is None or prev < self.log.offset:
            return self._start_snapshot(to)
        last = self.log.last_index()
        if pr.next > last and pr.state == ProgressState.REPLICATE and not send_empty:
            return False
        try:
            ents = self.log.slice(pr.next, last, self.cfg.max_append_bytes, self.cfg.max_append_entries)
        except LogCompacted:
            return self._start_snapshot(to)
        self._send(Message(MsgType.APPEND, self.id, to, self.term, index=prev, log_term=prev_term,
                           entries=tuple(ents), commit=self.commit))
        if pr.state == ProgressState.REPLICATE:
            if ents:
                pr.next = ents[-1].index + 1
                pr.inflight.append(ents[-1].index)
            return bool(ents)
        pr.paused = True
        return True

    def _start_snapshot(self, to: str) -> bool:
        if self.snapshot is None:
            self.log_.error("raft_no_snapshot_for_lagging_follower", to=to, offset=self.log.offset)
            return False
        pr = self.prs[to]
        pr.become_snapshot(self.snapshot.index)
        self.log_.info("raft_snapshot_send", to=to, index=self.snapshot.index, size=len(self.snapshot.data))
        self._send_snapshot_chunk(to)
        return False

    def _send_snapshot_chunk(self, to: str) -> None:
        pr = self.prs[to]
        snap = self.snapshot
        assert snap is not None
        if snap.index != pr.snap_index:                # a newer snapshot replaced it: start over
            pr.snap_index, pr.snap_offset = snap.index, 0
        off, chunk, done, crc = self._snap_tx.chunk(snap, pr.snap_offset)
        pr.snap_sent_ms = self.now
        self._send(Message(MsgType.SNAPSHOT, self.id, to, self.term, snap_index=snap.index, snap_term=snap.term,
                           snap_offset=off, snap_total=len(snap.data), snap_crc=crc,
                           snap_done=done, snap_data=chunk))

    def _broadcast_append(self) -> None:
        for p in self.peers:
            while self._send_append(p):
                if self.prs[p].state != ProgressState.REPLICATE:
                    break

    def _broadcast_heartbeat(self) -> None:
        self.hb_seq += 1
        for p in self.peers:
            pr = self.prs[p]
            self._send(Message(MsgType.HEARTBEAT, self.id, p, self.term, commit=min(pr.match, self.commit),
                               seq=self.hb_seq))
        self._release_reads()

    def _start_read(self, ctx: object) -> None:
        if not self.voter_peers:
            self._read_states.append(ReadState(ctx, self.commit))
            return
        self.hb_seq += 1
        self.reads.add(ctx, self.commit, self.hb_seq)
        for p in self.peers:
            pr = self.prs[p]
            self._send(Message(MsgType.HEARTBEAT, self.id, p, self.term, commit=min(pr.match, self.commit),
                               seq=self.hb_seq))

    def _release_reads(self) -> None:
        if self.reads.pending:
            self._read_states.extend(self.reads.release(self._heartbeat_quorum_acked))

    def _heartbeat_quorum_acked(self, seq: int) -> bool:
        return self._self_votes() + sum(1 for p in self.voter_peers if self.prs[p].hb_acked >= seq) >= self.quorum

    # ------------------------------------------------------------------ the follower side
    def _handle_append(self, m: Message) -> None:
        if m.index < self.commit:
            self._send(Message(MsgType.APPEND_RESP, self.id, m.frm, self.term, index=self.commit))
            return
        last = self.log.maybe_append(m.index, m.log_term, m.entries, self.commit)
        if last is None:
            hint = min(m.index, self.log.last_index())
            # etcd findConflictByTerm, follower side: none of our entries with a term above the
            # leader's prev term can match, so hint below them. Without it, a follower holding a
            # newer term's entries at the leader's prev index (e.g. term 3 over the leader's 2)
            # answered the same hint for ever and never caught up (simulator seed 1511).
            while hint > max(self.commit, self.log.offset) and (self.log.term(hint) or 0) > m.log_term:
                hint -= 1
            self._send(Message(MsgType.APPEND_RESP, self.id, m.frm, self.term, index=m.index, reject=True,
                               reject_hint=hint, reject_term=self.log.term(hint) or 0))
            return
        if m.entries or last < self.confs.index:
            self._sync_confs(m.entries)
        self._commit_to(min(m.commit, last))
        if self.catching_up and last >= m.commit:
            # m.commit is the leader's commit index: everything committed anywhere is now ours
            self.catching_up = False
            self._caught_up_pending = True
            self.log_.info("raft_caught_up", term=self.term, index=last, leader=m.frm)
        self._send(Message(MsgType.APPEND_RESP, self.id, m.frm, self.term, index=last))

    def _commit_to(self, index: int) -> None:
        if index > self.commit:
            assert index <= self.log.last_index()
            self.commit = index

    def _handle_heartbeat(self, m: Message) -> None:
        self._commit_to(min(m.commit, self.log.last_index()))
        # A catching-up node (wiped, recovered) tells the leader where its log really ends: the
        # leader's match for it may be from before the loss, and with nothing new to append the
        # leader would never send it anything (the cluster idles, the node never catches up).
        behind = self.catching_up and self.log.last_index() < m.commit
        self._send(Message(MsgType.HEARTBEAT_RESP, self.id, m.frm, self.term, seq=m.seq, reject=behind,
                           index=self.log.last_index() if behind else 0))

    def _handle_timeout_now(self, m: Message) -> None:
        self.log_.info("raft_timeout_now", term=self.term, frm=m.frm)
        self._become_candidate(self.term, 0, increase=True)
        self._maybe_campaign(transfer=True)

    def _handle_snapshot(self, m: Message) -> None:
        if m.snap_index <= self.commit:
            self._snap_rx.reset()
            self._send(Message(MsgType.APPEND_RESP, self.id, m.frm, self.term, index=self.commit))
            return
        got = self._snap_rx.on_chunk(m)
        match got.kind:
            case Received.TOO_BIG:
                self.log_.error("raft_snapshot_too_big", total=m.snap_total, limit=self.cfg.max_snapshot_bytes)
            case Received.OVERRUN:
                self.log_.error("raft_snapshot_overrun", index=m.snap_index, got=got.offset, total=m.snap_total)
            case Received.OUT_OF_ORDER:
                self._send(Message(MsgType.SNAPSHOT_RESP, self.id, m.frm, self.term, index=got.offset, reject=True,
                                   snap_index=m.snap_index))
            case Received.MORE:
                self._send(Message(MsgType.SNAPSHOT_RESP, self.id, m.frm, self.term, index=got.offset,
                                   snap_index=m.snap_index))
            case Received.CORRUPT:
                self.log_.error("raft_snapshot_crc_mismatch", index=m.snap_index, size=got.offset,
                                total=m.snap_total)
                self._send(Message(MsgType.SNAPSHOT_RESP, self.id, m.frm, self.term, index=0, reject=True,
                                   snap_index=m.snap_index))
            case Received.DONE:
                snap = got.snapshot
                assert snap is not None
                self.log_.info("raft_snapshot_received", index=snap.index, term=snap.term, size=len(snap.data))
                self.log.restore(snap.index, snap.term)
                try:
                    snap_conf, conf_index, _ = snapshot_membership(snap.data)
                except BadMembership as e:
                    self.log_.error("raft_snapshot_bad_membership", index=snap.index, error=str(e))
                    snap_conf, conf_index = None, None
                self.confs.reset(base_conf_index(conf_index, snap.index), snap.term, snap_conf or self.membership)
                self._voter_change_index = max(self._voter_change_index, self.confs.index)
                self._voters_settled_ms = None      # seen committed anew (the pause only gets longer)
                self._set_conf(self.confs.current)
                self.snapshot = snap
                self._pending_snapshot = snap
                self.commit = max(self.commit, snap.index)
                self.applied = max(self.applied, snap.index)
                self._send(Message(MsgType.APPEND_RESP, self.id, m.frm, self.term, index=self.log.last_index()))
