"""Phase A: N controller nodes (sans-IO RaftCore + ControllerStateMachine) under faults.

One integer seed fixes everything: the cores' RNGs, the network, the fault schedule, clock drift
and the workload of controller requests. Invariants are checked after every step (see
``_check_*``); a violation raises ``Violation`` with the virtual time.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import msgspec
from autoswitch.controller.consensus.errors import RaftError
from autoswitch.controller.consensus.membership import Member, Membership
from autoswitch.controller.messages import (
    TRIGGER_ADMIN,
    TRIGGER_BROKER,
    TRIGGER_CONTROLLER,
    AlterSyncStateSetRequest,
    ApplyBrokerIdRequest,
    BrokerLiveInfo,
    CleanBrokerDataRequest,
    ElectMasterRequest,
    FinalizeFeaturesRequest,
    RegisterBrokerRequest,
    Reply,
    Request,
    SetControllerMaintenanceRequest,
    SetMaintenanceRequest,
    UpdateControllerConfigRequest,
    encode_request,
)
from autoswitch.controller.raft.bounds import MAX_TERM_JUMP, TERM_RISE_PER_WINDOW
from autoswitch.controller.raft.config import RaftConfig
from autoswitch.controller.raft.core import RaftCore
from autoswitch.controller.raft.membership import pack_snapshot, unpack_snapshot
from autoswitch.controller.raft.messages import Entry, EntryKind, Message, MsgType, Role, Snapshot
from autoswitch.controller.raft.storage import MemoryStorage
from autoswitch.controller.state.sm_config import SMConfig
from autoswitch.controller.state.statemachine import ControllerStateMachine, handle

from .common import FaultMix, Stats, Violation
from .net import Clock, NetFaults, Network

GROUPS = ("g0", "g1")
CLUSTER = "c"
TICK_MS = 10
MAX_LOG_ENTRIES = 5_000        # bound per run: the workload stops proposing beyond this
MAX_DRY_RUNS = 5_000           # dry runs remembered per run (one per proposed election at most)


class TornStorage(MemoryStorage):
    """MemoryStorage whose crash keeps a random prefix of the unsynced writes, the last one
    possibly cut inside its entries: a torn tail at the storage-interface level."""

    def __init__(self, rng: random.Random) -> None:
        super().__init__(sync=False)
        self.rng = rng
        self.torn = 0
        # controller/raft/node.py's catch-up marker (a file, fsynced before the Ready's entries)
        self.catch_up = False

    def crash(self) -> None:
        staged, self._staged = self._staged, []
        if not staged:
            return
        keep = self.rng.randint(0, len(staged))
        for i, (op, arg) in enumerate(staged[:keep]):
            if op == "entries" and i == keep - 1 and len(arg) > 1:
                arg = arg[: self.rng.randint(1, len(arg))]
                self.torn += 1
            self._apply(op, arg)


@dataclass
class Node:
    nid: str
    core: RaftCore
    storage: TornStorage
    sm: ControllerStateMachine
    clock: Clock
    alive: bool = True
    restart_at: int | None = None
    last_epoch: dict[str, int] = field(default_factory=dict)
    lazy_hs: bool = False            # planted bug state: an unsynced vote is pending


class ControllerSim:
    def __init__(self, seed: int, n: int = 3, bugs: frozenset[str] = frozenset(), duration_ms: int = 2500,
                 mix: FaultMix | None = None, liveness_ms: int = 3000, spares: int = 0, wipes: bool = False,
                 operator: bool = False, hostile: bool = False) -> None:
        """``spares``: nodes that start outside the cluster; the workload then also changes the
        membership (adds them as learners, promotes caught-up learners, removes voters) whenever
        the leader may (one change at a time), under the same faults. ``wipes``: the fault menu also
        wipes a node's data directory (it restarts on an empty storage, as a fresh node), one node
        at a time (a majority wiped at once is an operator's duty: docs/operations-controller.md)."""
        self.wipes = wipes
        # ``hostile``: a peer with a member's key forges Raft messages during the storm (issue 59):
        # a learner's APPEND at term + 1 carrying a forged entry, and a voter's stream of heartbeats
        # each as far above the last as one message may go. Its own random stream.
        self.hostile = random.Random(f"hostile/{seed}") if hostile else None
        self.burst_targets: set[str] = set()
        self.last_voter_ms: dict[str, int] = {}     # when some node's configuration last named it a voter
        # ``operator``: the workload also finalizes feature level 2 and cordons / uncordons brokers
        # and controller members (an own random stream: the other seeds' runs stay as they were)
        self.operator = random.Random(f"ops/{seed}") if operator else None
        # encoded ElectMaster -> (the proposing leader's applied index, its dry run's reply): when
        # the entry applies right behind that index, the real election must be the dry run's
        self._dry: dict[bytes, tuple[int, Reply]] = {}
        self.seed = seed
        self.rng = random.Random(f"ctl/{seed}")
        self.ids = [f"c{i}" for i in range(n + spares)]
        self.initial = self.ids[:n]
        self.next_conf_change = 0
        self.bugs = bugs
        self.duration = duration_ms
        self.liveness_ms = liveness_ms
        self.mix = mix or FaultMix.draw(self.rng)
        self.net = Network(random.Random(f"net/{seed}"), NetFaults())
        self.cfg = RaftConfig(heartbeat_interval_ms=50, max_heartbeat_leak=4, election_jitter_ms=200,
                              min_vote_interval_ms=20, max_vote_interval_ms=100, vote_round_timeout_ms=60)
        self.sm_cfg = SMConfig()
        self.now = 0
        self.stats = Stats()
        self.nodes: dict[str, Node] = {}
        for nid in self.ids:
            drift = self.rng.uniform(-0.005, 0.005)
            self.nodes[nid] = self._boot(nid, TornStorage(random.Random(f"disk/{seed}/{nid}")),
                                         Clock(1 + drift, self.rng.randint(0, 10_000)))
        # global histories for the invariants
        self.leader_of_term: dict[int, str] = {}
        self.committed: dict[int, tuple[int, bytes]] = {}     # index -> (term, data) as first applied
        self.master_at: dict[tuple[str, int], int | None] = {}  # (group, MasterEpoch) -> master
        self.next_workload = 0
        self.next_fault = self.mix.every_ms
        self.next_logcheck = 0
        self.check_every_ms = 250
        self.storm = True
        self._crash_soon: set[str] = set()
        self.committed_confs: dict[int, Membership] = {}    # log index -> committed configuration

    # ------------------------------------------------------------------ nodes
    def _boot(self, nid: str, storage: TornStorage, clock: Clock) -> Node:
        rec = storage.load()
        peers = [p for p in self.initial if p != nid]
        joining = nid not in self.initial
        core = RaftCore(nid, peers, self.cfg, random.Random(f"core/{self.seed}/{nid}/{self.now}"),
                        clock.local(self.now), rec.hard_state, rec.snapshot, rec.entries,
                        membership=Membership() if joining else Membership.of_ids(self.initial),
                        catch_up=storage.catch_up)
        if "learner_may_lead" in self.bugs:
            core.speaks_as_voter = lambda nid: True      # BUG: a learner's leader messages (and terms) are taken
        if "no_term_rise_budget" in self.bugs:
            # BUG: only the old per-message bound (2^20), no budget per peer and window
            core._term_rise = lambda m: ((core.term, "term_jump") if m.term - core.term > 1 << 20 and m.type not in (
                MsgType.VOTE_RESP, MsgType.PRE_VOTE_RESP, MsgType.PRE_VOTE) else (m.term, None))
        if "wiped_member_votes" in self.bugs:
            core.fresh = False      # BUG: an empty storage is taken as a new cluster's member
        sm = ControllerStateMachine(self.sm_cfg)
        if rec.snapshot is not None:
            sm.restore(unpack_snapshot(rec.snapshot.data)[1])
            sm.last_applied_index = rec.snapshot.index
        return Node(nid, core, storage, sm, clock)

    def crash(self, nid: str, quick: bool = False) -> None:
        n = self.nodes[nid]
        if not n.alive:
            return
        n.alive = False
        n.storage.crash()
        self.stats.crashes += 1
        n.restart_at = self.now + (self.rng.choice((0, 2, 5)) if quick else self.rng.choice((0, 5, 20, 100, 400, 1000)))

    def restart(self, nid: str) -> None:
        old = self.nodes[nid]
        node = self._boot(nid, old.storage, old.clock)
        # the state machine replays the log from its snapshot: per-node monotonicity restarts
        self.nodes[nid] = node

    # ------------------------------------------------------------------ the driver (Ready contract)
    def process(self, nid: str, crash_point: bool = False) -> None:
        n = self.nodes[nid]
        while n.alive and n.core.has_ready():
            rd = n.core.ready()
            for m in rd.messages_early:
                self.net.send(self.now, nid, m.to, m)
            if rd.snapshot is not None:
                n.storage.install_snapshot(rd.snapshot)
                n.sm.restore(unpack_snapshot(rd.snapshot.data)[1])
                n.sm.last_applied_index = rd.snapshot.index
            if rd.catch_up_started:
                n.storage.catch_up = True        # durable before this Ready's entries
            if rd.hard_state is not None or rd.entries:
                n.storage.save(rd.hard_state, rd.entries)
            if crash_point and rd.must_sync:
                self.stats.torn += 1
                self.crash(nid)          # died inside fsync: part of the unsynced tail survives
                return
            if "vote_not_persisted" in self.bugs and not rd.entries and rd.hard_state is not None:
                n.lazy_hs = True         # BUG: the vote reply goes out, the vote stays in the page cache
            else:
                n.storage.sync()
                n.lazy_hs = False
            if rd.caught_up:
                n.storage.catch_up = False       # after this Ready's entries are durable
            for m in rd.messages:
                self.net.send(self.now, nid, m.to, m)
                if (m.type == MsgType.VOTE_RESP and not m.reject and self.storm
                        and self.rng.random() < self.mix.crash_after_vote):
                    self._crash_soon.add(nid)   # adversary: die right after granting a vote
            for e in rd.committed_entries:
                if e.index <= n.sm.last_applied_index:
                    continue
                self._apply(n, e)
            n.core.advance(rd)
        if n.alive:
            self._check_leader(n)

    def _apply(self, n: Node, e: Entry) -> None:
        prev = self.committed.get(e.index)
        if prev is None:
            self.committed[e.index] = (e.term, e.data)
            self.stats.applied += 1
        elif prev != (e.term, e.data):
            raise Violation("raft.state_machine_safety",
                            f"{n.nid} applied index {e.index} term {e.term}, another node applied term {prev[0]}",
                            self.now)
        dry = self._dry.get(e.data) if e.kind == EntryKind.NORMAL else None
        before = n.sm.last_applied_index
        reply = n.sm.apply(e.index, e.data if e.kind == EntryKind.NORMAL else b"")
        if dry is not None and dry[0] == before and e.index == before + 1 and isinstance(reply, Reply):
            real = msgspec.structs.replace(reply, decision=msgspec.structs.replace(reply.decision, index=0))
            if real != dry[1]:
                raise Violation("controller.dry_run_agrees", f"{n.nid} index {e.index}: dry run {dry[1]}, "
                                f"election {real}", self.now)
            self.stats.extra["dry_runs_agreed"] = self.stats.extra.get("dry_runs_agreed", 0) + 1
        # the process adapter's part (controller/server/node.py): a member in maintenance never campaigns
        n.core.no_campaign = n.nid in n.sm.state.controller_maintenance
        if e.kind == EntryKind.CONFIG:
            self._check_conf(n, e)
        self._check_controller(n)

    def _check_conf(self, n: Node, e: Entry) -> None:
        """Committed configurations form one chain, each one voter away from the one before."""
        new = Membership.decode(e.data)
        self.committed_confs[e.index] = new
        before = [i for i in self.committed_confs if i < e.index]
        prev = self.committed_confs[max(before)] if before else Membership.of_ids(self.initial)
        if prev.voter_change(new) > 1:
            raise Violation("raft.one_voter_per_change",
                            f"{n.nid} applied {sorted(new.voters)} at {e.index} after {sorted(prev.voters)}", self.now)

    # ------------------------------------------------------------------ invariants
    def _check_leader(self, n: Node) -> None:
        c = n.core
        if c.role != Role.LEADER:
            return
        other = self.leader_of_term.get(c.term)
        if other is None:
            self.leader_of_term[c.term] = n.nid
            self.stats.leaders += 1
            # leader completeness: every entry any node applied is in the new leader's log
            for idx, (term, _data) in self.committed.items():
                if idx <= c.log.offset:
                    continue
                t = c.log.term(idx)
                if t != term:
                    raise Violation("raft.leader_completeness",
                                    f"leader {n.nid} term {c.term} lacks committed index {idx} (term {term}, has {t})",
                                    self.now)
        elif other != n.nid:
            raise Violation("raft.election_safety", f"two leaders in term {c.term}: {other} and {n.nid}", self.now)

    def _check_controller(self, n: Node) -> None:
        for name, g in n.sm.state.groups.items():
            key = (name, g.master_epoch)
            if g.master_broker_id is None:
                pass     # "no master" (also a group re-created from its tombstone) claims nothing
            elif key in self.master_at:
                if self.master_at[key] != g.master_broker_id:
                    raise Violation("controller.one_master_per_epoch",
                                    f"{name} MasterEpoch {g.master_epoch}: master {g.master_broker_id} on {n.nid}, "
                                    f"{self.master_at[key]} elsewhere", self.now)
            else:
                self.master_at[key] = g.master_broker_id
                self.stats.elections += 1
            if g.master_broker_id is not None and g.master_broker_id not in g.sync_state_set:
                raise Violation("controller.master_in_sss", f"{name}: master outside {sorted(g.sync_state_set)}",
                                self.now)
            last = n.last_epoch.get(name, 0)
            if g.master_epoch < last:
                raise Violation("controller.epoch_monotonic", f"{name} on {n.nid}: epoch {g.master_epoch} < {last}",
                                self.now)
            n.last_epoch[name] = g.master_epoch

    def _check_log_matching(self) -> None:
        live = [n for n in self.nodes.values() if n.alive]
        for i, a in enumerate(live):
            for b in live[i + 1:]:
                la, lb = a.core.log, b.core.log
                lo = max(la.offset, lb.offset) + 1
                hi = min(la.last_index(), lb.last_index())
                match = 0
                for idx in range(hi, lo - 1, -1):
                    if la.term(idx) == lb.term(idx):
                        match = idx
                        break
                for idx in range(lo, match + 1):
                    if la.entry(idx) != lb.entry(idx):
                        raise Violation("raft.log_matching",
                                        f"{a.nid}/{b.nid} agree at {match} but differ at {idx}", self.now)

    # ------------------------------------------------------------------ workload
    def _leader(self) -> Node | None:
        ls = [n for n in self.nodes.values() if n.alive and n.core.role == Role.LEADER]
        return max(ls, key=lambda n: n.core.term) if ls else None

    def _request(self, n: Node):
        st = n.sm.state
        r = self.rng
        name = r.choice(GROUPS)
        g = st.groups.get(name)
        ts = self.now + 1_000_000
        if g is None or (len(g.brokers) < 3 and r.random() < 0.5):
            nxt = g.next_assign_broker_id if g else (st.tombstones[name].next_assign_broker_id
                                                    if name in st.tombstones else 1)
            bid = nxt if r.random() < 0.9 else r.randint(1, nxt + 1)
            return ApplyBrokerIdRequest(CLUSTER, name, bid, f"10.0.0.{bid}:9000;{r.randint(0, 3)}", ts)
        ids = sorted(g.brokers)
        k = r.random()
        alive = tuple(BrokerLiveInfo(b, r.randint(0, 3), r.randint(0, 1000), 0, r.randint(0, 2),
                                     r.random() < 0.9) for b in ids if r.random() < 0.7)
        dead = tuple(b for b in ids if b not in {a.broker_id for a in alive} and r.random() < 0.7)
        if k < 0.35:
            trig = r.choice((TRIGGER_CONTROLLER, TRIGGER_BROKER, TRIGGER_ADMIN))
            designate = trig == TRIGGER_ADMIN and r.random() < 0.5
            return ElectMasterRequest(CLUSTER, name, trig, r.choice(ids) if trig != TRIGGER_CONTROLLER else 0,
                                      designate, alive, ts, dead)
        if k < 0.7 and g.master_broker_id is not None:
            new = {g.master_broker_id} | {b for b in ids if r.random() < 0.5}
            stale = r.random() < 0.15
            return AlterSyncStateSetRequest(name, g.master_broker_id, g.master_epoch - stale, tuple(sorted(new)),
                                            g.sync_state_set_epoch, tuple(a.broker_id for a in alive), ts)
        if k < 0.85:
            b = r.choice(ids)
            return RegisterBrokerRequest(CLUSTER, name, b, f"10.0.0.{b}:9000", r.random() < 0.85, ts)
        if k < 0.95:
            return CleanBrokerDataRequest(CLUSTER, name, (r.choice(ids),) if r.random() < 0.8 else (),
                                          r.random() < 0.3, tuple(a.broker_id for a in alive), ts)
        return UpdateControllerConfigRequest({"enable_elect_unclean_master": r.choice(("true", "false"))}, ts)

    def _operator_request(self, n: Node) -> Request | None:
        """Feature level 2 first, then cordons and uncordons of brokers and controller members."""
        r = self.operator
        assert r is not None
        st = n.sm.state
        if st.feature_level < 2:
            return FinalizeFeaturesRequest(2, self.now + 1_000_000)
        if r.random() < 0.3:
            return SetControllerMaintenanceRequest(r.choice(self.ids), r.random() < 0.5, self.now + 1_000_000,
                                                   tuple(sorted(n.core.voters)))
        groups = sorted(st.groups)
        if not groups:
            return None
        g = st.groups[r.choice(groups)]
        return SetMaintenanceRequest(g.broker_name, r.choice(sorted(g.brokers)), r.random() < 0.6,
                                     self.now + 1_000_000)

    def _membership_change(self) -> None:
        if len(self.ids) == len(self.initial) or self.now < self.next_conf_change:
            return
        self.next_conf_change = self.now + self.rng.randint(50, 300)
        n = self._leader()
        if n is None or n.core.conf_change_blocked() is not None:
            return
        if any(self._lost_log(k) for k in n.core.voters if k != n.nid):
            # an operator changes no membership while a voter recovers from a wiped directory
            # (docs/operations-controller.md): a removal could leave it a majority's missing vote
            return
        conf, r = n.core.membership, self.rng
        try:
            ready = n.core.promotable()
            outside = [p for p in self.ids if conf.member(p) is None]
            x = r.random()
            if ready and x < 0.5:
                new = conf.promoted(r.choice(ready))
            elif outside and x < 0.8:
                new = conf.with_learner(r.choice(outside), Member())
            elif len(conf.voters) > 2:
                new = conf.without(r.choice(conf.voter_ids))
            else:
                return
            n.core.propose_conf(new)
            self.stats.proposals += 1
        except RaftError:     # NotLeader / ProposalDropped / BadMembership: the operator retries later
            return
        self.process(n.nid)

    def _workload(self) -> None:
        self._membership_change()
        if self.now < self.next_workload:
            return
        self.next_workload = self.now + self.rng.randint(20, 120)
        n = self._leader()
        if n is None or n.core.log.last_index() > MAX_LOG_ENTRIES:
            return
        req = self._operator_request(n) if self.operator is not None and self.operator.random() < 0.2 else None
        req = req or self._request(n)
        data = encode_request(req)
        if isinstance(req, ElectMasterRequest) and len(self._dry) < MAX_DRY_RUNS:
            self._dry[data] = (n.sm.last_applied_index, handle(req, n.sm.state)[1])
        try:
            n.core.propose(data)
            self.stats.proposals += 1
        except RaftError:    # NotLeader / ProposalDropped (flow control): the client retries later
            return
        self.process(n.nid)

    # ------------------------------------------------------------------ faults
    def _faults(self, storm: bool) -> None:
        if self.now < self.next_fault:
            return
        self.next_fault = self.now + self.mix.every_ms
        r, m = self.rng, self.mix
        f = self.net.faults
        if not storm:
            return
        f.drop, f.dup, f.slow = m.drop, m.dup, m.slow
        x = r.random()
        if x < m.partition:
            side = set(r.sample(self.ids, r.randint(1, len(self.ids) // 2)))
            self.net.heal()
            self.net.partition(side, set(self.ids))
            self.stats.partitions += 1
        elif x < m.partition + m.one_way:
            a, b = r.sample(self.ids, 2)
            self.net.cut_one_way(a, b)
            self.stats.partitions += 1
        elif x < m.partition + m.one_way + m.heal:
            self.net.heal()
        elif x < m.partition + m.one_way + m.heal + m.crash:
            ld = self._leader()
            victim = ld.nid if ld is not None and r.random() < 0.5 else r.choice(self.ids)
            self.crash(victim)
        elif x < m.partition + m.one_way + m.heal + m.crash + m.crash_in_persist:
            self._pending_persist_crash = r.choice(self.ids)
        elif self.wipes and x < m.partition + m.one_way + m.heal + m.crash + m.crash_in_persist + 0.04:
            self._wipe(r.choice(self.ids))
        if r.random() < 0.05:
            ld = self._leader()
            if ld is not None and ld.core.applied > ld.core.log.offset + 5:
                self._snapshot(ld)
        if self.hostile is not None and self.hostile.random() < 0.3:
            self._attack()

    def _attack(self) -> None:
        """A hostile member forges messages at a node that is not the leader: as a learner, an APPEND
        at the node's term + 1 with a forged configuration write marked committed; as a voter (a
        stolen key), heartbeats each MAX_TERM_JUMP above the last. Senders are members of the
        target's own configuration: the product's transport refuses anyone else before the core
        (GrpcRaftTransport, tested over real sockets in tests/integration/test_secure.py)."""
        h = self.hostile
        assert h is not None
        ld = self._leader()
        targets = [n for n in self.nodes.values() if n.alive and n is not ld]
        if ld is None or not targets:
            return
        t = h.choice(targets)
        conf = t.core.membership
        # a learner no log has named a voter lately: a voter's word makes a member a voter for two
        # election timeouts at a node that missed its promotion (RaftCore.vouch), so a key that
        # was a voter's that recently still speaks as one there (docs/security.md); older, no
        recently = self.now - 2 * self.cfg.election_timeout_min_ms - 10
        learners = [p for p in conf.learner_ids if p != t.nid and self.last_voter_ms.get(p, -1 << 62) < recently]
        if learners and h.random() < 0.5:
            frm = h.choice(learners)
            last = t.core.log.last_index()
            forged = Entry(last + 1, t.core.term + 1,
                           encode_request(UpdateControllerConfigRequest({"enable_elect_unclean_master": "true"}, 1)))
            m = Message(MsgType.APPEND, frm, t.nid, t.core.term + 1, index=last, log_term=t.core.log.term(last) or 0,
                        commit=last + 1, entries=(forged,))
            self._forge(t, m)
            self.stats.extra["forged_appends"] = self.stats.extra.get("forged_appends", 0) + 1
            return
        voters = [p for p in conf.voter_ids if p not in (t.nid, ld.nid)]
        if not voters or t.nid not in ld.core.membership.voter_ids:
            # a voter's key at a learner: it takes the terms (a voter's are to be taken) and then
            # refuses the leader's lower term until the cluster passes it; learners' terms move no
            # voter, so nothing brings the cluster there (docs/security.md: what a voter's key can do)
            return
        frm = h.choice(voters)
        self.burst_targets.add(t.nid)
        for k in range(1, 101):
            self._forge(t, Message(MsgType.HEARTBEAT, frm, t.nid, t.core.term + k * MAX_TERM_JUMP))
        self.stats.extra["forged_heartbeats"] = self.stats.extra.get("forged_heartbeats", 0) + 100

    def _forge(self, t: Node, m: Message) -> None:
        """Delivered at once: the sender's role was judged now (a promotion the network would let
        overtake the message makes it a voter's, which may do what it does)."""
        t.core.step(m)
        self.process(t.nid)

    def _wedged_by_voter_key(self, ld: Node) -> set[str]:
        """After a voter's key walked a member above the cluster's term: the learners of the
        leader's configuration above the leader's term (the walked one, and any that took the term
        from it while it still counted it a voter). They refuse the leader's lower term, and a
        learner's term moves no voter: what a voter's key can do (docs/security.md; the remedy is
        recover-member). Without a walk, no member is excused."""
        if not self.burst_targets:
            return set()
        return {nid for nid, n in self.nodes.items() if nid not in ld.core.membership.voter_ids
                and n.core.term > ld.core.term}

    def _check_terms(self) -> None:
        """No stream of messages walks the term space: every node's term stays within what honest
        campaigns and the per-peer budget allow over the run (TERM_RISE_PER_WINDOW per election
        timeout per peer), far from MAX_TERM."""
        windows = self.now // self.cfg.election_timeout_min_ms + 1
        bound = windows * (TERM_RISE_PER_WINDOW + 1) * len(self.ids)
        for n in self.nodes.values():
            if n.core.term > bound:
                raise Violation("raft.term_rise", f"{n.nid} at term {n.core.term}, above {bound} after "
                                f"{self.now} ms (a stream of messages walks the term space)", self.now)

    def _wipe(self, nid: str) -> None:
        """The node's data directory is wiped: it dies and restarts on an empty storage. Only one
        voter of a configuration of three or more at a time, while every other voter holds its
        log: a majority wiped (one of two voters is half) is the operator's duty, not the code's."""
        ld = self._leader()
        voters = ld.core.voters if ld is not None else ()
        if len(voters) < 3 or nid not in voters:
            return
        if any(self._lost_log(k) for k in voters if k != nid):
            return
        n = self.nodes[nid]
        self.crash(nid)
        n.storage = TornStorage(random.Random(f"disk/{self.seed}/{nid}/wiped/{self.now}"))
        self.stats.extra["wipes"] = self.stats.extra.get("wipes", 0) + 1

    def _lost_log(self, nid: str) -> bool:
        """Wiped and not caught up yet: catching up, or nothing on its storage at all."""
        st = self.nodes[nid].storage
        rec = st.load()
        return st.catch_up or (rec.snapshot is None and not rec.entries)

    def _snapshot(self, n: Node) -> None:
        c = n.core
        idx = c.applied
        if idx <= c.log.offset or n.sm.last_applied_index != idx:
            return
        snap = Snapshot(idx, c.log.term(idx) or c.log.offset_term, pack_snapshot(c.confs.at(idx), n.sm.snapshot()))
        n.storage.save_snapshot(snap)
        n.storage.sync()
        c.compact(snap)

    # ------------------------------------------------------------------ main loop
    _pending_persist_crash: str | None = None

    def step(self, storm: bool) -> None:
        self.now += 1
        self.storm = storm
        if self.hostile is not None:
            for n in self.nodes.values():
                for v in n.core.voters:
                    self.last_voter_ms[v] = self.now
        while self._crash_soon:
            self.crash(self._crash_soon.pop(), quick=True)
        for _frm, to, msg in self.net.due(self.now):
            n = self.nodes[to]
            if not n.alive:
                continue
            n.core.step(msg)
            crash = self._pending_persist_crash == to
            if crash:
                self._pending_persist_crash = None
            self.process(to, crash_point=crash)
        for nid, n in list(self.nodes.items()):
            if not n.alive:
                if n.restart_at is not None and self.now >= n.restart_at:
                    self.restart(nid)
                continue
            if self.now % TICK_MS == 0:
                n.core.tick(n.clock.local(self.now))
                self.process(nid)
        self._faults(storm)
        if self.now % TICK_MS == 0:
            self._workload()
        if self.now >= self.next_logcheck:
            self.next_logcheck = self.now + self.check_every_ms
            self._check_log_matching()

    def run(self) -> Stats:
        while self.now < self.duration:
            self.step(storm=True)
        # liveness: heal everything, restart the dead; a leader must commit a new entry in time
        self.net.heal()
        self.net.faults = NetFaults()
        self._pending_persist_crash = None
        for _nid, n in self.nodes.items():
            if not n.alive:
                n.restart_at = self.now
        deadline = self.now + self.liveness_ms
        target = None
        while self.now < deadline:
            self.step(storm=False)
            ld = self._leader()
            if ld is not None and target is None and ld.core.log.term(ld.core.commit) == ld.core.term:
                try:
                    target = ld.core.propose(encode_request(UpdateControllerConfigRequest(
                        {"enable_elect_unclean_master": "false"}, 1)))
                except RaftError:       # NotLeader / ProposalDropped: tried again next round
                    target = None
                self.process(ld.nid)
            members = set(ld.core.membership.all()) - self._wedged_by_voter_key(ld) if ld is not None else set()
            if target is not None and all(n.sm.last_applied_index >= target for nid, n in self.nodes.items()
                                          if nid in members or not members):
                break
        else:
            raise Violation("liveness.controller",
                            f"no entry committed on every node within {self.liveness_ms} ms after healing", self.now)
        self._check_log_matching()
        self._check_terms()
        self.stats.virtual_ms = self.now
        self.stats.messages = self.net.sent
        self.stats.dropped = self.net.dropped
        self.stats.duplicated = self.net.duplicated
        return self.stats


def run_seed(seed: int, bugs: frozenset[str] = frozenset(), **kw) -> Stats:
    return ControllerSim(seed, bugs=bugs, **kw).run()
