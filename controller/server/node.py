"""ControllerNode: one controller process part — Raft + state machine + gRPC service + scans.

One asyncio loop; one grpc.aio server carrying the Raft transport and the ControllerService
(and the NameServer when embedded). State changes only through committed Raft entries applied
in order by ``AppliedStateMachine`` (sm_adapter.py), which also writes events.jsonl and pushes
ReplicaInfo changes to WatchReplicaInfo subscribers.

The node wires; its three desks act. ``Proposer`` (proposer.py) is the one proposal path for
every write and the read barrier. ``LivenessDesk`` (liveness_desk.py) hears the brokers and asks
the peers for majority verdicts: the leader declares a broker dead only when a majority of
controller nodes (itself included) holds that opinion, and unreachable peers count as "not dead",
so an isolated leader can never conclude a master is dead on its own. ``ElectionScanner``
(election_scanner.py) runs the dead-master scan and builds election requests from that evidence.
The decisions themselves live in the pure modules (statemachine, liveness, election, rebalance).
The process around a node (signals, the embedded name server) is process.py.

Library use::

    node = ControllerNode(config)
    await node.start()
    ...
    await node.stop()
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import TYPE_CHECKING, Any

import grpc
from autoswitch.controller import messages as msgs
from autoswitch.controller.codes import Code
from autoswitch.controller.config import ControllerConfig
from autoswitch.controller.failover.liveness import HeartbeatTable
from autoswitch.controller.failover.peers import PeerLiveness
from autoswitch.controller.remoting.routes import RocketRoutes
from autoswitch.controller.server import features_ops, maintenance_ops, sm_adapter
from autoswitch.controller.server.alarms import AlarmBook
from autoswitch.controller.server.alerts import Alerter
from autoswitch.controller.server.authz import CONTROLLER_RULES
from autoswitch.controller.server.election_scanner import ElectionScanner
from autoswitch.controller.server.eventlog import EventLog
from autoswitch.controller.server.leader_loop import LeaderLoop, MaintenanceLeadership
from autoswitch.controller.server.liveness_desk import DeadReportMarker, LivenessDesk
from autoswitch.controller.server.master_moves import DrainDesk, GrayDesk, MoveDeps, RebalanceDesk, pending
from autoswitch.controller.server.membership_ops import MembershipChanges, MembershipView
from autoswitch.controller.server.metrics import ControllerMetrics
from autoswitch.controller.server.proposer import Proposer
from autoswitch.controller.server.remoting import RemotingServer
from autoswitch.controller.server.service import ControllerServicer
from autoswitch.controller.server.service_common import NodeReply, replica_info_pb
from autoswitch.controller.server.startup_checks import (
    check_cluster_id,
    check_raft_dir_present,
    warn_insecure,
)
from autoswitch.controller.server.state_check import StateCheck
from autoswitch.controller.server.status_page import StatusPage
from autoswitch.controller.server.watchers import Watchers
from autoswitch.controller.state.history import HistoryRecord
from autoswitch.controller.state.sm_snapshot import decode_snapshot

from autoswitch import __version__ as VERSION
from autoswitch.base import features, supervise, tls
from autoswitch.base.auth import Guard, Rule
from autoswitch.base.auth_interceptor import server_interceptor
from autoswitch.base.grpc_health import add_grpc_health
from autoswitch.base.log import get_logger
from autoswitch.base.observe import ObserveServer, read_http_token
from autoswitch.base.stream_limits import StreamBudget, stream_limit_interceptor
from autoswitch.proto import controller_pb2_grpc as pbg

if TYPE_CHECKING:
    from autoswitch.controller.consensus import Consensus


class ControllerNode:
    """One controller: its consensus layer, applied state machine, gRPC server and its desks:
    ``proposer`` (writes and linearizable reads), ``liveness`` (heartbeats, sessions, incarnations,
    majority verdicts), ``elections`` (the dead-master scan, elections and SyncStateSet changes
    clients ask for), the master moves by handover (``gray``, ``drains``, ``rebalance``:
    master_moves.py) and the leader's loop that runs the scan and the moves (``leader_loop``). The
    desks exist once ``start`` has run."""

    proposer: Proposer
    liveness: LivenessDesk
    elections: ElectionScanner
    drains: DrainDesk
    leader_loop: LeaderLoop
    sm: sm_adapter.AppliedStateMachine
    raft: Consensus        # RaftNode, or a store backend's node
    events: EventLog

    def __init__(self, config: ControllerConfig, *, clock: Callable[[], float] = time.monotonic,
                 exit_process: Callable[[int], None] | None = None) -> None:
        config.validate()
        self.config = config
        self.node_id = config.node_id
        self.clock = clock
        self.log = get_logger("controller.node", node=config.node_id)
        self.data_dir = Path(config.data_dir)
        self._applied_epochs: dict[str, int] = {}
        self._applied_masters: dict[str, tuple[int | None, int]] = {}
        self.watchers = Watchers(config.max_watchers, config.watch_queue_size)
        self.server: grpc.aio.Server | None = None
        self._listener: tls.Listener | None = None
        self._peer_client: PeerLiveness | None = None
        self.tasks = supervise.Tasks(self.log, exit_process)   # essential ones: supervise.py
        self._extra_servicers: list[Callable[[grpc.aio.Server], None]] = []
        self._extra_rules: dict[str, Rule] = {}
        self.guard: Guard | None = None       # authorization, when config.auth
        self._stopped = asyncio.Event()
        self.open_sessions = 0                 # BrokerSession streams held now (max_broker_sessions)
        self.metrics = ControllerMetrics(self)
        self.status_page = StatusPage(self)
        self.alerter = Alerter(config.node_id, config.notification_script, config.notification_timeout_s,
                               config.max_alerts_in_flight, self.watchers)
        self._observe: ObserveServer | None = None
        self.remoting: RemotingServer | None = None    # RocketMQ's protocol (remoting_listen)
        self.rocketmq_routes: RocketRoutes | None = None  # set by an embedding name server: its routes too
        self._health: Any = None
        self._started = False
        self.membership = MembershipView(config.node_id, config.bootstrap_membership(), config.peers)
        self.membership_changes: MembershipChanges | None = None
        self._was_voter = self.membership.is_voter
        self.state_check: StateCheck | None = None     # built by start() (it needs the peers)

    # ------------------------------------------------------------------ lifecycle

    def add_servicer(self, register: Callable[[grpc.aio.Server], None], rules: dict[str, Rule]) -> None:
        """Host another service (the name server) on this node's gRPC server, with its
        authorization rules; call before start()."""
        assert not self._started
        assert not set(rules) & (set(CONTROLLER_RULES) | set(self._extra_rules)), "method names must not clash"
        self._extra_servicers.append(register)
        self._extra_rules.update(rules)

    async def start(self) -> None:
        assert not self._started
        self._started = True
        self.data_dir.mkdir(parents=True, exist_ok=True)
        if self.config.backend == "raft":
            check_raft_dir_present(self.data_dir)
        marker = DeadReportMarker(self.data_dir, self.log)     # before anything else writes the dir
        heartbeats = HeartbeatTable(started_ms=int(self.clock() * 1000), prior_dead_report_age_ms=marker.prior_age_ms(),
                                    on_hold=marker.persist)
        heartbeats.fast_failover = self.config.fast_failover
        self.events = EventLog(self.data_dir / "events.jsonl")
        # set when the applied state finalized a feature level this build does not support
        self.feature_unsupported: str | None = None
        self.in_maintenance = False     # this member is in maintenance (applied state): no campaigns
        self.sm = sm_adapter.AppliedStateMachine(self.config.sm, self.events, self._on_applied, self.log,
                                                 on_record=self._on_record, on_feature_level=self._on_feature_level,
                                                 on_controller_maintenance=self._on_controller_maintenance)
        # One server for Raft and the API: its limit must fit Raft's largest message; the
        # servicer enforces max_message_bytes on API requests itself.
        raft_max = int(self.config.raft.get("max_message_bytes", 16 << 20))
        limit = max(raft_max, self.config.max_message_bytes)
        opts = [
            ("grpc.max_send_message_length", limit),
            ("grpc.max_receive_message_length", limit),
            ("grpc.so_reuseport", 0),
        ]
        interceptors = []
        if self.config.auth:
            self.guard = Guard("controller.auth", self.config.auth_config, {**CONTROLLER_RULES, **self._extra_rules},
                               own_cluster=self.config.cert_cluster)
            interceptors.append(server_interceptor(self.guard, tls.peer_identity, tls.peer_cluster))
        self.streams_budget = StreamBudget(self.config.max_concurrent_rpcs)
        interceptors.append(stream_limit_interceptor(self.streams_budget, "controller.streams", self.config.auth))
        self.server = grpc.aio.server(options=opts, interceptors=interceptors,
                                      maximum_concurrent_rpcs=self.config.max_concurrent_rpcs)
        pbg.add_ControllerServiceServicer_to_server(ControllerServicer(self), self.server)
        self._health = add_grpc_health(self.server)
        for register in self._extra_servicers:
            register(self.server)
        check_cluster_id(self.config, self.data_dir, self.log)
        warn_insecure(self.config, self.log)
        self.raft = sm_adapter.make_consensus(self.config, self.data_dir / "raft", self.sm, self.server,
                                              min_log_index=self.events.last_index,
                                              interceptors=[server_interceptor(self.guard, tls.peer_identity,
                                                                               tls.peer_cluster)]
                                              if self.guard is not None else [],
                                              on_membership=self.membership.update,
                                              on_caught_up=self._caught_up_from_empty)
        cfg = self.config
        self.proposer = Proposer(self.node_id, self.raft, self.membership, propose_timeout_s=cfg.propose_timeout_s,
                                 read_timeout_s=cfg.read_timeout_s, max_message_bytes=cfg.max_message_bytes,
                                 latency=self.metrics.proposals, log=self.log)
        peers = self._peer_client = PeerLiveness(cfg, self.node_id)
        self.liveness = LivenessDesk(self.node_id, heartbeats, sm=self.sm, consensus=self.raft,
                                     membership=self.membership, peers=peers, metrics=self.metrics,
                                     alerter=self.alerter, clock=self.clock,
                                     peer_query_timeout_s=cfg.peer_query_timeout_s, log=self.log,
                                     on_master_crashed=lambda g, b, e: self.leader_loop.master_crashed(g, b, e))
        self.membership_changes = MembershipChanges(self.raft, self.membership, cfg.propose_timeout_s,
                                                    self.liveness.voter_change_gap_ms)
        self.elections = ElectionScanner(sm=self.sm, liveness=self.liveness, proposer=self.proposer,
                                         alerter=self.alerter, log=self.log)
        moves = MoveDeps(sm=self.sm, liveness=self.liveness, is_leader=lambda: self.is_leader, alerter=self.alerter,
                         tls_config=cfg.tls, handover_timeout_ms=cfg.rebalance_handover_timeout_ms, log=self.log,
                         spawn=self.spawn)
        self.gray = GrayDesk(moves)
        self.drains = DrainDesk(moves)
        self.rebalance = RebalanceDesk(moves, storm=lambda: self.gray.storm)
        leave = MaintenanceLeadership(is_leader=lambda: self.is_leader, in_maintenance=lambda: self.in_maintenance,
                                      leave=lambda: maintenance_ops.leave_leadership(self),
                                      now_ms=self.liveness.now_ms, spawn=self.spawn)
        self.leader_loop = LeaderLoop(scanner=self.elections,
                                      jobs=(self.gray.once, self.drains.once, self.rebalance.once, leave.once),
                                      sm=self.sm, liveness=self.liveness, peers=peers, alerter=self.alerter,
                                      is_leader=lambda: self.is_leader, peer_query_timeout_s=cfg.peer_query_timeout_s,
                                      log=self.log)
        try:
            self._listener = await tls.bind(self.server, cfg.listen_addr, cfg.tls, "controller")
        except RuntimeError as e:   # grpc reports a failed bind this way
            raise OSError(f"cannot listen on {cfg.listen_addr}: {e}") from None
        if self._listener.port == 0:
            raise OSError(f"cannot listen on {cfg.listen_addr}")
        await self.raft.start()
        if self.feature_unsupported is not None:     # found while replaying the log at start
            self.raft.silence("feature_level_unsupported")
        self.raft.set_no_campaign(self.in_maintenance)
        self.liveness.sync_config()
        await self.server.start()
        peers.set_peers(self.membership.voter_addrs())
        self._was_voter = self.membership.is_voter       # as of the log this node started with
        self.membership.listeners.append(self._on_membership)
        self.spawn(self.leader_loop.run(self._stopped), "dead-master-scan", essential=True)
        self.state_check = StateCheck(self.node_id, lambda: list(self.sm.inner.state_hashes), peers,
                                      lambda: len(self.membership.voter_ids), self.proposer.write, self.raft.silence,
                                      cfg.state_check_interval_s, cfg.peer_query_timeout_s, self.log,
                                      progress=self._replication_progress)
        if cfg.state_check_interval_s > 0:
            self.spawn(self.state_check.run(self._stopped, lambda: self.is_leader), "state-hash-check", essential=True)
        promote = self.membership_changes.promote_loop(lambda: self.is_leader, self._stopped)
        self.spawn(promote, "learner-promotion", essential=True)
        self.spawn(features_ops.keep_member_levels(self, self._stopped), "member-levels", essential=True)
        if cfg.remoting_listen:
            self.remoting = RemotingServer(self, self.rocketmq_routes)
            await self.remoting.start()
        svc, hpb = self._health
        await svc.set("", hpb.HealthCheckResponse.SERVING)
        if cfg.metrics_listen:
            self._observe = ObserveServer(cfg.metrics_listen, self.metrics.registry, self.readiness,
                                          "controller", pages=self.status_page.pages(),
                                          token=read_http_token(cfg.metrics_token_file)
                                          if cfg.metrics_token_file else "")
            await self._observe.start()
        self.log.info("controller_started", version=VERSION, featureLevelSupported=features.SUPPORTED_LEVEL, listen=cfg.listen_addr, peers=cfg.peers)

    def _replication_progress(self) -> tuple[int, dict[str, int]]:
        """On the leader: (commit index, each other member's match index)."""
        md = self.metadata()
        return int(md["commit"]), {p: int(i) for p, i in md["match"].items() if p != self.node_id}

    def _caught_up_from_empty(self) -> None:
        """This node started without a log in a cluster that has one, and has caught up: the
        replicated state now says whether it ran here before. A first start (a new member, or the
        last of a first deployment to come up) is no alarm; a member the state records came back
        with an empty data directory: a wiped or replaced disk (issue 58, item 7; etcd tells the
        two apart by --initial-cluster-state, we by what the cluster remembers). Either way it
        listens afresh: no lease grant for a hold (LivenessDesk.caught_up_from_empty)."""
        self.liveness.caught_up_from_empty()
        if self.node_id in self.sm.member_levels:
            self.log.warning("controller_rejoined_with_empty_data_dir", applied=self.sm.last_applied_index,
                             note="this member ran in this cluster before and came back without its data directory "
                                  "(wiped or replaced disk): it caught up from the leader before voting again")
        else:
            self.log.info("controller_first_start_caught_up", applied=self.sm.last_applied_index)

    def _on_membership(self, _conf: Any) -> None:
        """The configuration in force changed. Peer queries follow the voters; a node that has just
        become a voter starts listening afresh (LivenessDesk.became_voter). Both narrow the lease
        gap during membership changes (docs/controller.md); neither closes it."""
        if self._peer_client is not None:
            self._peer_client.set_peers(self.membership.voter_addrs())
        voter = self.membership.is_voter
        if voter and not self._was_voter:
            self.liveness.became_voter()
        self._was_voter = voter

    def spawn(self, coro: Coroutine[Any, Any, Any], name: str, *, essential: bool = False) -> None:
        self.tasks.spawn(coro, name, essential=essential)

    async def stop(self) -> None:
        if self._stopped.is_set():
            return
        self._stopped.set()
        await self.tasks.stop()       # the scan, learner promotion, a rebalance handover
        if self.remoting is not None:
            await self.remoting.stop()
        self.watchers.close_all()
        if self._observe is not None:
            await self._observe.stop()
        await self.alerter.close()
        if self._health is not None:
            svc, _ = self._health
            await svc.enter_graceful_shutdown()
        if self._listener is not None:
            await self._listener.close()
        if self.server is not None:
            await self.server.stop(grace=0.5)
        if hasattr(self, "raft"):
            await self.raft.stop()
        if self._peer_client is not None:
            await self._peer_client.close()
        if hasattr(self, "events"):
            self.events.close()
        self.log.info("controller_stopped")

    async def wait_stopped(self) -> None:
        await self._stopped.wait()

    # ------------------------------------------------------------------ raft facts

    @property
    def wired(self) -> bool:
        """start() has built the state machine, the consensus layer and the desks."""
        return hasattr(self, "elections")

    @property
    def is_leader(self) -> bool:
        return hasattr(self, "raft") and bool(self.raft.is_leader)

    @property
    def alarms(self) -> AlarmBook:
        """The alerts that still stand (raised here while leader; ended by applied elections)."""
        return self.alerter.alarms

    @property
    def term(self) -> int:
        return self.raft.term if hasattr(self, "raft") else 0

    def leader_hint(self) -> tuple[str, str]:
        return self.proposer.leader_hint() if hasattr(self, "proposer") else ("", "")

    def _on_feature_level(self, level: int) -> None:
        """A member that applied a feature level above what it supports cannot read what the
        others will write next: it stops voting, leading and answering (as after a state hash
        mismatch) and says what to run instead."""
        why = features.unsupported(level)
        if why is None or self.feature_unsupported is not None:
            return
        self.feature_unsupported = why
        self.log.critical("feature_level_unsupported", featureLevel=level, supported=features.SUPPORTED_LEVEL,
                          version=VERSION, action="this member stopped voting, leading and answering: " + why)
        if hasattr(self, "raft"):
            self.raft.silence("feature_level_unsupported")

    def _on_controller_maintenance(self, members: frozenset[str]) -> None:
        """In maintenance a member keeps voting and replicating but never campaigns (so it is never
        elected leader); the leader's scan hands leadership off a leader in maintenance."""
        on = self.node_id in members
        if on != self.in_maintenance:
            self.in_maintenance = on
            self.log.warning("controller_maintenance", on=on, node=self.node_id)
        if hasattr(self, "raft"):
            self.raft.set_no_campaign(on)

    def metadata(self) -> dict:
        lid, laddr = self.leader_hint()
        reach = self._peer_client.reachability() if self._peer_client else {}
        peers = [(n, a, n == self.node_id or reach.get(n, False), role)
                 for n, (a, role) in sorted(self.membership.member_addrs().items())]
        raft = self.raft.status() if hasattr(self, "raft") else {}
        match = {p: int(v["match"]) for p, v in raft.get("peers", {}).items()} if self.is_leader else {}
        return {"node_id": self.node_id, "is_leader": self.is_leader, "leader_id": lid, "leader_addr": laddr,
                "term": self.term, "peers": peers, "groups": self.sm.group_count() if hasattr(self, "sm") else 0,
                # lower case, as every backend says it (docs/operations-backends.md)
                "raft_role": str(raft.get("role", "")).lower(), "commit": int(raft.get("commit", 0)),
                "applied": int(raft.get("applied", 0)), "last_index": int(raft.get("last_index", 0)),
                "match": match, "cluster_id": self.config.raft_cluster_id,
                "config_index": int(raft.get("config_index", 0)), "version": VERSION,
                "feature_level": self.sm.feature_level if hasattr(self, "sm") else 0,
                "feature_level_supported": features.SUPPORTED_LEVEL, "maintenance": getattr(self, "in_maintenance", False),
                "lease_grants_paused_ms": self.liveness.heartbeats.grant_pause_left_ms(self.liveness.now_ms())
                if hasattr(self, "liveness") else 0}

    def readiness(self) -> tuple[bool, str]:
        """/readyz: a leader is known and this node has applied (nearly) all it knows committed
        (never while the state hash check found this member's state differs, nor while it may
        still refuse a master its lease: the next controller of a rolling restart waits for it)."""
        if self.state_check is not None and self.state_check.corrupt is not None:
            return False, f"state corrupt: {self.state_check.corrupt}"
        if self.feature_unsupported is not None:
            return False, self.feature_unsupported
        md = self.metadata()
        if md["lease_grants_paused_ms"] > 0:
            # a rolling restart waits for this before the next controller: with two members
            # paused at once the masters' leases find no majority and every write pauses
            return False, (f"may refuse master leases for {md['lease_grants_paused_ms']} ms more (its pause after "
                           f"a restart, or a hold after a DEAD report or a late election)")
        if not md["leader_id"]:
            return False, "no controller leader known"
        lag = md["commit"] - md["applied"]
        if lag > MAX_READY_LAG:
            return False, f"applying: {lag} committed entries behind"
        return True, f"leader {md['leader_id']}, applied {md['applied']}"

    # ------------------------------------------------------------------ reads of the applied state

    def _refuse_if_corrupt(self) -> None:
        if self.feature_unsupported is not None:
            raise NodeReply(Code.CONTROLLER_FEATURE_UNSUPPORTED, f"this controller cannot serve the cluster's "
                            f"state: {self.feature_unsupported}")
        if self.state_check is not None and self.state_check.corrupt is not None:
            raise NodeReply(Code.CONTROLLER_STATE_CORRUPT, f"this controller's state differs from the others' "
                            f"({self.state_check.corrupt}); ask another member, rebuild this one (recover-member)")

    async def query(self, req: msgs.Request) -> msgs.Reply:
        """A linearizable read (GetNextBrokerId, GetReplicaInfo): barrier, then the applied state."""
        self._refuse_if_corrupt()
        await self.proposer.barrier()
        return self.sm.query(req)

    async def sync_state_data(self, groups: tuple[str, ...]) -> tuple[msgs.Reply, list[sm_adapter.GroupState]]:
        self._refuse_if_corrupt()
        await self.proposer.barrier()
        return self.sm.sync_state_data(groups, self.liveness.member_view)

    def state_snapshot(self) -> tuple[bytes, int]:
        """(the state machine's snapshot bytes, the applied index they cover)."""
        data = self.sm.snapshot()
        _state, index = decode_snapshot(data)
        if len(data) > self.config.max_message_bytes * 16:
            raise NodeReply(Code.CONTROLLER_REQUEST_TOO_LARGE, f"snapshot of {len(data)} bytes is too large to send")
        return data, index

    async def move_leader(self, to: str, timeout_s: float | None) -> None:
        """Leader only: hand Raft leadership to ``to`` (returns once it leads)."""
        if not self.is_leader:
            raise self.proposer.not_leader()
        if to == self.node_id:
            return
        self.refuse_on_store("move-controller-leader")
        if to in self.sm.controller_maintenance:
            raise NodeReply(Code.CONTROLLER_INVALID_REQUEST,
                            f"controller {to} is in maintenance: take it out first (`autoswitch admin maintenance "
                            f"off --controller-node {to}`)")
        self.log.info("controller_move_leader", to=to, term=self.term)
        try:
            await self.raft.transfer_leadership(to, timeout_s)
        except Exception as e:  # noqa: BLE001 - typed reply below
            raise self.proposer.map_error(e) from None

    async def change_membership(self, action: str, node_id: str, address: str, raft_address: str,
                                pacing_budget_s: float = 0.0) -> None:
        """Leader only: one membership change (controller/server/membership_ops.py; ``pacing_budget_s``:
        how long it may wait for voter-change pacing). Removing the leader itself first hands
        leadership to the most caught-up other voter, then answers NOT_LEADER so the caller
        repeats the request there."""
        from autoswitch.controller.consensus.membership import BadMembership

        if not self.is_leader or self.membership_changes is None:
            raise self.proposer.not_leader()
        self.refuse_on_store(f"{action}-controller")
        if action == "remove" and node_id == self.node_id:
            match = self.metadata()["match"]
            to = max((v for v in self.membership.voter_ids if v != self.node_id), key=lambda v: match.get(v, 0),
                     default=None)
            if to is None:
                raise NodeReply(Code.CONTROLLER_INVALID_REQUEST, "cannot remove the last voter")
            await self.move_leader(to, None)
            raise self.proposer.not_leader()
        try:
            await self.membership_changes.change(action, node_id, address, raft_address, pacing_budget_s)
        except BadMembership as e:
            raise NodeReply(Code.CONTROLLER_INVALID_REQUEST, e.message) from None
        except Exception as e:  # noqa: BLE001 - typed reply below
            raise self.proposer.map_error(e) from None

    def refuse_on_store(self, what: str) -> None:
        if self.config.backend != "raft":
            raise NodeReply(Code.CONTROLLER_INVALID_REQUEST,
                            f"{what} needs backend = \"raft\"; this cluster runs backend = {self.config.backend!r}, "
                            "whose members are the configured peers and whose leader is whoever holds the store's "
                            "lock (stop the leader to move it)")

    def local_replica_info(self, group: str) -> msgs.ReplicaView | None:
        return self.sm.replica_info(group)

    def read_events(self, from_line: int, max_lines: int) -> tuple[list[str], int, bool]:
        return self.events.read(from_line, max_lines)

    def pending_moves(self, group: str) -> str:
        """Why a maintenance drain or a move back of ``group`` waits on this leader ("" = none)."""
        return pending(group, self.drains, self.rebalance)

    def controllers_for_brokers(self) -> tuple[int, list[str]]:
        """(index, voter client addresses) of the newest applied configuration: what heartbeat
        replies advertise (MembershipView.broker_view)."""
        return self.membership.broker_view(self.raft.applied_conf())

    # ------------------------------------------------------------------ the apply path

    def applied_master(self, group: str) -> tuple[int | None, int] | None:
        """(master brokerId or None, MasterEpoch) of a group as applied on this node; None for a
        group this controller does not manage. The embedded name server checks routes with it."""
        return self._applied_masters.get(group)

    def _on_applied(self, index: int, group: str, replica_info: msgs.ReplicaView) -> None:
        """Called from the apply path when a group's master/epoch/SSS changed."""
        epoch = replica_info.master_epoch
        if epoch != self._applied_epochs.get(group):
            # A new MasterEpoch is applied here: lease holds for the group end, except the one on
            # its master (liveness.release says why).
            self._applied_epochs[group] = epoch
            self.liveness.heartbeats.release(group, master_id=replica_info.master_broker_id)
            if self.remoting is not None and self.is_leader:
                # RocketMQ's controller pushes NOTIFY_BROKER_ROLE_CHANGED after an election
                self.remoting.role_changed(group, replica_info_pb(replica_info))
        self._applied_masters[group] = (replica_info.master_broker_id, epoch)
        if self.config.notify_broker_role_changed:
            self.watchers.publish(group, (index, replica_info))

    def _on_record(self, rec: HistoryRecord) -> None:
        """Every applied history record: metrics on every node, alerts on the leader only."""
        self.metrics.on_history_record(rec)
        self.status_page.on_record(rec)
        if rec.event == "ElectMaster":
            self.liveness.election_applied(rec)
            if rec.master_broker_id:     # on every node: one that leads again later keeps no ended alarm
                self.alerter.alarms.elected(rec.group, rec.master_epoch, rec.ts_ms, rec.master_broker_id)
        elif rec.event == "ImportGroup":
            self.liveness.group_imported(rec)
        if rec.event in ("ElectMaster", "NoMaster") and self.is_leader:
            if rec.event == "NoMaster":
                d = self.sm.latest_election(rec.group)    # what is missing (explain.py)
                self.alerter.emit("no_master", rec.group, rec.ts_ms, epoch=rec.master_epoch, reason=rec.reason,
                                  explanation=d.summary if d is not None else "")
            else:
                self.alerter.emit("master_elected", rec.group, rec.ts_ms, master=rec.master_broker_id,
                                  epoch=rec.master_epoch, reason=rec.reason, unclean=rec.unclean)


# /readyz: at most this many committed entries not yet applied.
MAX_READY_LAG = 1000
