"""Phase B: the brokers of one group under faults, with controller liveness, leases and HA.

Real cores driven here: ControllerStateMachine (the Raft-replicated state; Phase A attacks the
replication itself), one HeartbeatTable per controller node (quorum liveness, lease grants), the
ReplicasManager core as every broker's brain (registration, heartbeats and the master lease, role
switches on a higher MasterEpoch, elections it asks for, the write fence, unclean-restart rules;
rm_driver.py executes its commands as ReplicasAdapter does), SyncStateTracker,
MasterSession/SlaveSession over SimLog + EpochCache. What is modelled here, not run: the
controller's gRPC edges, the broker's store (SimLog) and the processes (crashes, power cuts,
clones).

Time is integer virtual milliseconds; every node has its own drifting clock.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import random
from dataclasses import dataclass, field
from typing import Any

from autoswitch.broker.replicas.lease import LeaseConfig
from autoswitch.broker.replicas.run_marker import RunMarker
from autoswitch.controller.api import BrokerReport, Heartbeat
from autoswitch.controller.consensus.membership import Membership
from autoswitch.controller.failover.lease import LeaseFacts, lease_verdict
from autoswitch.controller.failover.liveness import HeartbeatTable, LivenessView
from autoswitch.controller.failover.takeover import (
    RegistrationFacts,
    RegistrationVerdict,
    registration_verdict,
)
from autoswitch.controller.messages import (
    TRIGGER_ADMIN,
    TRIGGER_BROKER,
    TRIGGER_CONTROLLER,
    TRIGGER_HANDOVER,
    AlterSyncStateSetRequest,
    ApplyBrokerIdRequest,
    ElectMasterRequest,
    FinalizeFeaturesRequest,
    RegisterBrokerRequest,
    UpdateControllerConfigRequest,
)
from autoswitch.controller.state import election as election_mod
from autoswitch.controller.state import statemachine as sm_mod
from autoswitch.controller.state.sm_config import SMConfig
from autoswitch.controller.state.statemachine import ControllerStateMachine
from autoswitch.epochfile import EpochEntry
from autoswitch.ha.codec import Ack, MasterHandshake, SlaveHandshake, Transfer
from autoswitch.ha.codec_v4 import MAX_DIGEST_ENTRIES, Digests
from autoswitch.ha.config import HAConfig
from autoswitch.ha.digest import RangeBook
from autoswitch.ha.master_session import MasterSession
from autoswitch.ha.slave_session import SlaveSession
from autoswitch.ha.sync_state import SyncStateTracker, admission_refusal, expansion_refusals

from autoswitch.base.errors import AutoswitchError
from autoswitch.base.features import SUPPORTED_LEVEL
from autoswitch.base.log import get_logger

from . import rm_driver
from .common import FaultMix, HoldFromFirstReportTable, Stats, Violation
from .memlog import SimLog, record
from .net import Clock, NetFaults, Network

GROUP = "g"
CLUSTER = "c"
TICK = 10
HB_INTERVAL = 100
POLL_INTERVAL = 250
HB_TIMEOUT = 1000          # controller heartbeat timeout (replicated config)
SCAN_INTERVAL = 200
PRODUCE_TIMEOUT = 1500
LEASE = LeaseConfig(enabled=True, master_lease_ms=600, heartbeat_timeout_ms=HB_TIMEOUT,
                    max_clock_rate_drift=0.01, safety_ms=200).validate(HB_INTERVAL)
HA = HAConfig(heartbeat_interval_s=0.1, ha_max_time_slave_not_catchup_s=1.0, transfer_batch_size=256,
              proposal_backoff_min_s=0.05, proposal_backoff_max_s=0.5, ack_mode="all",
              digest_range_bytes=512, digest_history=16, digest_interval_s=0.4, digest_round_bytes=1 << 20)
MAX_MESSAGES = 2_000       # produce bound per run
PROPOSAL_TIMEOUT = 1000    # an AlterSyncStateSet without a reply by then has failed (the adapter's RPC timeout)
FLUSH_MS = 200             # DataSim(power_loss=True) with async flush: each broker fsyncs this often


# ---------------------------------------------------------------------- planted bugs (sim only)

class NoUnionTracker(SyncStateTracker):
    """BUG no_union_sss: while a SyncStateSet change is in flight, acks count only the old set."""

    @property
    def ack_set(self) -> frozenset[int]:
        return self.sync_state_set


class NoTruncateSlave(SlaveSession):
    """BUG skip_handshake_truncation: the divergent tail stays."""

    def _on_handshake(self, f: MasterHandshake) -> Ack:
        real = self.log.truncate
        self.log.truncate = lambda *a, **k: None          # type: ignore[method-assign]
        try:
            return super()._on_handshake(f)
        finally:
            self.log.truncate = real                        # type: ignore[method-assign]


class DropZeroEpochSlave(SlaveSession):
    """BUG drop_zero_msg_epochs: only the header's epoch is recorded, never the zero-message
    epochs the handshake announced before it."""

    def _record_epoch(self, f: Transfer) -> None:
        last = self.log.epochs.last()
        if last is not None and f.epoch <= last.epoch:
            return super()._record_epoch(f)
        self.log.append_epoch(f.epoch, max(f.epoch_start_offset, self.log.min_offset))
        self.master_epoch = max(self.master_epoch, f.epoch)


@contextlib.contextmanager
def elect_outside_sss():
    """BUG elect_outside_sss: every alive registered replica is a candidate."""
    real = election_mod.decide

    def buggy(**kw: Any):
        kw["first_election"] = True
        return real(**kw)

    sm_mod.election.decide = buggy          # sm_mod.election is election_mod
    try:
        yield
    finally:
        sm_mod.election.decide = real


@contextlib.contextmanager
def keep_unclean_master():
    """BUG resume_epoch_after_unclean, the controller's half: a master's unclean registration
    leaves its claim standing (no election past it, no new epoch). With the broker's half (the
    core resumes the epoch it owns, rm_driver) both layers of that rule are off. The broker's
    half alone was caught in none of 3,000 seeds (2026-11-27): the controller's half masks it, as
    it should; directed tests hold each (tests/unit/test_rm_roles.py,
    tests/unit/test_controller_election.py)."""
    real = sm_mod._data_loss_events

    def buggy(g: Any, bid: int, cfg: Any, reason: str) -> list:
        if reason == "unclean_shutdown" and bid == g.master_broker_id:
            return []
        return real(g, bid, cfg, reason)

    sm_mod._data_loss_events = buggy
    try:
        yield
    finally:
        sm_mod._data_loss_events = real


# ---------------------------------------------------------------------- controller side

class _Refused:
    """The reply to a refused registration (CONTROLLER_BROKER_INCARNATION_CONFLICT)."""

    ok = False
    replica = None
    code = "CONTROLLER_BROKER_INCARNATION_CONFLICT"



_QUIET = get_logger("sim.run_marker")


@dataclass
class SimMarkerFiles:
    """broker/replicas/run_marker.py MarkerFiles on the simulated disk: the marker's writes are
    atomic and fsynced, so a power cut keeps them; ``place`` is the host (the process key)."""

    files: dict[str, bytes]
    where: str

    def read(self, name: str) -> bytes | None:
        return self.files.get(name)

    def write(self, name: str, data: bytes) -> None:
        self.files[name] = data

    def remove(self, name: str) -> None:
        self.files.pop(name, None)

    def place(self) -> str:
        return self.where

@dataclass
class CtlNode:
    cid: str
    clock: Clock
    table: HeartbeatTable
    applied_epoch: int = 0
    applied_master: int = 0


@dataclass
class Link:
    """One HA TCP connection: in-order delivery; any loss breaks it."""

    lid: int
    master: int
    slave: int
    epoch: int
    m_sess: MasterSession | None = None
    verify_at: int = 0                  # the slave's next digest verification round (virtual ms)
    s_sess: SlaveSession | None = None
    to_slave: list = field(default_factory=list)     # [(deliver_at, frame)]
    to_master: list = field(default_factory=list)
    open: bool = True


@dataclass
class Pending:
    msg_id: int
    start: int
    end: int
    epoch: int
    deadline: int


@dataclass
class Broker:
    bid: int
    clock: Clock
    log: SimLog
    alive: bool = True
    role: str = "none"                  # master | slave | none
    epoch: int = 0                      # highest MasterEpoch learned
    master_id: int | None = None
    tracker: SyncStateTracker | None = None
    book: RangeBook | None = None      # the master's range digests (ha/digest.py)
    link: Link | None = None            # as slave
    pending: list[Pending] = field(default_factory=list)
    proposal_req: int | None = None
    proposal_deadline: int = 0
    reconnect_at: int = 0
    restart_at: int | None = None
    rm: Any = None                      # the ReplicasManager core, when it is the brain
    rm_pending: dict = field(default_factory=dict)
    sessions: set[str] = field(default_factory=set)   # controllers holding our session (crash_fast)
    session_retry_at: int = 0
    # what a fault really did to the log (the simulator's truth; whether the broker knows it is
    # the run marker's verdict and the core's log_intact)
    lost_tail: bool = False
    incarnation: str = ""               # power_loss runs: this process (new at every restart)
    marker: RunMarker | None = None     # the real run marker of its data directory (rm_driver.new_rm)
    register_pending: bool = False
    next_flush: int = 0
    # The process's name on the network (b<key>), its registered address. The original process of
    # an id has key == bid; a second process of the id (a cloned data directory) has its own key.
    key: int = 0
    retired: bool = False               # a clone the operator stopped for good
    # a graceful handover running on this master (the core's sub-machine): new writes held, and
    # the DrainTo it waits for: (target, offset, deadline in virtual ms)
    paused: bool = False
    drain: tuple[int, int, int] | None = None

    def __post_init__(self) -> None:
        self.key = self.key or self.bid


class DataSim:
    def __init__(self, seed: int, bugs: frozenset[str] = frozenset(), duration_ms: int = 5000,
                 mix: FaultMix | None = None, n_brokers: int = 3, n_ctl: int = 3, liveness_ms: int = 8000,
                 produce_ms: tuple[int, int] = (10, 60),
                 honor_lease_granted: bool = True, handovers: bool = False, crash_fast: bool = False,
                 ack_mode: str = "all", power_loss: bool = False, admin_elections: bool = False,
                 clones: bool | None = None) -> None:
        self.produce_ms = produce_ms
        self._proposal_seq = 0
        self.links: dict[int, Link] = {}
        # brokerId -> (master process, when) of its last handshake refused with no_consistent_point
        self.no_point: dict[int, tuple[int, int]] = {}
        # interfaces.md: only heartbeat replies with lease_granted may count toward the lease.
        # False plants the old adapter, which counted every reply (bug #2 in docs/verification.md)
        self.honor_lease_granted = honor_lease_granted
        self.seed = seed
        self.bugs = bugs
        self.rng = random.Random(f"data/{seed}")
        self.mix = mix or FaultMix.draw(self.rng)
        # The adversarial handover (no drain) is safe only in ack mode all; in in_sync_replicas the
        # broker's drain (the target holds the master's whole log before the compare-and-set) is
        # what makes it safe, and this model has no drain: no handovers there.
        if handovers and ack_mode == "all":
            self.mix = dataclasses.replace(self.mix, handover=0.08)
        # crash_fast: brokers hold a session with every controller whose end (a crash, or a reset
        # connection while the broker lives on) is crash evidence; the leader then elects at once.
        self.crash_fast = crash_fast
        if crash_fast:
            self.mix = dataclasses.replace(self.mix, session_reset=0.1)
        # ack mode master acknowledges once the master holds a write: its failovers lose
        # acknowledged writes by design (docs/broker.md), so only what consumers read and the
        # one-acknowledging-master rules are checked there
        assert ack_mode in ("all", "in_sync_replicas", "master")
        self.ack_mode = ack_mode
        # power_loss: power cuts lose every unsynced byte, and every crash leaves the abort marker.
        # Durable (flush = "sync": every append fsynced before the ack) or async (a flush every
        # FLUSH_MS, min_in_sync_replicas 2 so every ack is on two hosts; cuts FLUSH_MS * 2 apart:
        # the documented "one replica at a time"); docs/replicas-manager.md.
        self.power_loss = power_loss
        # admin_elections: operators designate masters now and then (brokers state their ack mode)
        self.admin_elections = admin_elections
        # second processes of a brokerId (cloned data directories) and clean stops: power_loss
        # runs (they need incarnations) unless told otherwise
        self.clones = power_loss if clones is None else clones
        self._clone_seq = 0
        self.clone_stop_at: dict[int, int] = {}         # process key -> when the operator stops the clone
        prng = random.Random(f"power/{seed}")
        self.durable = not power_loss or prng.random() < 0.4
        min_isr = 1 if self.durable else 2
        self.last_cut = -10**9
        if power_loss:
            self.mix = dataclasses.replace(self.mix, power_cut=0.12)
        self.ha = dataclasses.replace(HA, ack_mode=ack_mode, in_sync_replicas=2, min_in_sync_replicas=min_isr)
        self.crash_targets: dict[int, int] = {}        # MasterEpoch -> brokerId a crash-only election made
        self.pending_closes: list[tuple[int, str, int]] = []   # (brokerId, controller, since): FIN in flight
        self.duration = duration_ms
        self.liveness_ms = liveness_ms
        self.net = Network(random.Random(f"dnet/{seed}"), NetFaults())
        self.now = 0
        self.stats = Stats()
        self.ctl_ids = [f"c{i}" for i in range(n_ctl)]
        self.membership = Membership.of_ids(self.ctl_ids)     # the bootstrap one: index 0
        drift = 0.004       # |rate - 1| <= 0.004 per node: relative drift < max_clock_rate_drift 0.01
        table_cls = HoldFromFirstReportTable if "lease_hold_from_first_report" in bugs else HeartbeatTable
        self.ctl = {c: CtlNode(c, clk := Clock(1 + self.rng.uniform(-drift, drift), self.rng.randint(0, 5000)),
                               table_cls(clk.local(0), HB_TIMEOUT, startup_grace_ms=0))
                    for c in self.ctl_ids}
        self.leader = self.ctl_ids[0]
        self.sm = ControllerStateMachine(SMConfig(heartbeat_timeout_ms=HB_TIMEOUT, first_election_grace_ms=500,
                                                  min_in_sync_replicas=min_isr))
        # a new cluster runs at the newest level every member runs (as ControllerNode bootstraps it)
        self.sm.execute(FinalizeFeaturesRequest(level=SUPPORTED_LEVEL))
        self.brokers: dict[int, Broker] = {}
        self.dirs: dict[int, SimMarkerFiles] = {}     # process key -> its data directory's marker files
        self.processes = 0                             # broker processes started (their names)
        for b in range(1, n_brokers + 1):
            clk = Clock(1 + self.rng.uniform(-drift, drift), self.rng.randint(0, 5000))
            self.brokers[b] = Broker(b, clk, SimLog(durable=self.durable))
            self.sm.execute(ApplyBrokerIdRequest(CLUSTER, GROUP, b, f"b{b};0", 1))
            if power_loss:
                self.brokers[b].incarnation = f"{b}x0"
            self.sm.execute(RegisterBrokerRequest(CLUSTER, GROUP, b, f"b{b}", True, 1,
                                                  incarnation=self.brokers[b].incarnation))
        self.names = {f"b{b}" for b in self.brokers} | set(self.ctl_ids)
        self._req_seq = 0
        self._requests: dict[int, tuple[int, Any]] = {}
        self.handover_targets: dict[int, int] = {}     # MasterEpoch -> brokerId a handover elected
        self._link_seq = 0
        self.next_scan = SCAN_INTERVAL
        self.next_fault = self.mix.every_ms
        self.next_produce = 0
        self.next_check = 0
        self.msg_seq = 0
        # histories for the invariants
        self.acked: dict[int, tuple[int, bytes]] = {}      # msg id -> (offset, payload)
        self.consumed: dict[int, tuple[int, bytes]] = {}
        self.epoch_acker: dict[int, int] = {}              # MasterEpoch -> broker that acked in it
        self.crash_in_write: int | None = None
        self.kill_at: dict[int, int] = {}       # adversary: broker -> when to crash it
        self.storm = True
        self.trace: list[str] = []            # the story of the run, printed with a violation
        for b in self.brokers:
            if self.rng.random() < self.mix.never_heard:    # this controller never hears b until a heal
                c = self.rng.choice(self.ctl_ids)
                self.net.cut_one_way(self.bname(b), c)
                self.note(f"never heard: b{b} -> {c} cut from t=0")
        self.heal_at: int | None = None
        # Lagging controller followers push the views they applied (WatchReplicaInfo: every node
        # pushes): a broker may get an old view after a newer one, e.g. right after a restart, when
        # any view is newer than what the new process knows. Own random stream: the other faults
        # of a seed stay as they were.
        self.past_views: list[Any] = []
        self.push_rng = random.Random(f"push/{seed}")
        self.handover_rng = random.Random(f"handover/{seed}")
        for b in self.brokers.values():
            rm_driver.new_rm(self, b)

    def note(self, what: str) -> None:
        if len(self.trace) < 10_000:
            self.trace.append(f"{self.now:>6} {what}")

    # ------------------------------------------------------------------ helpers
    def bname(self, b: int) -> str:
        """The network name (and registered address) of the process with key ``b``."""
        return f"b{b}"

    def _bids(self) -> list[int]:
        return sorted({b.bid for b in self.brokers.values()})

    def proc(self, bid: int | None) -> Broker | None:
        """The process the controllers' registration names for ``bid`` (its address)."""
        if bid is None:
            return None
        rec = self.sm.state.groups[GROUP].brokers.get(bid)
        key = int(rec.address[1:]) if rec is not None else bid
        return self.brokers.get(key)

    def registered_incarnation(self, bid: int) -> str:
        rec = self.sm.state.groups[GROUP].brokers.get(bid)
        return rec.incarnation if rec is not None else ""

    def _checks_incarnations(self) -> bool:
        """BUG accept_second_incarnation: no incarnation is ever refused (controllers, HA)."""
        return "accept_second_incarnation" not in self.bugs

    def local_s(self, b: Broker) -> float:
        return b.clock.local(self.now) / 1000.0

    def reach(self, a: str, b: str) -> bool:
        return self.net.reachable(a, b)

    def ctl_leader(self) -> str | None:
        """The controller leader acts only while it reaches a majority (Raft check-quorum)."""
        ld = self.leader
        n = sum(1 for c in self.ctl_ids if self.reach(ld, c) and self.reach(c, ld))
        return ld if n >= len(self.ctl_ids) // 2 + 1 else None

    # ------------------------------------------------------------------ controller
    def _sync_applied(self) -> None:
        """Followers that the leader reaches apply the log (here: learn the group's epoch)."""
        view = self.sm.replica_view(GROUP)
        if view is not None and (not self.past_views or self.past_views[-1] != view):
            self.past_views = [*self.past_views[-49:], view]
        ld = self.ctl_leader()
        if ld is None:
            return
        g = self.sm.state.groups.get(GROUP)
        epoch = g.master_epoch if g else 0
        for c in self.ctl.values():
            if (c.cid == ld or self.reach(ld, c.cid)) and epoch > c.applied_epoch:
                c.applied_epoch = epoch
                c.applied_master = g.master_broker_id if g and g.master_broker_id else 0
                c.table.release(GROUP, master_id=g.master_broker_id if g else None)

    def _opinions(self, ld: str) -> LivenessView:
        by_node = {}
        for c in self.ctl.values():
            if c.cid == ld or (self.reach(ld, c.cid) and self.reach(c.cid, ld)):
                now = c.clock.local(self.now)
                by_node[c.cid] = {(GROUP, b): c.table.report_opinion(GROUP, b, now) for b in self._bids()}
        return LivenessView.from_opinions(len(self.ctl_ids), by_node)

    def _execute(self, req) -> Any:
        if isinstance(req, ElectMasterRequest) and (
                "elect_outside_sss" in self.bugs
                or ("handover_without_cas" in self.bugs and req.trigger == TRIGGER_ADMIN)):
            with elect_outside_sss():
                return self.sm.execute(req)
        if isinstance(req, RegisterBrokerRequest) and "resume_epoch_after_unclean" in self.bugs:
            with keep_unclean_master():
                return self.sm.execute(req)
        return self.sm.execute(req)

    def _leader_sees_crash(self) -> bool:
        """The leader counts the master as crashed (a closed session): it scans now (node.py)."""
        ld = self.ctl_leader()
        m = self.sm.state.groups[GROUP].master_broker_id
        if ld is None or m is None:
            return False
        node = self.ctl[ld]
        return node.table.crashed(GROUP, m, node.clock.local(self.now))

    def _scan(self) -> None:
        if self.now < self.next_scan and not (self.crash_fast and self._leader_sees_crash()):
            return
        self.next_scan = self.now + SCAN_INTERVAL
        ld = self.ctl_leader()
        if ld is None:
            return
        g = self.sm.state.groups[GROUP]
        m = g.master_broker_id
        node = self.ctl[ld]
        if m is None or node.table.alive(GROUP, m, node.clock.local(self.now)):
            return
        view = self._opinions(ld)
        if not view.is_dead(GROUP, m):
            return
        crash_only = view.crash_only(GROUP, m)
        req = ElectMasterRequest(CLUSTER, GROUP, TRIGGER_CONTROLLER, 0, False, view.alive_infos(GROUP),
                                 self.now + 10_000, view.dead_ids(GROUP), crash_only=crash_only)
        rep = self._execute(req)
        self.note(f"controller scan elects{' (crash only)' if crash_only else ''}: {rep.code} {rep.remark} -> "
                  f"{rep.replica}")
        if crash_only and rep.ok and rep.replica is not None and rep.replica.master_broker_id:
            self.crash_targets[rep.replica.master_epoch] = rep.replica.master_broker_id
            self.stats.extra["crash_elections"] = self.stats.extra.get("crash_elections", 0) + 1
        self._sync_applied()

    # ------------------------------------------------------------------ sessions (crash_fast)
    def _session_ack_mode(self) -> str:
        # BUG fast_path_any_ack_mode: every broker claims the mode that allows the fast path
        if self.ack_mode == "all" or "fast_path_any_ack_mode" in self.bugs:
            return "all"
        return "master" if self.ack_mode == "master" else "quorum"

    def _open_sessions(self, b: Broker) -> None:
        if self.now < b.session_retry_at:
            return
        me = self.bname(b.key)
        for c in self.ctl_ids:
            if c not in b.sessions and self.reach(me, c) and self.reach(c, me):
                table = self.ctl[c].table
                live = table.live_incarnation(GROUP, b.bid, self.ctl[c].clock.local(self.now))
                if live and b.incarnation and live != b.incarnation and self._checks_incarnations():
                    continue        # CONTROLLER_BROKER_INCARNATION_CONFLICT: another process is alive
                table.session_opened(GROUP, b.bid, self._session_ack_mode(), b.incarnation)
                b.sessions.add(c)

    def _close_sessions(self, b: Broker, cids: list[str]) -> None:
        """The broker's end of these sessions is gone; each controller learns it when its FIN (or
        the RST to its next keepalive) gets through."""
        for c in cids:
            if c in b.sessions:
                b.sessions.discard(c)
                self.pending_closes.append((b.key, c, self.now))

    def _deliver_closes(self) -> None:
        keep = []
        for key, c, since in self.pending_closes:
            if self.reach(self.bname(key), c):
                node = self.ctl[c]
                node.table.session_closed(GROUP, self.brokers[key].bid, node.clock.local(self.now))
            else:
                keep.append((key, c, since))
        self.pending_closes = keep

    def _on_ctl_msg(self, cid: str, frm: str, msg: tuple) -> None:
        c = self.ctl[cid]
        now = c.clock.local(self.now)
        kind = msg[0]
        if kind == "hb":
            _, rnd, hb = msg
            report = hb.report
            bid = report.broker_id
            live = c.table.live_incarnation(GROUP, bid, now)
            if self._checks_incarnations() and report.incarnation and live and live != report.incarnation:
                self.net.send(self.now, cid, frm, ("hb_ok", cid, rnd, False, c.applied_epoch))    # refused (2910)
                return
            c.table.record(GROUP, report, now)
            # the production rule on what this node knows: its controllers never lose their log
            # here (the Raft simulator's wiped members and the lease simulator's wipes do), and
            # their membership is the bootstrap one the brokers name (index 0)
            granted = lease_verdict(hb, LeaseFacts(
                self_id=cid, table_refusal=c.table.lease_refusal(GROUP, bid, report.epoch, c.applied_epoch, now),
                registered_incarnation=self.registered_incarnation(bid) if self._checks_incarnations() else "",
                catching_up=False, applied_conf=(0, self.membership, True), master_epoch=c.applied_epoch,
                master_id=c.applied_master, is_leader=cid == self.ctl_leader(),
                timeout_ms=c.table.timeout_ms)).granted
            self.net.send(self.now, cid, frm, ("hb_ok", cid, rnd, granted, c.applied_epoch))
            return
        if kind == "req" and cid == self.ctl_leader():
            _, rid, req = msg
            if req == "find_leader":
                reply = cid
            elif isinstance(req, RegisterBrokerRequest):
                # the production rule (controller/failover/takeover.py) on what this node knows, the
                # majority asked only when the rule needs it, as LivenessDesk.check_registration does
                # (planted bug accept_second_incarnation: the rule is skipped)
                facts = RegistrationFacts(
                    incarnation=req.incarnation, previous=req.previous_incarnation, clean_shutdown=req.clean_shutdown,
                    live=c.table.live_incarnation(GROUP, req.broker_id, now),
                    registered=self.registered_incarnation(req.broker_id),
                    takeover_wait_ms=c.table.takeover_wait_ms(GROUP, req.broker_id, now))
                verdict = registration_verdict(facts)
                if verdict.ask_majority:
                    verdict = registration_verdict(dataclasses.replace(
                        facts, dead_by_majority=self._opinions(cid).is_dead(GROUP, req.broker_id)))
                if not self._checks_incarnations():
                    verdict = RegistrationVerdict()
                if verdict.mark_unclean and c.table.mark_unclean(GROUP, req.broker_id):
                    self.note(f"{cid}: b{req.broker_id}'s live entry ({facts.live}) marked unclean")
                if verdict.refusal is not None:
                    reply = _Refused()
                else:
                    reply = self._execute(req)
                    self.note(f"{cid}: registration of {frm} (incarnation {req.incarnation}, clean "
                              f"{req.clean_shutdown}, continues {req.previous_incarnation or '-'}): {reply.replica}")
            elif isinstance(req, (ElectMasterRequest, AlterSyncStateSetRequest)):
                view = self._opinions(cid)
                if isinstance(req, ElectMasterRequest) and req.handover_from and "handover_without_cas" in self.bugs:
                    req = ElectMasterRequest(CLUSTER, GROUP, TRIGGER_ADMIN, req.broker_id, True,
                                             view.alive_infos(GROUP), self.now + 10_000, view.dead_ids(GROUP))
                elif isinstance(req, ElectMasterRequest) and req.handover_from:
                    # a master handing over: the compare-and-set the broker sends (broker/replicas/handover.py)
                    req = ElectMasterRequest(CLUSTER, GROUP, TRIGGER_HANDOVER, req.broker_id, True,
                                             view.alive_infos(GROUP), self.now + 10_000, view.dead_ids(GROUP),
                                             handover_from=req.handover_from,
                                             expect_master_epoch=req.expect_master_epoch,
                                             expect_sync_state_set_epoch=req.expect_sync_state_set_epoch)
                elif isinstance(req, ElectMasterRequest) and req.trigger == TRIGGER_ADMIN and req.designate:
                    # an operator's `admin elect-master --broker-id N` (designated)
                    req = ElectMasterRequest(CLUSTER, GROUP, TRIGGER_ADMIN, req.broker_id, True,
                                             view.alive_infos(GROUP), self.now + 10_000, view.dead_ids(GROUP))
                elif isinstance(req, ElectMasterRequest):
                    # as node.elect: a master held dead only on crash evidence makes it crash_only
                    m = self.sm.state.groups[GROUP].master_broker_id
                    req = ElectMasterRequest(CLUSTER, GROUP, TRIGGER_BROKER, req.broker_id, False,
                                             view.alive_infos(GROUP), self.now + 10_000, view.dead_ids(GROUP),
                                             crash_only=m is not None and view.crash_only(GROUP, m))
                else:
                    # the leader stamps the master's stated min_in_sync_replicas (node.alter_sync_state_set)
                    rep = c.table.report(GROUP, req.master_broker_id)
                    req = AlterSyncStateSetRequest(GROUP, req.master_broker_id, req.master_epoch,
                                                   req.new_sync_state_set, req.sync_state_set_epoch,
                                                   view.alive_ids(GROUP), self.now + 10_000,
                                                   master_min_in_sync_replicas=rep.min_in_sync_replicas if rep else 0)
                reply = self._execute(req)
                if reply.ok:
                    self.note(f"{type(req).__name__} from {frm}: {reply.replica} ({reply.remark})")
                    if isinstance(req, ElectMasterRequest) and (
                            req.handover_from or (req.trigger == TRIGGER_ADMIN and self.ack_mode == "all")):
                        # (an admin election of a live master is a handover without the drain:
                        # allowed in ack mode all only, where the old master acks only what the
                        # new one holds)
                        self.handover_targets[reply.replica.master_epoch] = reply.replica.master_broker_id
                    if isinstance(req, ElectMasterRequest) and req.crash_only and reply.replica.master_broker_id:
                        self.crash_targets[reply.replica.master_epoch] = reply.replica.master_broker_id
                self._sync_applied()
            else:   # replica info read (after read-index on the leader)
                reply = self.sm.replica_view(GROUP)
            self.net.send(self.now, cid, frm, ("rep", rid, reply))

    # ------------------------------------------------------------------ broker: control plane
    def _send_all(self, b: Broker, msg: tuple) -> None:
        for c in self.ctl_ids:
            self.net.send(self.now, self.bname(b.key), c, msg)

    def _request(self, b: Broker, req: Any) -> int:
        self._req_seq += 1
        self._requests[self._req_seq] = (b.bid, req)
        self._send_all(b, ("req", self._req_seq, req))
        return self._req_seq

    def _stated_min_isr(self) -> int:
        """What brokers state in heartbeats (power_loss runs; 0 = not stated, as before)."""
        if not self.power_loss or "unstated_min_isr" in self.bugs:
            return 0
        return self.ha.min_in_sync_replicas

    def _set_min_isr(self) -> None:
        """An operator changes the controllers' min_in_sync_replicas at run time (the brokers keep
        theirs until restarted with another): the smaller of the two must decide."""
        # (async runs: the operator keeps it at 2 or more, the documented setting under which a
        # power cut of one replica at a time loses nothing; with 1 the set may shrink to one
        # replica whose page cache is all that holds the acked tail)
        v = self.rng.choice((1, 2, 3)) if self.durable else self.rng.choice((2, 3))
        self.sm.execute(UpdateControllerConfigRequest({"min_in_sync_replicas": str(v)}))
        self.note(f"controllers' min_in_sync_replicas -> {v} (brokers {self.ha.min_in_sync_replicas})")
        self.stats.extra["min_isr_changes"] = self.stats.extra.get("min_isr_changes", 0) + 1

    def _stated_timeout(self) -> int:
        """The heartbeat timeout the brokers' leases were sized for, stated in every heartbeat."""
        return LEASE.heartbeat_timeout_ms

    def _set_hb_timeout(self) -> None:
        """An operator changes the controllers' heartbeat_timeout_ms at run time. Lowering it below
        what the brokers' leases were sized for is refused: the floor is the largest timeout the
        brokers stated to a voter majority (node.broker_timeout_floor); a running hold keeps its
        length (HeartbeatTable). Raising it is always allowed (failover gets slower)."""
        v = self.rng.choice((400, 600, 800, 1000, 1200, 1500))
        ld = self.ctl_leader()
        if ld is None:
            return
        floors = [c.table.max_assumed_timeout_ms(c.clock.local(self.now)) for c in self.ctl.values()
                  if c.cid == ld or (self.reach(ld, c.cid) and self.reach(c.cid, ld))]
        if len(floors) < len(self.ctl_ids) // 2 + 1 or v < max(floors):
            self.note(f"heartbeat_timeout_ms -> {v} refused (floor {max(floors, default=-1)})")
            return
        self.sm.execute(UpdateControllerConfigRequest({"heartbeat_timeout_ms": str(v)}))
        for c in self.ctl.values():           # node._sync_liveness_config, once applied
            c.table.timeout_ms, c.table.hold_ms = v, 3 * v
        self.note(f"controllers' heartbeat_timeout_ms -> {v}")
        self.stats.extra["timeout_changes"] = self.stats.extra.get("timeout_changes", 0) + 1

    def reports_intact(self, b: Broker) -> bool:
        """What the broker states as cleanShutdown: a running process, the real core's log_intact
        (the real run marker's verdict at start, set again once it caught up or became master); a
        dead one, what its next start will state: the real marker's verdict on its files as they
        are now (read on a scratch copy, so nothing is written)."""
        if "report_restart_clean" in self.bugs:
            return True
        if b.alive:
            return b.rm is not None and b.rm.log_intact
        files = self.marker_files(b.key)
        scratch = RunMarker(SimMarkerFiles(dict(files.files), files.where), self.durable, _QUIET)
        return scratch.arm(scratch.previous_incarnation())[0]

    def marker_files(self, key: int) -> SimMarkerFiles:
        """The run marker's files of process ``key``'s data directory (durable: a power cut keeps
        them), on host ``key``."""
        return self.dirs.setdefault(key, SimMarkerFiles({}, f"host{key}"))

    def next_rid(self) -> int:
        self._req_seq += 1
        return self._req_seq

    def send_heartbeat(self, b: Broker, cmd: Any, rnd: int) -> None:
        """The heartbeat the adapter builds from the core's SendHeartbeat (broker/replicas/
        replicas_adapter.py), with the log's position read at send time."""
        last = b.log.epochs.last()
        rep = BrokerReport(b.bid, self.bname(b.key), last.epoch if last else 0, b.log.max_offset,
                           b.log.confirm_offset, 0, cmd.clean_shutdown, incarnation=b.incarnation,
                           min_in_sync_replicas=self._stated_min_isr(), ack_mode=self._stated_ack_mode(),
                           assumed_timeout_ms=self._stated_timeout())
        hb = Heartbeat(CLUSTER, GROUP, rep, lease_quorum=cmd.lease_quorum, controllers_index=cmd.controllers_index)
        self.net.send(self.now, self.bname(b.key), cmd.controller, ("hb", rnd, hb))

    def _on_broker_msg(self, b: Broker, frm: str, msg: tuple) -> None:
        rm_driver.on_message(self, b, msg)

    def _change_role(self, b: Broker, view) -> None:
        self._drop_master_state(b)
        self._close_link(b.link)
        b.link = None
        b.master_id = view.master_broker_id
        self.note(f"b{b.key} learns epoch {view.master_epoch} master {view.master_broker_id} "
                  f"SSS {list(view.sync_state_set)}; log max {b.log.max_offset} epochs {_fmt(b.log.epochs.entries())}")
        if view.master_broker_id == b.bid:
            # become master: the log ends on a whole record (recovery did it); new epoch entry
            last = b.log.epochs.last()
            if last is None or last.epoch < view.master_epoch:
                b.log.append_epoch(view.master_epoch, b.log.max_offset)
            b.log.flush()       # as broker/server.py become_master: what it inherited is durable first
            b.lost_tail = False
            # else: a restarted master resumes the epoch it owns (docs/interfaces.md Request 1); its
            # log is intact up to the last whole record because every ack waited for the flush
            b.role = "master"
            b.tracker = (NoUnionTracker if "no_union_sss" in self.bugs else SyncStateTracker)(
                b.bid, view.master_epoch, frozenset(view.sync_state_set), view.sync_state_set_epoch, self.ha,
                self.local_s(b), confirm_offset=b.log.confirm_offset, epoch_start_offset=b.log.max_offset)
            b.book = RangeBook(b.log, self.ha.digest_range_bytes, self.ha.digest_history, self.ha.digest_interval_s / 2,
                               self.local_s(b))
            self.stats.elections += 1
            self._check_acked_on(b)
            if self.storm and self.rng.random() < self.mix.kill_new_master:
                self.kill_at[b.key] = self.now + self.rng.randint(0, 80)
        elif view.master_broker_id is not None:
            b.role = "slave"
            b.reconnect_at = self.now
        else:
            b.role = "none"

    def _drop_master_state(self, b: Broker) -> None:
        b.tracker = None
        b.book = None
        b.pending.clear()
        b.proposal_req = None
        for lk in list(self.links.values()):
            if lk.master == b.key:
                self._close_link(lk)

    def may_acknowledge(self, b: Broker) -> bool:
        return rm_driver.may_acknowledge(self, b, "no_self_fencing" in self.bugs)

    # ------------------------------------------------------------------ broker: data plane
    links: dict[int, Link]

    def _close_link(self, lk: Link | None) -> None:
        if lk is None or not lk.open:
            return
        lk.open = False
        self.links.pop(lk.lid, None)
        m = self.brokers[lk.master]
        s = self.brokers[lk.slave]
        if m.tracker is not None and lk.m_sess is not None and lk.m_sess.slave_id is not None:
            m.tracker.on_disconnect(s.bid, self.local_s(m))
        if s.link is lk:
            s.link = None
            s.reconnect_at = self.now + self.rng.randint(20, 200)

    def _link_send(self, lk: Link, to_slave: bool, frame: Any) -> None:
        a, z = (lk.master, lk.slave) if to_slave else (lk.slave, lk.master)
        if not self.reach(self.bname(a), self.bname(z)) or (self.net.faults.drop and
                                                              self.rng.random() < self.net.faults.drop / 4):
            self._close_link(lk)
            return
        q = lk.to_slave if to_slave else lk.to_master
        at = max(q[-1][0] if q else 0, self.now + self.rng.randint(*self.net.faults.delay_ms))
        q.append((at, frame))

    def _connect(self, s: Broker) -> None:
        m = self.proc(s.master_id)       # the slave dials the address the controllers registered
        if m is None or not m.alive or m.role != "master" or m.epoch != s.epoch \
                or not self.reach(self.bname(s.key), self.bname(m.key)):
            s.reconnect_at = self.now + 100     # refused; retry
            return
        self._link_seq += 1
        lk = Link(self._link_seq, m.key, s.key, s.epoch)
        cls = SlaveSession
        if "skip_handshake_truncation" in self.bugs:
            cls = NoTruncateSlave
        elif "drop_zero_msg_epochs" in self.bugs:
            cls = DropZeroEpochSlave
        lk.s_sess = cls(s.log, s.bid, incarnation=s.incarnation)
        lk.m_sess = MasterSession(m.log, HA, m.bid, self.local_s(m))
        self.links[lk.lid] = lk
        s.link = lk
        self._link_send(lk, False, lk.s_sess.start())

    def _deliver_links(self) -> None:
        for lk in list(self.links.values()):
            for to_slave in (True, False):
                q = lk.to_slave if to_slave else lk.to_master
                while lk.open and q and q[0][0] <= self.now:
                    _, frame = q.pop(0)
                    try:
                        if to_slave:
                            self._slave_frame(lk, frame)
                        else:
                            self._master_frame(lk, frame)
                    except AutoswitchError as e:
                        if to_slave and getattr(e, "reason", "") == "no_consistent_point":
                            # its log and its master's share no epoch: the slave refuses for ever
                            # until an operator resets it (docs/replication.md), never guesses
                            self.no_point[self.brokers[lk.slave].bid] = (lk.master, self.now)
                        self._close_link(lk)
                    except AssertionError:
                        raise
            if lk.open and not self.reach(self.bname(lk.master), self.bname(lk.slave)):
                self._close_link(lk)

    def _slave_frame(self, lk: Link, frame: Any) -> None:
        s = self.brokers[lk.slave]
        if not s.alive or s.link is not lk:
            self._close_link(lk)
            return
        before = s.log.max_offset
        ack = lk.s_sess.on_frame(frame)
        if isinstance(frame, MasterHandshake):
            self.note(f"b{s.key} handshake with b{lk.master}: max {before} -> {s.log.max_offset}")
            if s.log.max_offset < before:
                self.stats.truncations += 1
        if isinstance(frame, Transfer) and frame.body and self.crash_in_write == s.key:
            self.crash_in_write = None
            s.log.crash_tear(self.rng, len(frame.body))
            self._crash(s, torn=True)
            return
        if lk.s_sess.caught_up and (s.lost_tail or not self.reports_intact(s)):
            s.lost_tail = False
            rm_driver.caught_up(self, s)
        if ack is not None:
            self._link_send(lk, False, ack)

    def _master_frame(self, lk: Link, frame: Any) -> None:
        m = self.brokers[lk.master]
        if not m.alive or m.role != "master" or m.epoch != lk.epoch or m.tracker is None:
            self._close_link(lk)
            return
        now = self.local_s(m)
        if isinstance(frame, SlaveHandshake):
            registered = self.registered_incarnation(frame.broker_id)
            if registered and frame.incarnation and registered != frame.incarnation and self._checks_incarnations():
                self.note(f"b{m.key} refuses b{frame.broker_id} incarnation {frame.incarnation}: stale_incarnation")
                self._close_link(lk)
                return
            reply = lk.m_sess.on_handshake(frame, now)
            m.tracker.on_connect(frame.broker_id, False, now)
            self._link_send(lk, True, reply)
            return
        res = lk.m_sess.on_ack(frame, now)
        m.tracker.on_ack(res.broker_id, res.offset, res.caught_up_at, m.log.max_offset)

    def _digests(self, m: Broker, now: float) -> None:
        """Range digests, run by the real cores against the simulated logs: the master cuts
        ranges, every slave in TRANSFER verifies what it holds. No byte is ever corrupted here, so
        any mismatch is a false alarm (or the digests found a divergence another check missed).
        Delivered directly, not through the network model: the runs' random draws stay the same."""
        if m.book is None:
            return
        m.book.tick(now, 1 << 20, self.ha.transfer_batch_size)
        for lk in self.links.values():
            ss, ms = lk.s_sess, lk.m_sess
            if lk.master != m.key or not lk.open or ss is None or ms is None or ss.phase != "TRANSFER" \
                    or ms.phase != "TRANSFER" or not ms.speaks_digests:
                continue
            items = m.book.since(ms.digest_seq, MAX_DIGEST_ENTRIES)
            if items:
                ss.on_frame(Digests(tuple(r for _, r in items)))
                ms.digest_seq = items[-1][0]
            if self.now < lk.verify_at:
                continue
            lk.verify_at = self.now + int(self.ha.digest_interval_s * 1000)
            for r in ss.digests_due(self.ha.digest_round_bytes):
                why = ss.verify_range(r)
                self.stats.digests_verified += 1
                if why is not None:
                    raise Violation("data.digest_mismatch", f"b{lk.slave} holds range {r.epoch}:[{r.start},{r.end}) of "
                                    f"master b{m.key} differently: {why[0]} ({why[1]})", self.now)

    def _master_tick(self, m: Broker) -> None:
        if m.role != "master" or m.tracker is None:
            return
        now = self.local_s(m)
        ok = self.may_acknowledge(m)
        if ok:
            # confirmOffset is frozen while fenced (consumers must not read what a new master may lack)
            m.log.confirm_offset = max(m.log.confirm_offset, m.tracker.confirm_offset(m.log.max_offset))
        for lk in list(self.links.values()):
            if lk.master != m.key or lk.m_sess is None:
                continue
            for _ in range(8):
                try:
                    fr = lk.m_sess.poll_transfer(now, m.log.confirm_offset)
                except AutoswitchError:
                    self._close_link(lk)     # bad start offset etc.: the slave reconnects
                    break
                if fr is None:
                    break
                self._link_send(lk, True, fr)
                if not lk.open:
                    break
        self._digests(m, now)
        prop = m.tracker.tick(now, m.log.max_offset)
        if prop is not None and not self._expansion_admitted(m, prop.new_set - m.tracker.sync_state_set):
            m.tracker.on_proposal_failed(now)
            prop = None
        if prop is not None:
            rm_driver.propose(self, m, prop)
            m.proposal_deadline = self.now + PROPOSAL_TIMEOUT
        elif m.tracker.in_flight is not None and (m.proposal_req is None or self.now > m.proposal_deadline):
            # the HA master's proposal timeout: a lost reply must not hold the set still for ever
            m.proposal_req = None
            m.tracker.on_proposal_failed(now)
        # acknowledgements
        keep = []
        for p in m.pending:
            if self.now > p.deadline:
                continue        # FLUSH_SLAVE_TIMEOUT: not acked, the bytes stay in the log
            if ok and m.tracker.is_acked(p.end, m.log.max_offset):
                self._acked(m, p)
            else:
                keep.append(p)
        m.pending = keep

    def _expansion_admitted(self, m: Broker, added: frozenset[int]) -> bool:
        """HAMaster._expansion_admitted, with the rule it decides by (sync_state.expansion_refusals):
        an added replica must be connected to this master as the process the controllers registered
        for its id (asked afresh); a refused one's connection is closed. The master's connection of
        an id is its oldest (a later one is refused at its handshake there); a second process's link
        the simulator let in is judged by the same rule."""
        if not added or not self._checks_incarnations():
            return True
        links = sorted((lk for lk in self.links.values()
                        if lk.master == m.key and self.brokers[lk.slave].bid in added), key=lambda lk: lk.lid)
        connected: dict[int, str] = {}
        for lk in links:
            connected.setdefault(self.brokers[lk.slave].bid, self.brokers[lk.slave].incarnation)
        registered = {bid: rec.incarnation for bid, rec in self.sm.state.groups[GROUP].brokers.items()}
        refused = expansion_refusals(added, connected, registered)
        for lk in links:
            s = self.brokers[lk.slave]
            why = admission_refusal(s.bid, s.incarnation, registered)
            if why is not None:
                refused.setdefault(s.bid, why)
                self.note(f"b{m.key} refuses to take b{s.key} (brokerId {s.bid}) into the set: {why}")
                self._close_link(lk)
        return not refused

    def _acked(self, m: Broker, p: Pending) -> None:
        other = self.epoch_acker.setdefault(p.epoch, m.key)
        if other != m.key:
            # Another brokerId, or another process of this id still acting as master of the epoch
            # (a move resumes the epoch in the copy once the original stopped: that is no second master)
            o = self.brokers[other]
            if o.bid != m.bid or (o.alive and o.role == "master" and o.epoch == p.epoch):
                raise Violation("data.two_masters_ack_same_epoch", f"epoch {p.epoch}: processes b{other} "
                                f"(brokerId {o.bid}) and b{m.key} (brokerId {m.bid})", self.now)
            self.epoch_acker[p.epoch] = m.key
        g = self.sm.state.groups[GROUP]
        target = self.handover_targets.get(p.epoch + 1)
        if g.master_epoch == p.epoch + 1 and target is not None:
            # A handover commits the new MasterEpoch while the old master still holds its lease: it
            # may still acknowledge, but only what the target already holds (mode all needs the
            # target's ack; the real broker also drains first). Stronger than "not lost": checked now.
            tp = self.proc(target)
            if tp is None or not tp.log.has_record(p.start, record(str(p.msg_id).encode())):
                raise Violation("data.ack_after_handover_not_on_target",
                                f"broker {m.bid} acked message {p.msg_id} in epoch {p.epoch} after the handover "
                                f"to {target} (epoch {g.master_epoch}), which lacks it", self.now)
            self.stats.extra["acked_after_handover"] = self.stats.extra.get("acked_after_handover", 0) + 1
        elif g.master_epoch > p.epoch and self.ack_mode == "all" and p.epoch + 1 in self.crash_targets:
            # A crash-only election does not wait for the old master's lease (docs/controller.md
            # "Crash-fast failover"): a master that only lost its sessions may still acknowledge, but in
            # mode all only with the new master's ack, i.e. only what the new master holds.
            target = self.crash_targets[p.epoch + 1]
            tp = self.proc(target)
            if tp is None or not tp.log.has_record(p.start, record(str(p.msg_id).encode())):
                raise Violation("data.ack_after_crash_failover_not_on_new_master",
                                f"broker {m.bid} acked message {p.msg_id} in epoch {p.epoch} after the crash-only "
                                f"election of {target} (epoch {p.epoch + 1}), which lacks it", self.now)
            self.stats.extra["acked_after_crash_failover"] = self.stats.extra.get("acked_after_crash_failover", 0) + 1
        elif g.master_epoch > p.epoch:
            # docs/design.md §1: a deposed master must have stopped acknowledging before the
            # controller could commit a newer MasterEpoch
            raise Violation("data.ack_after_deposed", f"broker {m.bid} acked message {p.msg_id} in epoch {p.epoch} "
                            f"after the controller moved to epoch {g.master_epoch}", self.now)
        self.acked[p.msg_id] = (p.start, str(p.msg_id).encode())
        self.stats.acked += 1

    def _produce(self) -> None:
        if self.now < self.next_produce or self.msg_seq >= MAX_MESSAGES:
            return
        self.next_produce = self.now + self.rng.randint(*self.produce_ms)
        masters = [b for b in self.brokers.values() if b.alive and b.role == "master"]
        if not masters:
            return
        m = self.rng.choice(masters)
        if m.paused:
            return          # a handover holds new writes: the producer's call waits (and then moves)
        if not self.may_acknowledge(m) or len(m.pending) > 64:
            return          # fenced: the producer gets an error and retries elsewhere
        try:
            m.tracker.check_enough()
        except AutoswitchError:
            return
        self.msg_seq += 1
        start, end = m.log.append(str(self.msg_seq).encode())
        if self.crash_in_write == m.key:
            self.crash_in_write = None
            m.log.crash_tear(self.rng, end - start)
            self._crash(m, torn=True)
            return
        m.pending.append(Pending(self.msg_seq, start, end, m.epoch, self.now + PRODUCE_TIMEOUT))

    def _consume(self) -> None:
        """Consumers read below confirmOffset, from masters and slaves."""
        for b in self.brokers.values():
            if not b.alive or b.role == "none":
                continue
            for off, p in b.log.records(b.log.confirm_offset):
                mid = int(p)
                if mid not in self.consumed:
                    self.consumed[mid] = (off, p)
                    self.stats.consumed += 1

    # ------------------------------------------------------------------ crashes
    def _power_cut(self) -> None:
        """Power cuts: durable runs lose any set of hosts at once, async ones one at a time."""
        if not self.durable and self.now - self.last_cut < 2 * FLUSH_MS:
            return
        alive = [b for b in sorted(self.brokers) if self.brokers[b].alive]
        if not alive:
            return
        k = len(alive) if self.durable and self.rng.random() < 0.3 else 1
        m = self._current_master()
        first = m.key if m is not None and self.rng.random() < 0.5 else self.rng.choice(alive)
        victims = [first] + [b for b in alive if b != first][:k - 1]
        self.last_cut = self.now
        for bid in victims:
            self._crash(self.brokers[bid], power=True)

    def _crash(self, b: Broker, torn: bool = False, power: bool = False) -> None:
        if not b.alive:
            return
        if power:
            lost = b.log.power_loss()
            b.lost_tail = b.lost_tail or lost > 0
            self.stats.extra["power_cuts"] = self.stats.extra.get("power_cuts", 0) + 1
            self.stats.extra["power_lost_bytes"] = self.stats.extra.get("power_lost_bytes", 0) + lost
            self.note(f"b{b.key} loses power: {lost} unsynced bytes gone, max {b.log.max_offset}")
        else:
            b.log.flush()       # the process died, the host did not: its page cache reaches the disk
        self._drop_master_state(b)
        self._close_link(b.link)
        self._close_sessions(b, sorted(b.sessions))
        b.alive = False
        self.note(f"b{b.key} crashes{' inside a write' if torn else ''}")
        b.role = "none"
        b.restart_at = self.now + self.rng.choice((50, 300, 1000, 2500))
        self.stats.crashes += 1
        self.stats.torn += torn

    def _restart(self, b: Broker) -> None:
        cut = b.log.recover()
        self.note(f"b{b.key} restarts, recovery cut {cut} bytes, max {b.log.max_offset}")
        nb = Broker(b.bid, b.clock, b.log, key=b.key)
        nb.lost_tail = b.lost_tail
        if self.power_loss:
            self.stats.extra["restarts"] = self.stats.extra.get("restarts", 0) + 1
            nb.incarnation = f"{b.bid}x{self.stats.extra['restarts']}"
        nb.register_pending = True      # what it continues is the run marker's to say (new_rm)
        self.brokers[b.key] = nb
        rm_driver.new_rm(self, nb)

    # ------------------------------------------------------------------ invariants
    def _current_master(self) -> Broker | None:
        """The master the controller currently names, once it has taken the role (a deposed
        master that has not heard of its successor yet is not a "later master")."""
        g = self.sm.state.groups[GROUP]
        b = self.proc(g.master_broker_id)
        if b is not None and b.alive and b.role == "master" and b.epoch == g.master_epoch:
            return b
        return None

    def _check_acked_on(self, m: Broker) -> None:
        # Mode in_sync_replicas acknowledges with N copies, not every SyncStateSet member, and its
        # elections may lose acked writes by design (docs/broker.md): only what consumers read
        # (below confirmOffset, every member) is checked then, plus the one-master-acks rules.
        hists = (("acked", self.acked), ("consumed", self.consumed)) if self.ack_mode == "all" else (
            ("consumed", self.consumed),)
        for what, hist in hists:
            for mid, (off, p) in hist.items():
                self.stats.acked_checked += 1
                if not m.log.has_record(off, record(p)):
                    got = m.log.payload_at(off)
                    raise Violation(f"data.{what}_lost",
                                    f"message {mid} {what} at offset {off}; master {m.bid} epoch {m.epoch} has "
                                    f"{got!r} there", self.now)

    def _check(self) -> None:
        m = self._current_master()
        if m is not None:
            self._check_acked_on(m)
        # the electable replicas (SyncStateSet + eligible) hold every acknowledged message: this is
        # what makes any election from them safe
        g = self.sm.state.groups[GROUP]
        for bid in sorted(g.sync_state_set | g.eligible) if self.ack_mode == "all" else ():
            b = self.proc(bid)
            if b is None or not self.reports_intact(b):
                # it crashed unclean (maybe a power cut took its tail) and the controller is told
                # so: not electable until it fetched up to a confirmOffset again (an election of
                # it anyway is caught when it becomes master: _check_acked_on)
                continue
            for mid, (off, p) in self.acked.items():
                if not b.log.has_record(off, record(p)):
                    raise Violation("data.electable_lacks_acked",
                                    f"broker {bid} in SyncStateSet {sorted(g.sync_state_set)}/eligible "
                                    f"{sorted(g.eligible)} (epoch {g.sync_state_set_epoch}) lacks acked message "
                                    f"{mid} at {off}", self.now)
        for lk in self.links.values():
            if lk.s_sess is None or lk.s_sess.phase != "TRANSFER":
                continue
            mb, sb = self.brokers[lk.master], self.brokers[lk.slave]
            if mb.role != "master" or mb.epoch != lk.epoch or not sb.alive:
                continue
            hi = sb.log.max_offset
            lo = sb.log.min_offset
            if hi > mb.log.max_offset or sb.log.bytes_between(lo, hi) != mb.log.bytes_between(lo, hi):
                raise Violation("data.slave_not_prefix",
                                f"slave {sb.bid} [{lo},{hi}) is not a prefix of master {mb.bid} "
                                f"(max {mb.log.max_offset}) after handshake", self.now)
            mine = [e for e in sb.log.epochs.entries() if e.start_offset < hi]
            theirs = [e for e in mb.log.epochs.entries() if e.start_offset < hi]
            if mine != theirs:
                raise Violation("data.epochfile_diverged",
                                f"slave {sb.bid} epochs {_fmt(mine)} != master {mb.bid} {_fmt(theirs)} below {hi}",
                                self.now)

    # ------------------------------------------------------------------ faults
    def _faults(self) -> None:
        if self.now < self.next_fault:
            return
        self.next_fault = self.now + self.mix.every_ms
        r, mx, f = self.rng, self.mix, self.net.faults
        f.drop, f.dup, f.slow = mx.drop, mx.dup, mx.slow
        everyone = self.names
        x = r.random()
        if x < mx.partition:
            # isolate the master (with a random share of the controllers), or random nodes
            m = self._current_master()
            side = {self.bname(m.key)} if m is not None and r.random() < 0.6 else {r.choice(sorted(everyone))}
            side |= {c for c in self.ctl_ids if r.random() < 0.3}
            self.net.heal()
            self.net.partition(side, set(everyone))
            self.note(f"partition {sorted(side)}")
            self.stats.partitions += 1
        elif x < mx.partition + mx.one_way:
            a, z = r.sample(sorted(everyone), 2)
            self.net.cut_one_way(a, z)
            self.stats.partitions += 1
        elif x < mx.partition + mx.one_way + mx.heal:
            if r.random() < mx.heal_at_scan:
                self.heal_at = self.next_scan       # heal in the very instant the leader scans
            else:
                self.net.heal()
                self.note("heal")
        elif x < mx.partition + mx.one_way + mx.heal + mx.crash:
            m = self._current_master()
            b = m if m is not None and r.random() < 0.5 else self.brokers[r.choice(sorted(self.brokers))]
            self._crash(b)
        elif x < mx.partition + mx.one_way + mx.heal + mx.crash + mx.crash_in_persist:
            self.crash_in_write = r.choice(sorted(self.brokers))
        elif x < mx.partition + mx.one_way + mx.heal + mx.crash + mx.crash_in_persist + mx.handover:
            self._handover()
        elif x < mx.partition + mx.one_way + mx.heal + mx.crash + mx.crash_in_persist + mx.handover + mx.session_reset:
            # connections reset while the broker lives on: the evidence is wrong
            m = self._current_master()
            b = m if m is not None and r.random() < 0.7 else self.brokers[r.choice(sorted(self.brokers))]
            if b.alive:
                cids = [c for c in self.ctl_ids if r.random() < 0.8]
                self.note(f"b{b.key} sessions reset at {cids}")
                self._close_sessions(b, cids)
                b.session_retry_at = self.now + r.choice((5, 50, 300, 1500))
        elif x < mx.partition + mx.one_way + mx.heal + mx.crash + mx.crash_in_persist + mx.handover \
                + mx.session_reset + mx.power_cut:
            self._power_cut()
        elif self.power_loss and x < mx.partition + mx.one_way + mx.heal + mx.crash + mx.crash_in_persist \
                + mx.handover + mx.session_reset + mx.power_cut + 0.03:
            self._set_min_isr()
        elif self.admin_elections and x < mx.partition + mx.one_way + mx.heal + mx.crash + mx.crash_in_persist \
                + mx.handover + mx.session_reset + mx.power_cut + 0.03 + 0.05:
            self._admin_elect()
        elif self.clones and x < mx.partition + mx.one_way + mx.heal + mx.crash + mx.crash_in_persist \
                + mx.handover + mx.session_reset + mx.power_cut + 0.03 + 0.05 + 0.04:
            self._clone() if r.random() < 0.6 else self._clean_stop(self.rng.choice(sorted(self.brokers)))
        elif self.power_loss and x < mx.partition + mx.one_way + mx.heal + mx.crash + mx.crash_in_persist \
                + mx.handover + mx.session_reset + mx.power_cut + 0.03 + 0.05 + 0.04 + 0.03:
            self._set_hb_timeout()
        elif r.random() < 0.3:
            self.leader = r.choice(self.ctl_ids)     # controller leader change (Raft elected another node)

    def _stale_push(self) -> None:
        """A lagging follower's WatchReplicaInfo push: one of the last views, maybe long outdated."""
        live = [b for b in self.brokers.values() if b.alive and b.rm is not None]
        if not live or len(self.past_views) < 2:
            return
        b = self.push_rng.choice(sorted(live, key=lambda x: x.key))
        view = self.push_rng.choice(self.past_views[-10:-1])
        c = self.push_rng.choice(self.ctl_ids)
        self.net.send(self.now, c, self.bname(b.key), ("push", view))
        self.stats.extra["stale_pushes"] = self.stats.extra.get("stale_pushes", 0) + 1

    def _clean_stop(self, key: int) -> None:
        """A clean stop (and a restart later): the store flushed, the abort marker gone unless the
        run's log was not whole yet (mark_clean_shutdown), a farewell to the controllers that hear it."""
        b = self.brokers[key]
        if not b.alive or b.retired:
            return
        b.log.flush()
        self._drop_master_state(b)
        self._close_link(b.link)
        self._close_sessions(b, sorted(b.sessions))
        for c in self.ctl_ids:
            if self.reach(self.bname(b.key), c):
                node = self.ctl[c]
                if node.table.live_incarnation(GROUP, b.bid, node.clock.local(self.now)) in ("", b.incarnation):
                    node.table.note_sign(GROUP, b.bid, node.clock.local(self.now))
                    node.table.forget(GROUP, [b.bid])
        b.alive = False
        b.role = "none"
        b.restart_at = self.now + self.rng.choice((50, 300, 1000))
        intact = self.reports_intact(b)
        if b.marker is not None and b.rm is not None:
            b.marker.clean_stop(b.rm.log_intact, b.rm.incarnation)      # ReplicasAdapter.mark_clean_shutdown
        self.note(f"b{b.key} (brokerId {b.bid}) stops cleanly{'' if intact else ' with a log not whole yet'}")
        self.stats.extra["clean_stops"] = self.stats.extra.get("clean_stops", 0) + 1

    def _clone(self) -> None:
        """A second process of a brokerId from a copy of its data directory, started on another
        host. Either a move done once too often (the broker stopped cleanly, the directory copied,
        the copy started, and the old one started again too), or a hot copy of a running broker
        (its abort marker names another place: an unclean new process). The operator stops the
        copy after a while (its refusals are logged as errors)."""
        if self._clone_seq >= 3 or any(b.key != b.bid and b.alive for b in self.brokers.values()):
            return
        originals = [b for b in self.brokers.values() if b.alive and b.key == b.bid and not b.register_pending]
        if not originals:
            return
        src = self.rng.choice(sorted(originals, key=lambda b: b.key))
        self._clone_seq += 1
        key = 10 * self._clone_seq + src.bid
        hot = self.rng.random() < 0.5
        if hot:
            log = copy.deepcopy(src.log)
            log.power_loss()                    # what is on disk now, not the page cache
            log.recover()
        else:
            self._clean_stop(src.key)
            log = copy.deepcopy(src.log)
        # the copy's run marker files are the source directory's as they are now, on another host
        self.dirs[key] = SimMarkerFiles(dict(self.marker_files(src.key).files), f"host{key}")
        clk = Clock(1 + self.rng.uniform(-0.004, 0.004), self.rng.randint(0, 5000))
        c = Broker(src.bid, clk, log, key=key)
        c.incarnation = f"{src.bid}c{self._clone_seq}"
        c.register_pending = True
        c.lost_tail = hot
        self.brokers[key] = c
        self.names.add(self.bname(key))
        self.clone_stop_at[key] = self.now + self.rng.choice((300, 1000, 3000))
        rm_driver.new_rm(self, c)
        self.note(f"b{key}: a {'hot ' if hot else ''}copy of brokerId {src.bid}'s directory starts "
                  f"(incarnation {c.incarnation}, continues {c.marker.continues if c.marker else '-'}), "
                  f"log max {log.max_offset}")
        self.stats.extra["clones"] = self.stats.extra.get("clones", 0) + 1

    def _stop_clones(self, all_now: bool = False) -> None:
        for key, at in list(self.clone_stop_at.items()):
            if all_now or self.now >= at:
                del self.clone_stop_at[key]
                b = self.brokers[key]
                self._crash(b)
                b.retired, b.restart_at = True, None
                self.note(f"b{key}: the operator stops the copy")

    def _admin_elect(self) -> None:
        """An operator designates a master (any registered broker, maybe the live master's rival):
        the controller refuses a live master's replacement in ack modes quorum and master, which
        the brokers state in their heartbeats."""
        to = self.rng.choice(self._bids())
        via = self.brokers[self.rng.choice(sorted(self.brokers))]
        self.note(f"admin elect-master --broker-id {to}")
        self.stats.extra["admin_elections"] = self.stats.extra.get("admin_elections", 0) + 1
        self._request(via, ElectMasterRequest(CLUSTER, GROUP, TRIGGER_ADMIN, to, True))

    def _stated_ack_mode(self) -> str:
        if not self.admin_elections or "unstated_ack_mode" in self.bugs:
            return ""
        return {"in_sync_replicas": "quorum"}.get(self.ack_mode, self.ack_mode)

    def _handover(self) -> None:
        """Half the time the real thing: the master's ReplicasManager core runs its handover
        sub-machine (rm_handover.py: hold, drain, compare-and-set, step down; cancel when no answer
        comes), the driver performing its commands. Else adversarially: the master does not drain
        (it keeps taking writes), the target may lag, and its view of the MasterEpoch may be stale;
        safety must then come from the controller's compare-and-set and the SyncStateSet rule alone."""
        if self.handover_rng.random() < 0.5:
            self._graceful_handover()
            return
        m = self._current_master()
        if m is None or not m.alive or m.role != "master" or m.tracker is None:
            return
        # mostly an in-sync target; sometimes any other broker (the controller must refuse it)
        pool = m.tracker.sync_state_set if self.rng.random() < 0.7 else self._bids()
        others = sorted(b for b in pool if b != m.bid)
        if not others:
            return
        to = self.rng.choice(others)
        epoch = m.epoch if self.rng.random() < 0.8 else max(1, m.epoch - 1)
        self.note(f"b{m.key} hands over to b{to} expecting epoch {epoch}")
        self.stats.handovers += 1
        self._request(m, ElectMasterRequest(CLUSTER, GROUP, TRIGGER_HANDOVER, to, True, handover_from=m.bid,
                                            expect_master_epoch=epoch,
                                            expect_sync_state_set_epoch=max(1, m.tracker.sync_state_set_epoch)))

    def _graceful_handover(self) -> None:
        m = self._current_master()
        if m is None or m.rm is None or m.tracker is None or m.paused:
            return
        acked = {b: (r.ack_offset if r.connected else -1) for b, r in m.tracker.replicas.items()}
        self.note(f"b{m.key} starts a graceful handover (log max {m.log.max_offset}, acks {acked})")
        self.stats.extra["graceful_handovers"] = self.stats.extra.get("graceful_handovers", 0) + 1
        rm_driver.perform(self, m, m.rm.start_handover(self.local_s(m), None, acked, m.log.max_offset, 1.0))

    # ------------------------------------------------------------------ main loop
    def step(self, storm: bool) -> None:
        self.now += 1
        self.storm = storm
        for bid, at in list(self.kill_at.items()):
            if at <= self.now:
                del self.kill_at[bid]
                if storm:
                    self._crash(self.brokers[bid])
        if self.clone_stop_at:
            self._stop_clones()
        for frm, to, msg in self.net.due(self.now):
            if to in self.ctl:
                self._on_ctl_msg(to, frm, msg)
            else:
                b = self.brokers[int(to[1:])]
                if b.alive:
                    self._on_broker_msg(b, frm, msg)
        self._deliver_links()
        if self.now % TICK:
            return
        if self.crash_fast:
            self._deliver_closes()
        for b in list(self.brokers.values()):
            if not b.alive:
                if b.restart_at is not None and self.now >= b.restart_at:
                    self._restart(b)
                continue
            if not self.durable and self.now >= b.next_flush:
                b.next_flush = self.now + FLUSH_MS
                b.log.flush()
            if self.crash_fast:
                self._open_sessions(b)
            rm_driver.tick(self, b)
            if not b.alive:
                continue
            if b.role == "slave" and b.link is None and self.now >= b.reconnect_at:
                self._connect(b)
            self._master_tick(b)
        self._sync_applied()
        if self.heal_at is not None and self.now >= self.heal_at:
            self.heal_at = None
            self.net.heal()
            self.note("heal at scan")
        self._scan()
        self._produce()
        if storm:
            self._faults()
            if self.now % 50 == 0 and self.push_rng.random() < 0.15:
                self._stale_push()
        if self.now >= self.next_check:
            self.next_check = self.now + 200
            self._consume()
            self._check()

    def run(self) -> Stats:
        while self.now < self.duration:
            self.step(True)
        # liveness: heal, restart everyone; within the bound a master must ack a new write
        self.net.heal()
        self.net.faults = NetFaults()
        self.crash_in_write = None
        self._stop_clones(all_now=True)
        if self.ctl[self.ctl_ids[0]].table.timeout_ms < LEASE.heartbeat_timeout_ms:
            # lowered at a moment no controller majority heard a broker (so the floor was 0): every
            # node refuses the brokers' leases since (settings_mismatch); the operator reads the
            # alert and sets it back
            self.sm.execute(UpdateControllerConfigRequest({"heartbeat_timeout_ms": str(HB_TIMEOUT)}))
            for c in self.ctl.values():
                c.table.timeout_ms, c.table.hold_ms = HB_TIMEOUT, 3 * HB_TIMEOUT
            self.note(f"the operator sets heartbeat_timeout_ms back to {HB_TIMEOUT} (settings_mismatch)")
            self.stats.extra["timeout_restored"] = self.stats.extra.get("timeout_restored", 0) + 1
        for b in self.brokers.values():
            if not b.alive and not b.retired:
                b.restart_at = self.now
        start_acked = self.stats.acked
        deadline = self.now + self.liveness_ms
        while self.now < deadline and self.stats.acked == start_acked:
            self.step(False)
        g = self.sm.state.groups[GROUP]
        if self.stats.acked == start_acked and self.power_loss and g.master_broker_id is None \
                and (not (g.sync_state_set | g.eligible) or g.holder_replaced):
            # Documented limit (docs/replicas-manager.md, "Durable acknowledgements"): the last
            # member of the set left it as a new incarnation (a crash after its registration was
            # applied but before the reply arrived: its marker still named the incarnation before).
            # Nobody is known to hold the acknowledged messages; the operator elects (unclean). Or
            # a holder was replaced by a copy that does not follow it (an operator stopped the copy
            # that had taken the id over, the acked messages are on its disk): the unclean
            # recovery of the rest is off (GroupState.holder_replaced).
            self.stats.extra["needs_operator"] = self.stats.extra.get("needs_operator", 0) + 1
            self.note("no replica is known to hold the acknowledged messages: needs the operator")
            start_acked = -1
        m = self.proc(g.master_broker_id) if g.master_broker_id is not None else None
        others = [b for b in self.brokers.values() if b.alive and not b.retired and b.bid != g.master_broker_id]
        if self.stats.acked == start_acked and m is not None and others and all(
                self.no_point.get(b.bid, (None, -1))[0] == m.key and self.no_point[b.bid][1] >= deadline
                - self.liveness_ms for b in others):
            # Documented limit (docs/replication.md, "No consistent point"): every other replica's
            # log shares no epoch with the master's (a master whose history starts later at the
            # same offsets, after a whole group lost power), so no slave can join the set: each
            # refuses to cut its log by guess and the operator resets it.
            self.stats.extra["needs_operator"] = self.stats.extra.get("needs_operator", 0) + 1
            self.note("every slave has no consistent point with the master: needs the operator")
            start_acked = -1
        if self.stats.acked == start_acked and self.ack_mode in ("all", "master"):
            # (mode in_sync_replicas: this model has no proposal timeout, so a lost reply can leave a
            # shrink in flight whose intersection with the set is below N; the real adapter times out)
            g = self.sm.state.groups[GROUP]
            raise Violation("liveness.data", f"no write acked within {self.liveness_ms} ms after healing "
                            f"(controller master {g.master_broker_id} epoch {g.master_epoch} "
                            f"SSS {sorted(g.sync_state_set)}; roles "
                            f"{ {b.bid: (b.role, b.epoch) for b in self.brokers.values()} })", self.now)
        self._consume()
        self._check()
        self.stats.virtual_ms = self.now
        self.stats.messages = self.net.sent
        self.stats.dropped = self.net.dropped
        self.stats.duplicated = self.net.duplicated
        return self.stats


def _fmt(es: list[EpochEntry]) -> str:
    return ",".join(f"({e.epoch},{e.start_offset})" for e in es)


def run_seed(seed: int, bugs: frozenset[str] = frozenset(), **kw) -> Stats:
    return DataSim(seed, bugs=bugs, **kw).run()
