"""ControllerNode: one controller process part — Raft + state machine + gRPC service + scans.

One asyncio loop; one grpc.aio server carrying the Raft transport and the ControllerService
(and the NameServer when embedded). State changes only through committed Raft entries applied
in order by ``AppliedStateMachine`` (sm_adapter.py), which also writes events.jsonl and pushes
ReplicaInfo changes to WatchReplicaInfo subscribers.

Liveness is node-local (HeartbeatTable, our own receipt clock). The leader declares a broker
dead only when a majority of controller nodes (itself included) holds that opinion: it asks
the peers with QueryLiveness (Sentinel's is-master-down-by-addr). Unreachable peers count as
"not dead" — an isolated leader can never conclude a master is dead on its own.

Why one long module: it is the controller process's wiring (Raft node, state machine, service,
liveness scans, elections, the embedded name server) and nothing else; the decisions it wires
live in the pure modules (statemachine, liveness, election).

Library use::

    node = ControllerNode(config)
    await node.start()
    ...
    await node.stop()
"""

from __future__ import annotations

import asyncio
import gc
import signal
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import grpc
import msgspec
from autoswitch.controller import audit, sm_adapter
from autoswitch.controller import messages as msgs
from autoswitch.controller.alerts import Alerter
from autoswitch.controller.authz import (
    CONTROLLER_RULES,
    NAMESRV_RULES,
    STANDALONE_NAMESRV_RULES,
)
from autoswitch.controller.broker_calls import transfer_master
from autoswitch.controller.codes import Code, code_name
from autoswitch.controller.config import ControllerConfig
from autoswitch.controller.eventlog import EventLog
from autoswitch.controller.liveness import (
    NEVER_REPORTED,
    BrokerReport,
    HeartbeatTable,
    LivenessView,
    NodeOpinion,
    ScanPlanner,
)
from autoswitch.controller.membership_ops import MembershipChanges, MembershipView
from autoswitch.controller.metrics import ControllerMetrics
from autoswitch.controller.raft.errors import NotLeader, ProposalDropped, ProposalTimeout, QuorumUnavailable
from autoswitch.controller.rebalance import GroupFacts, RebalancePlanner
from autoswitch.controller.service import ControllerServicer
from autoswitch.controller.service_common import NodeReply
from autoswitch.controller.statemachine import decode_snapshot, follows_registered
from autoswitch.controller.status_page import StatusPage
from autoswitch.controller.watchers import Watchers

from autoswitch.base import tls
from autoswitch.base.auth import AuthConfig, Guard, Rule
from autoswitch.base.auth_interceptor import server_interceptor
from autoswitch.base.fsutil import write_atomic
from autoswitch.base.limits import MAX_INCARNATION_LEN
from autoswitch.base.log import RateLimitedLog, get_logger
from autoswitch.base.observe import FnCollector, ObserveServer, add_grpc_health, read_http_token
from autoswitch.base.stream_limits import StreamBudget, stream_limit_interceptor
from autoswitch.base.waits import wait_event
from autoswitch.proto import controller_pb2 as pb
from autoswitch.proto import controller_pb2_grpc as pbg

if TYPE_CHECKING:
    from autoswitch.controller.consensus import Consensus


class ControllerNode:
    def __init__(self, config: ControllerConfig, *, clock=time.monotonic) -> None:
        config.validate()
        self.config = config
        self.node_id = config.node_id
        self.clock = clock
        self.log = get_logger("controller.node", node=config.node_id)
        self._refusal_log = RateLimitedLog(self.log)
        self.data_dir = Path(config.data_dir)
        # Created in start(): the table's "listened long enough" clock starts with the process.
        self.heartbeats: HeartbeatTable = HeartbeatTable(started_ms=int(clock() * 1000))
        self.planner = ScanPlanner()
        self.rebalancer = RebalancePlanner()
        self._rebalance_task: asyncio.Task | None = None
        self._applied_epochs: dict[str, int] = {}
        self._applied_masters: dict[str, tuple[int | None, int]] = {}
        self.watchers = Watchers(config.max_watchers, config.watch_queue_size)
        self.events: EventLog | None = None
        self.sm: sm_adapter.AppliedStateMachine | None = None
        self.raft: Consensus | None = None      # RaftNode, or a store backend's node
        self.server: grpc.aio.Server | None = None
        self._listener: tls.Listener | None = None
        self._peer_client: Any = None
        self._tasks: list[asyncio.Task] = []
        self._extra_servicers: list = []
        self._extra_rules: dict = {}
        self.guard: Guard | None = None       # authorization, when config.auth
        self._stopped = asyncio.Event()
        self._scan_wake = asyncio.Event()      # a master's session closed: scan now (crash-fast failover)
        self._fast_rescans_left = 0
        self.open_sessions = 0                 # BrokerSession streams held now (max_broker_sessions)
        self.metrics = ControllerMetrics(self)
        self.status_page = StatusPage(self)
        self.alerter = Alerter(config.node_id, config.notification_script, config.notification_timeout_s,
                               config.max_alerts_in_flight, self.watchers)
        self._observe: ObserveServer | None = None
        self._health: Any = None
        self._started = False
        self._marker_covers_ms = 0      # the wall time the last_dead_report file already covers
        self.membership = MembershipView(config.node_id, config.bootstrap_membership(), config.peers)
        self.membership_changes: MembershipChanges | None = None
        self._was_voter = self.membership.is_voter
        self._longest_stated_timeout_ms = 0     # the longest heartbeat timeout a broker stated here

    # ------------------------------------------------------------------ lifecycle

    def add_servicer(self, register, rules: dict[str, Rule]) -> None:
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
            self._check_raft_dir_present()
        self.heartbeats = HeartbeatTable(started_ms=self.now_ms(),
                                         prior_dead_report_age_ms=self._prior_dead_report_age_ms(),
                                         on_hold=self._persist_dead_report)
        self.heartbeats.fast_failover = self.config.fast_failover
        self.events = EventLog(self.data_dir / "events.jsonl")
        self.sm = sm_adapter.AppliedStateMachine(self.config.sm, self.events, self._on_applied, self.log,
                                                 on_record=self._on_record)
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
        self._check_cluster_id()
        if not self.config.tls.enabled:
            self.log.warning("plaintext", listen=self.config.listen_addr,
                             note="no [tls]: clients and peers are not authenticated; loopback development only")
        elif not self.config.auth:
            self.log.warning("no_authorization", listen=self.config.listen_addr,
                             note="auth = false: any holder of a certificate of the CA may make any call")
        if not self.config.raft_peers:
            self.log.warning("raft_shares_client_port", listen=self.config.listen_addr,
                             note="set raft_peers so Raft listens apart from clients")
        self.raft = sm_adapter.make_consensus(self.config, self.data_dir / "raft", self.sm, self.server,
                                         min_log_index=self.events.last_index,
                                         interceptors=[server_interceptor(self.guard, tls.peer_identity,
                                                                          tls.peer_cluster)]
                                         if self.guard is not None else [],
                                         on_membership=self.membership.update)
        self.membership_changes = MembershipChanges(self.raft, self.membership, self.config.propose_timeout_s)
        try:
            self._listener = await tls.bind(self.server, self.config.listen_addr, self.config.tls, "controller")
        except RuntimeError as e:   # grpc reports a failed bind this way
            raise OSError(f"cannot listen on {self.config.listen_addr}: {e}") from None
        if self._listener.port == 0:
            raise OSError(f"cannot listen on {self.config.listen_addr}")
        await self.raft.start()
        self._sync_liveness_config()
        await self.server.start()
        from autoswitch.controller.peers import PeerLiveness

        self._peer_client = PeerLiveness(self.config, self.node_id)
        self._peer_client.set_peers(self.membership.voter_addrs())
        self._was_voter = self.membership.is_voter       # as of the log this node started with
        self.membership.listeners.append(self._on_membership)
        self._tasks.append(asyncio.create_task(self._scan_loop(), name="dead-master-scan"))
        self._tasks.append(asyncio.create_task(
            self.membership_changes.promote_loop(lambda: self.is_leader, self._stopped), name="learner-promotion"))
        svc, hpb = self._health
        await svc.set("", hpb.HealthCheckResponse.SERVING)
        if self.config.metrics_listen:
            self._observe = ObserveServer(self.config.metrics_listen, self.metrics.registry, self.readiness,
                                          "controller", pages=self.status_page.pages(),
                                          token=read_http_token(self.config.metrics_token_file)
                                          if self.config.metrics_token_file else "")
            await self._observe.start()
        self.log.info("controller_started", listen=self.config.listen_addr, peers=self.config.peers)

    def _on_membership(self, _conf: Any) -> None:
        """The configuration in force changed. Peer queries follow the voters. A node that has
        just become a voter starts listening now (brokers heartbeat a controller only once they
        know it: its "never heard" must not count as DEAD) and grants no lease for a hold (an
        election decided without its opinion may still be committing; the restart rule's reason).
        Both narrow the lease gap during membership changes (docs/controller.md); neither closes it."""
        self._peer_client.set_peers(self.membership.voter_addrs())
        voter = self.membership.is_voter
        if voter and not self._was_voter:
            now = self.now_ms()
            self.heartbeats.started_ms = now
            self.heartbeats.startup_grace_ms = self.heartbeats.hold_ms
            self.log.info("controller_became_voter", listening_from_ms=now, no_grants_ms=self.heartbeats.hold_ms)
        self._was_voter = voter

    def _check_raft_dir_present(self) -> None:
        """A node that applied entries (events.jsonl) must still have a Raft log or snapshot: with
        the raft directory gone it would start as a new node (term 0, no vote) and could vote a
        second time in a term it already voted in. The raft storage checks the rest."""
        from autoswitch.controller.raft.errors import RaftStorageCorrupt

        raft = self.data_dir / "raft"
        events = self.data_dir / "events.jsonl"
        if not events.exists() or events.stat().st_size == 0:
            return
        if raft.is_dir() and any(raft.iterdir()):
            return                  # files remain: the raft storage checks names what is missing
        raise RaftStorageCorrupt(
            f"{events} records applied entries but {raft} is missing or empty; refusing to start "
            "(a node that forgot its log and vote could elect a second leader). If this disk was lost or "
            "replaced, rejoin with `autoswitch recover-member` (docs/operations-controller.md)",
            path=str(raft))

    def _check_cluster_id(self) -> None:
        """The data dir remembers the cluster it was created for; a node started with other
        members or another cluster_token would talk to nobody (its messages are refused), so it
        refuses to start instead, naming both ids."""

        from autoswitch.controller.config import cluster_id

        from autoswitch.base.errors import ConfigError
        from autoswitch.base.fsutil import write_atomic

        want = self.config.raft_cluster_id
        path = self.data_dir / "cluster_id"
        try:
            have = path.read_text().strip()
        except FileNotFoundError:
            write_atomic(path, (want + "\n").encode())
            return
        if (have != want and not self.config.cluster_token and not self.config.cluster_id
                and have == cluster_id("autoswitch", self.config.peers)):
            # made before its certificates were bound to a cluster (a plaintext cluster moving to
            # TLS): it keeps the id its peers know it by
            self.config.cluster_id = have
            self.log.info("cluster_id_kept", cluster_id=have, note="created with the plaintext default token")
            return
        if have != want:
            raise ConfigError(f"data dir {self.data_dir} belongs to raft cluster {have}, but peers and "
                              f"cluster_token give {want}: start it with the members it was created with, "
                              f"or with cluster_id = \"{have}\" after membership changes", path=str(path))

    # ------------------------------------------------------------------ lease holds across restarts

    @property
    def _dead_report_marker(self) -> Path:
        return self.data_dir / "last_dead_report"

    def _prior_dead_report_age_ms(self) -> int | None:
        """Wall-clock age of this node's last DEAD report (the marker file: a wall time, or "never"
        written when the data dir was new), NEVER_REPORTED, or None (hold a full hold_ms) when it
        cannot be known: a data dir from before the marker existed, an unreadable or corrupt
        marker, a wall clock that went back."""
        path = self._dead_report_marker
        try:
            raw = path.read_text().strip()
        except FileNotFoundError:
            if any(self.data_dir.iterdir()):
                return None
            write_atomic(path, b"never")     # a new data dir: this node has reported nothing
            return NEVER_REPORTED
        except OSError:
            self.log.error("dead_report_marker_unreadable", exc_info=True, path=str(path))
            return None
        if raw == "never":
            return NEVER_REPORTED
        try:
            recorded = int(raw)
        except ValueError:
            self.log.error("dead_report_marker_corrupt", path=str(path), content=raw[:64])
            return None
        self._marker_covers_ms = recorded
        age = sm_adapter.wall_ms() - recorded
        return age if age >= 0 else None

    def _persist_dead_report(self, key: tuple[str, int]) -> None:
        """Before a DEAD report leaves this node: a wall time not older than it, durably. The file
        records now + 1 s, so reports in the next second need no write (a mass outage costs one
        fsync a second, not one per broker) at the price of <= 1 s more pause after a restart.
        A failure raises, and the report is not made."""
        now = sm_adapter.wall_ms()
        if now <= self._marker_covers_ms:
            return
        value = now + _MARKER_AHEAD_MS
        write_atomic(self._dead_report_marker, str(value).encode())
        self._marker_covers_ms = value
        self.log.info("dead_report_recorded", group=key[0], brokerId=key[1], until_wall_ms=value)

    async def stop(self) -> None:
        if self._stopped.is_set():
            return
        self._stopped.set()
        for t in [*self._tasks, *([self._rebalance_task] if self._rebalance_task is not None else [])]:
            t.cancel()
        for t in self._tasks:
            try:
                await t
            except (asyncio.CancelledError, Exception):
                pass
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
        if self.raft is not None:
            await self.raft.stop()
        if self._peer_client is not None:
            await self._peer_client.close()
        if self.events is not None:
            self.events.close()
        self.log.info("controller_stopped")

    async def wait_stopped(self) -> None:
        await self._stopped.wait()

    # ------------------------------------------------------------------ raft facts

    @property
    def is_leader(self) -> bool:
        return bool(self.raft is not None and self.raft.is_leader)

    @property
    def term(self) -> int:
        return self.raft.term if self.raft is not None else 0

    def leader_hint(self) -> tuple[str, str]:
        lid = self.raft.leader_id if self.raft is not None else None
        addr = self.membership.client_addr(lid) if lid else ""
        return (lid, addr) if addr else ("", "")

    def metadata(self) -> dict:
        lid, laddr = self.leader_hint()
        reach = self._peer_client.reachability() if self._peer_client else {}
        peers = [(n, a, n == self.node_id or reach.get(n, False), role)
                 for n, (a, role) in sorted(self.membership.member_addrs().items())]
        raft = self.raft.status() if self.raft is not None else {}
        match = {p: int(v["match"]) for p, v in raft.get("peers", {}).items()} if self.is_leader else {}
        return {"node_id": self.node_id, "is_leader": self.is_leader, "leader_id": lid, "leader_addr": laddr,
                "term": self.term, "peers": peers, "groups": self.sm.group_count() if self.sm else 0,
                "raft_role": str(raft.get("role", "")), "commit": int(raft.get("commit", 0)),
                "applied": int(raft.get("applied", 0)), "last_index": int(raft.get("last_index", 0)),
                "match": match, "cluster_id": self.config.raft_cluster_id,
                "config_index": int(raft.get("config_index", 0))}

    # ------------------------------------------------------------------ writes and reads

    def _not_leader(self) -> NodeReply:
        lid, laddr = self.leader_hint()
        if not laddr or lid == self.node_id:
            return NodeReply(Code.CONTROLLER_NOT_LEADER,
                             f"node {self.node_id} is not the leader and knows none (election or no quorum)")
        return NodeReply(Code.CONTROLLER_NOT_LEADER, f"node {self.node_id} is not the leader", lid, laddr)

    def spawn(self, coro, name: str) -> None:
        """A short background job the node ends at stop (finished ones are dropped as they end)."""
        t = asyncio.create_task(coro, name=name)
        self._tasks.append(t)
        t.add_done_callback(lambda done: self._tasks.remove(done) if done in self._tasks else None)

    async def audit_admin_call(self, call: audit.AuditCall, code: int, remark: str) -> None:
        """The call's AdminAudit record as its own Raft entry (a call whose write did not carry
        it). Without a leader here the call itself failed too; the log line is then its only trace."""
        self.log.info("admin_call", actor=call.actor, action=call.action, group=call.group, detail=call.detail,
                      code=code)
        call.recorded = True
        out = (await self.write_many([call.request(code, remark)]))[0]
        if isinstance(out, NodeReply):
            call.recorded = False
            self.log.warning("admin_audit_not_replicated", actor=call.actor, action=call.action, group=call.group,
                             code=code_name(out.reply_code), reason=out.message)

    async def write(self, req: msgs.Request) -> msgs.Reply:
        out = (await self.write_many([req]))[0]
        if isinstance(out, NodeReply):
            raise out
        return out

    async def write_many(self, reqs: list[msgs.Request]) -> list[msgs.Reply | NodeReply]:
        """Propose several writes together (one Raft append, one wait); never raises. Each request
        gets its own outcome, exactly as ``write`` would have given it alone: the Reply of its
        applied entry, or a NodeReply (invalid, too large, not leader, no quorum, timeout)."""
        if not self.is_leader:
            return [self._not_leader()] * len(reqs)
        out: list[msgs.Reply | NodeReply | None] = [None] * len(reqs)
        datas: list[bytes] = []
        where: list[int] = []
        for i, req in enumerate(reqs):
            try:
                data = sm_adapter.encode_request(sm_adapter.stamp(req))
            except sm_adapter.BadWrite as e:
                out[i] = NodeReply(Code.CONTROLLER_INVALID_REQUEST, str(e))
                continue
            if len(data) > self.config.max_message_bytes:
                out[i] = NodeReply(Code.CONTROLLER_REQUEST_TOO_LARGE, f"encoded request is {len(data)} bytes")
                continue
            datas.append(data)
            where.append(i)
        call = audit.pending() if datas else None
        if call is not None:
            # an admin's write: its audit record goes in the same append, right behind it
            self.log.info("admin_call", actor=call.actor, action=call.action, group=call.group, detail=call.detail)
            datas.append(sm_adapter.encode_request(sm_adapter.stamp(call.request(outcome_of_previous=True))))
            call.recorded = True        # before the await: a cancelled caller leaves it proposed
        if datas:
            t0 = time.monotonic()
            try:
                results = await self.raft.propose_many(datas, timeout_s=self.config.propose_timeout_s)
            except Exception as e:  # noqa: BLE001 - nothing was proposed: one typed reply for all
                results = [e] * len(datas)
            self.metrics.proposals.observe(time.monotonic() - t0)
            if call is not None:
                if isinstance(results[-1], BaseException):
                    call.recorded = False       # not known to be in the log: the handler records it alone
                results = results[:-1]
            for i, r in zip(where, results, strict=True):
                out[i] = self._map_raft_error(r) if isinstance(r, BaseException) else self._applied(r)
        return out  # type: ignore[return-value]

    @staticmethod
    def _applied(result: object) -> msgs.Reply | NodeReply:
        if isinstance(result, msgs.Reply):
            return result
        return NodeReply(Code.CONTROLLER_INTERNAL_ERROR, f"unexpected apply result {type(result).__name__}")

    async def barrier(self) -> None:
        """Linearizable-read barrier: raises NodeReply unless this node is the leader and caught up."""
        if not self.is_leader:
            raise self._not_leader()
        try:
            await self.raft.read_index(timeout_s=self.config.read_timeout_s)
        except Exception as e:  # noqa: BLE001
            raise self._map_raft_error(e) from None

    async def query(self, req: msgs.Request) -> msgs.Reply:
        """A linearizable read (GetNextBrokerId, GetReplicaInfo): barrier, then the applied state."""
        await self.barrier()
        return self.sm.query(req)

    async def sync_state_data(self, groups: tuple[str, ...]) -> tuple[msgs.Reply, list[sm_adapter.GroupState]]:
        await self.barrier()
        return self.sm.sync_state_data(groups, self.member_view)

    def _map_raft_error(self, e: BaseException) -> NodeReply:
        if isinstance(e, NotLeader):
            lid = e.leader_id or ""
            laddr = self.membership.client_addr(lid) if lid else ""
            return NodeReply(Code.CONTROLLER_NOT_LEADER, f"node {self.node_id} is not the leader", lid, laddr)
        if isinstance(e, QuorumUnavailable):
            return NodeReply(Code.CONTROLLER_QUORUM_UNAVAILABLE, f"no controller quorum: {e}")
        if isinstance(e, ProposalTimeout | TimeoutError):
            return NodeReply(Code.CONTROLLER_TIMEOUT, f"not committed in time (outcome unknown): {e}")
        if isinstance(e, ProposalDropped):
            return NodeReply(Code.CONTROLLER_QUORUM_UNAVAILABLE, f"{e}")
        self.log.error("raft_error", exc_info=e, kind=type(e).__name__)
        return NodeReply(Code.CONTROLLER_INTERNAL_ERROR, f"{type(e).__name__}: {e}")

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
            raise self._not_leader()
        if to == self.node_id:
            return
        self._refuse_on_store("move-controller-leader")
        self.log.info("controller_move_leader", to=to, term=self.term)
        try:
            await self.raft.transfer_leadership(to, timeout_s)
        except Exception as e:  # noqa: BLE001 - typed reply below
            raise self._map_raft_error(e) from None

    async def change_membership(self, action: str, node_id: str, address: str, raft_address: str,
                                pacing_budget_s: float = 0.0) -> None:
        """Leader only: one membership change (controller/membership_ops.py; ``pacing_budget_s``:
        how long it may wait for voter-change pacing). Removing the leader itself first hands
        leadership to the most caught-up other voter, then answers NOT_LEADER so the caller
        repeats the request there."""
        from autoswitch.controller.raft.membership import BadMembership

        if not self.is_leader or self.membership_changes is None:
            raise self._not_leader()
        self._refuse_on_store(f"{action}-controller")
        if action == "remove" and node_id == self.node_id:
            match = self.metadata()["match"]
            to = max((v for v in self.membership.voter_ids if v != self.node_id), key=lambda v: match.get(v, 0),
                     default=None)
            if to is None:
                raise NodeReply(Code.CONTROLLER_INVALID_REQUEST, "cannot remove the last voter")
            await self.move_leader(to, None)
            raise self._not_leader()
        try:
            await self.membership_changes.change(action, node_id, address, raft_address, pacing_budget_s)
        except BadMembership as e:
            raise NodeReply(Code.CONTROLLER_INVALID_REQUEST, e.message) from None
        except Exception as e:  # noqa: BLE001 - typed reply below
            raise self._map_raft_error(e) from None

    def _refuse_on_store(self, what: str) -> None:
        if self.config.backend != "raft":
            raise NodeReply(Code.CONTROLLER_INVALID_REQUEST,
                            f"{what} needs backend = \"raft\"; this cluster runs backend = {self.config.backend!r}, "
                            "whose members are the configured peers and whose leader is whoever holds the store's "
                            "lock (stop the leader to move it)")

    def local_replica_info(self, group: str) -> msgs.ReplicaView | None:
        return self.sm.replica_info(group)

    def read_events(self, from_line: int, max_lines: int) -> tuple[list[str], int, bool]:
        return self.events.read(from_line, max_lines)

    # ------------------------------------------------------------------ liveness

    def now_ms(self) -> int:
        return int(self.clock() * 1000)

    def _sync_liveness_config(self) -> None:
        """The timeout (and the lease hold derived from it) follow the replicated config."""
        t = self.sm.heartbeat_timeout_ms()
        if t != self.heartbeats.timeout_ms:
            self.heartbeats.timeout_ms = t
            self.heartbeats.hold_ms = 3 * t
        # A voter change waits until leases counted under the configuration before the previous
        # change have run out: a lease is shorter than the heartbeat timeout it was sized for
        # (the broker's own, when it states one), and on this node's clock that covers the drift.
        self.raft.set_voter_change_gap(max(t, self._longest_stated_timeout_ms))

    def record_heartbeat(self, r: pb.BrokerHeartbeatRequest) -> bool:
        """Store the heartbeat; returns whether this reply may count towards the broker's master lease."""
        self.metrics.heartbeats.inc()
        stated = min(r.heartbeat_timeout_ms, MAX_ASSUMED_TIMEOUT_MS)
        if stated > self._longest_stated_timeout_ms:
            self._longest_stated_timeout_ms = stated
        self._sync_liveness_config()
        now = self.now_ms()
        if r.stopping:
            # a clean stop's farewell (the broker serves nothing any more): forget that process,
            # never another incarnation that is alive
            if self.heartbeats.live_incarnation(r.broker_name, r.broker_id, now) in ("", r.incarnation):
                self.heartbeats.note_sign(r.broker_name, r.broker_id, now)
                self.heartbeats.forget(r.broker_name, [r.broker_id])
                self.log.info("broker_stopped", group=r.broker_name, brokerId=r.broker_id,
                              incarnation=r.incarnation[:MAX_INCARNATION_LEN])
            return False
        self.check_incarnation(r.broker_name, r.broker_id, r.incarnation, "BrokerHeartbeat")
        ok = self.heartbeats.record(
            r.broker_name,
            BrokerReport(broker_id=r.broker_id, address=r.broker_address, epoch=r.epoch, max_offset=r.max_offset,
                         confirm_offset=r.confirm_offset, election_priority=r.election_priority,
                         clean_shutdown=r.clean_shutdown,
                         assumed_timeout_ms=min(r.heartbeat_timeout_ms, MAX_ASSUMED_TIMEOUT_MS),
                         min_in_sync_replicas=r.min_in_sync_replicas, incarnation=r.incarnation,
                         ack_mode=r.ack_mode),
            now,
        )
        if not ok:
            raise NodeReply(Code.CONTROLLER_OVERLOADED, "heartbeat table full")
        epoch, master = self.sm.master_of(r.broker_name)
        configured = self.sm.min_in_sync_replicas()
        if r.min_in_sync_replicas and r.min_in_sync_replicas != configured and self.is_leader:
            self.alerter.emit_once("settings_mismatch", r.broker_name, epoch, sm_adapter.wall_ms(), brokerId=r.broker_id,
                                   key="min_in_sync_replicas", broker=r.min_in_sync_replicas, controllers=configured,
                                   note="the smaller one decides which replicas stay electable")
        why = self.heartbeats.lease_refusal(r.broker_name, r.broker_id, r.epoch, epoch, now)
        if why == "timeout" and self.is_leader:
            self.alerter.emit_once("settings_mismatch", r.broker_name, epoch, sm_adapter.wall_ms(), brokerId=r.broker_id,
                                   key="heartbeat_timeout_ms", broker=stated, controllers=self.heartbeats.timeout_ms,
                                   note="no lease grant: the broker's lease was sized for a longer timeout")
        if why == "hold" and master == r.broker_id and r.epoch == epoch and self.is_leader:
            # the current master heartbeats, but a DEAD report about it stands: it will fence itself
            self.alerter.emit_once("master_lease_refused", r.broker_name, epoch, sm_adapter.wall_ms(), master=master,
                                   reason="a DEAD report about it holds its lease grants")
        if not self.registered_process(r.broker_name, r.broker_id, r.incarnation):
            return False
        if why is not None or self.raft.catching_up:
            # a node catching up (wiped or recovered) may not have applied the newest MasterEpoch
            return False
        return self.membership.lease_refusal(r.lease_quorum, r.controllers_index, self.raft.applied_conf()) is None

    async def broker_timeout_floor(self) -> int:
        """The least heartbeat_timeout_ms the brokers' leases allow: the longest timeout any broker
        heard by a controller sized its lease for, from this node and its peers, a voter majority
        answering. Not this node's table alone: a master heard by the others but not by the
        leader would be left out, and its lease could outlive a successor's election."""
        now = self.now_ms()
        floors = {self.node_id: self.heartbeats.max_assumed_timeout_ms(now)}
        peers = await self._peer_client.timeout_floors(self.config.peer_query_timeout_s, MAX_ASSUMED_TIMEOUT_MS)
        floors.update((n, f) for n, f in peers.items() if n in self.membership.voter_ids)
        voters = self.membership.voter_ids
        if sum(1 for n in floors if n in voters) < len(voters) // 2 + 1:
            raise NodeReply(Code.CONTROLLER_QUORUM_UNAVAILABLE,
                            f"heartbeat_timeout_ms cannot be lowered now: only {sorted(floors)} of the voters "
                            f"{sorted(voters)} told the timeouts their brokers' leases assume (a majority must)")
        return max(floors.values())

    def incarnation_conflict(self, group: str, broker_id: int, incarnation: str) -> str:
        """The live incarnation of this brokerId when it is another than ``incarnation``, else ""."""
        live = self.heartbeats.live_incarnation(group, broker_id, self.now_ms())
        return live if live and incarnation and live != incarnation else ""

    def check_incarnation(self, group: str, broker_id: int, incarnation: str, call: str,
                          crashed_before: bool = False, previous: str | None = None) -> None:
        """NodeReply(CONTROLLER_BROKER_INCARNATION_CONFLICT) when another process of this
        brokerId is alive here (a cloned or copied data directory started beside the original).
        ``crashed_before``: the refused process states an unclean restart of the live entry's
        process (``previous``, what its abort marker names), so that entry is the last heartbeat
        of the process that crashed, describing a tail the crash took: it stops counting as a
        clean candidate (found by the simulator's power cuts). ``previous``: the incarnation the
        refused process continues (registrations)."""
        live = self.incarnation_conflict(group, broker_id, incarnation)
        if not live:
            return
        # only a successor of that very process (its abort marker names it) speaks for its log: a
        # copy that crashed elsewhere says nothing about the live one (found by the data simulator)
        if crashed_before and previous == live and self.heartbeats.mark_unclean(group, broker_id):
            self.log.warning("stale_incarnation_marked_unclean", group=group, brokerId=broker_id,
                             live=live[:MAX_INCARNATION_LEN], refused=incarnation[:MAX_INCARNATION_LEN])
        self._refusal_log.warning((group, broker_id), "broker_incarnation_conflict", group=group, brokerId=broker_id,
                                  call=call, live=live[:MAX_INCARNATION_LEN], refused=incarnation[:MAX_INCARNATION_LEN])
        raise NodeReply(Code.CONTROLLER_BROKER_INCARNATION_CONFLICT,
                        f"brokerId {broker_id} of {group} is alive in another process (incarnation {live[:16]}); "
                        f"a second process with the same identity (a copied data directory?) is refused")

    def registration_refused(self, req: msgs.RegisterBrokerRequest) -> bool:
        """The batched path sends this registration alone (to check_registration): another
        process of the id is alive here, or it would take the id over."""
        return bool(self.incarnation_conflict(req.broker_name, req.broker_id, req.incarnation)
                    or self.takes_over(req.broker_name, req.broker_id, req.incarnation, req.previous_incarnation))

    def takes_over(self, group: str, broker_id: int, incarnation: str, previous: str) -> bool:
        """The registration is of a process that does not follow the registered one of the id."""
        return not follows_registered(self.sm.registered_incarnation(group, broker_id), incarnation, previous)

    async def check_registration(self, req: msgs.RegisterBrokerRequest) -> None:
        """check_incarnation; and a process that does not follow the registered one takes the id
        over only (1) two heartbeat timeouts after the id's last sign of life here
        (HeartbeatTable.takeover_wait_ms: the registered process, restarting, registers first) and
        (2) when a controller majority holds the registered process dead: this node alone may not
        hear a live one (a leader cut off from a live master let a copy depose it and both
        acknowledged; found by the data simulator, seed 1580)."""
        g, b = req.broker_name, req.broker_id
        self.check_incarnation(g, b, req.incarnation, "RegisterBroker", crashed_before=not req.clean_shutdown,
                               previous=req.previous_incarnation)
        if not self.takes_over(g, b, req.incarnation, req.previous_incarnation):
            return
        registered = self.sm.registered_incarnation(g, b)
        wait = self.heartbeats.takeover_wait_ms(g, b, self.now_ms())
        if wait:
            self._refusal_log.warning((g, b), "broker_takeover_waits", group=g, brokerId=b,
                                      registered=registered[:MAX_INCARNATION_LEN],
                                      refused=req.incarnation[:MAX_INCARNATION_LEN], waitMs=wait)
            raise NodeReply(Code.CONTROLLER_BROKER_INCARNATION_CONFLICT,
                            f"brokerId {b} of {g} was last run by incarnation {registered[:16]}, which this process "
                            f"does not follow (a copied or restored directory?); it may take the id over {wait} ms "
                            f"from now if that process does not come back first")
        view = await self.view([(g, b)])
        if view.is_dead(g, b):
            return
        self._refusal_log.warning((g, b), "broker_takeover_not_agreed", group=g, brokerId=b,
                                  registered=registered[:MAX_INCARNATION_LEN], refused=req.incarnation[:MAX_INCARNATION_LEN])
        raise NodeReply(Code.CONTROLLER_BROKER_INCARNATION_CONFLICT,
                        f"brokerId {b} of {g} is registered for incarnation {registered[:16]}, which a controller "
                        f"majority does not hold dead; a process that does not follow it cannot take the id over")

    def registered_process(self, group: str, broker_id: int, incarnation: str) -> bool:
        """Whether ``incarnation`` is the process the applied registration names (or either is
        not stated). Another one's heartbeat is still recorded (it keeps the id alive here, so a
        third process cannot register over it), but it earns no lease grant and its report counts
        in no election (statemachine ``_same_process``): the controllers do not know that process.
        A registration this node has not applied yet costs one round of grants, like any lag."""
        registered = self.sm.registered_incarnation(group, broker_id)
        if not registered or not incarnation or registered == incarnation:
            return True
        self._refusal_log.warning((group, broker_id), "broker_not_registered_process", group=group,
                                  brokerId=broker_id, registered=registered[:MAX_INCARNATION_LEN],
                                  heard=incarnation[:MAX_INCARNATION_LEN], note="no lease grant until it registers")
        return False

    def controllers_for_brokers(self) -> tuple[int, list[str]]:
        """(index, voter client addresses) of the newest applied configuration: what heartbeat
        replies advertise (MembershipView.broker_view)."""
        return self.membership.broker_view(self.raft.applied_conf())

    def _on_record(self, rec: dict) -> None:
        """Every applied history record: metrics on every node, alerts on the leader only."""
        self.metrics.on_history_record(rec)
        self.status_page.on_record(rec)
        ev = rec.get("event")
        if ev == "ElectMaster" and rec.get("master_broker_id") and self.heartbeats.election_applied(
                rec["group"], rec["master_broker_id"], rec["ts_ms"], sm_adapter.wall_ms(), self.now_ms()):
            self._refusal_log.warning(("late", rec["group"]), "late_election_grants_held", group=rec["group"],
                                      master=rec["master_broker_id"], epoch=rec["master_epoch"],
                                      ageMs=sm_adapter.wall_ms() - rec["ts_ms"])
        if ev in ("ElectMaster", "NoMaster") and self.is_leader:
            if ev == "NoMaster":
                self.alerter.emit("no_master", rec["group"], rec["ts_ms"], epoch=rec["master_epoch"],
                                  reason=rec["reason"])
            else:
                self.alerter.emit("master_elected", rec["group"], rec["ts_ms"], master=rec["master_broker_id"],
                                  epoch=rec["master_epoch"], reason=rec["reason"], unclean=rec["unclean"])

    def readiness(self) -> tuple[bool, str]:
        """/readyz: a leader is known and this node has applied (nearly) all it knows committed."""
        md = self.metadata()
        if not md["leader_id"]:
            return False, "no controller leader known"
        lag = md["commit"] - md["applied"]
        if lag > MAX_READY_LAG:
            return False, f"applying: {lag} committed entries behind"
        return True, f"leader {md['leader_id']}, applied {md['applied']}"

    def session_opened(self, group: str, broker_id: int, ack_mode: str, incarnation: str = "") -> bool:
        """A broker's session stream started (crash-fast failover); False when the table is full."""
        ok = self.heartbeats.session_opened(group, broker_id, ack_mode, incarnation)
        self.log.info("broker_session_opened", group=group, brokerId=broker_id, ackMode=ack_mode, tracked=ok)
        return ok

    def session_closed(self, group: str, broker_id: int) -> None:
        """A session ended. If that makes the group's master count as crashed, the leader scans
        at once and then every FAST_RESCAN_S (bounded) until the peers have seen it too."""
        self._sync_liveness_config()
        crashed = self.heartbeats.session_closed(group, broker_id, self.now_ms())
        self.metrics.session_ends.labels("true" if crashed else "false").inc()
        epoch, master = self.sm.master_of(group)
        is_master = master == broker_id
        self.log.info("broker_session_closed", group=group, brokerId=broker_id, epoch=epoch, crashed=crashed,
                      master=is_master)
        if crashed and is_master and self.is_leader:
            self._fast_rescans_left = MAX_FAST_RESCANS
            self._scan_wake.set()
            self.alerter.emit("master_crashed", group, sm_adapter.wall_ms(), master=broker_id, epoch=epoch)

    def local_opinions(self, keys: list[tuple[str, int]]) -> list[NodeOpinion]:
        """This node's answer to a leader asking (a DEAD answer starts a lease hold)."""
        self._sync_liveness_config()
        now = self.now_ms()
        return [self.heartbeats.report_opinion(g, b, now) for g, b in keys]

    def member_view(self, g: str, b: int) -> tuple[bool, int, Any]:
        """Read-side view of one replica for GetSyncStateData: this node's own opinion, no hold."""
        now = self.now_ms()
        return (self.heartbeats.alive(g, b, now), self.heartbeats.last_heard_ms_ago(g, b, now),
                self.heartbeats.report(g, b))

    async def view(self, keys: list[tuple[str, int]]) -> LivenessView:
        """Majority verdicts for ``keys``: this node's opinion plus every peer that answers in time."""
        if not keys:
            return LivenessView(len(self.membership.voter_ids), {})
        mine = dict(zip(keys, self.local_opinions(keys), strict=True))
        peer_ops = await self._peer_client.query(keys, self.config.peer_query_timeout_s)
        by_node = {self.node_id: mine}
        for nid, ops in peer_ops.items():
            by_node[nid] = dict(zip(keys, ops, strict=True))
        return LivenessView.from_opinions(len(self.membership.voter_ids),
                                          {n: o for n, o in by_node.items() if n in self.membership.voter_ids})

    async def liveness_evidence(self, group: str, broker_ids: list[int]
                                ) -> tuple[dict[int, Any], set[int], set[int]]:
        """(brokerId -> last report for members that count as alive, members a majority holds dead,
        those of them held dead only on crash evidence: closed sessions, not the timeout).

        Heard by this node within the timeout -> alive with this node's report (an asymmetric
        partition only ever makes a node miss heartbeats, never invent them; this saves a peer
        round on the hot AlterSyncStateSet path). Otherwise ask the peers: alive only if a
        majority says ALIVE, dead only if a majority says DEAD, else neither.
        """
        self._sync_liveness_config()
        now = self.now_ms()
        alive: dict[int, Any] = {}
        unsure = []
        for b in broker_ids:
            if self.heartbeats.alive(group, b, now):
                alive[b] = self.heartbeats.report(group, b)
            else:
                unsure.append((group, b))
        dead: set[int] = set()
        crashed: set[int] = set()
        if unsure:
            v = await self.view(unsure)
            for _g, b in unsure:
                verdict = v.verdicts.get((group, b))
                if verdict is not None and verdict.alive:
                    alive[b] = verdict.report
                elif verdict is not None and verdict.dead:
                    dead.add(b)
                    if not verdict.dead_by_timeout:
                        crashed.add(b)
        return alive, dead, crashed

    def heard_all(self, group: str, broker_ids: list[int]) -> bool:
        """Has this node itself heard every one of ``broker_ids`` within the timeout? Then
        ``liveness_evidence`` would count them all alive without asking the peers."""
        self._sync_liveness_config()
        now = self.now_ms()
        alive = self.heartbeats.alive
        return all(alive(group, b, now) for b in broker_ids)

    async def elect(self, cluster: str, group: str, broker_id: int, designate: bool, trigger: str,
                    handover_from: int = 0, expect_master_epoch: int = 0,
                    expect_sync_state_set_epoch: int = 0) -> msgs.Reply:
        if not self.is_leader:
            raise self._not_leader()
        alive, dead, crashed = await self.liveness_evidence(group, self.sm.member_ids(group))
        _epoch, master = self.sm.master_of(group)
        return await self.write(msgs.ElectMasterRequest(
            cluster_name=cluster, broker_name=group, trigger=trigger, broker_id=broker_id, designate=designate,
            alive=tuple(sm_adapter.live_info(b, beat) for b, beat in sorted(alive.items())),
            dead_broker_ids=tuple(sorted(dead)), handover_from=handover_from,
            expect_master_epoch=expect_master_epoch, expect_sync_state_set_epoch=expect_sync_state_set_epoch,
            # a master dead only on crash evidence: whoever asks, the election must stay clean
            crash_only=master in crashed))

    async def alter_sync_state_set(self, req: msgs.AlterSyncStateSetRequest) -> msgs.Reply:
        """``alive_broker_ids`` is the leader's to fill: the proposed members a majority hears."""
        alive, _dead, _ = await self.liveness_evidence(req.broker_name, list(req.new_sync_state_set))
        return await self.write(msgspec.structs.replace(req, alive_broker_ids=tuple(sorted(alive)),
                                                        master_min_in_sync_replicas=self.stated_min_in_sync(req)))

    def stated_min_in_sync(self, req: msgs.AlterSyncStateSetRequest) -> int:
        """The min_in_sync_replicas the proposing master stated in its last heartbeat here (0: none)."""
        r = self.heartbeats.report(req.broker_name, req.master_broker_id)
        return r.min_in_sync_replicas if r is not None else 0

    async def clean_broker_data(self, req: msgs.CleanBrokerDataRequest) -> msgs.Reply:
        alive, _dead, _ = await self.liveness_evidence(req.broker_name, self.sm.member_ids(req.broker_name))
        return await self.write(msgspec.structs.replace(req, alive_broker_ids=tuple(sorted(alive))))

    # ------------------------------------------------------------------ scans and notifications

    async def _scan_loop(self) -> None:
        while not self._stopped.is_set():
            pause = min(self.sm.scan_interval_ms(), 1000) / 1000.0
            if self._fast_rescans_left > 0:
                pause = FAST_RESCAN_S
            woken = await wait_event(self._scan_wake, pause)
            self._scan_wake.clear()
            try:
                if self.planner.interval_ms != self.sm.scan_interval_ms():
                    self.planner.interval_ms = self.sm.scan_interval_ms()
                self.planner.max_retries = self.sm.elect_retries()
                fast = woken or self._fast_rescans_left > 0
                if fast:
                    # a peer may not have seen its end of the session yet: ask again shortly
                    self._fast_rescans_left = max(0, self._fast_rescans_left - 1)
                    if await self.scan_once() > 0 or not self._crashed_master():
                        self._fast_rescans_left = 0
                    continue
                if not self.planner.due(self.now_ms()):
                    continue
                # An empty liveness query keeps GetMetaData's peer reachability current on every node.
                await self._peer_client.query([], self.config.peer_query_timeout_s)
                await self.scan_once()
                self.rebalance_once()
            except asyncio.CancelledError:
                raise
            except Exception:
                self.log.error("scan_failed", exc_info=True)

    def rebalance_once(self) -> str | None:
        """Leader only, with auto_rebalance_masters: start moving at most one group back to its
        preferred master (controller/rebalance.py); returns the group."""
        on, delay_ms = self.sm.rebalance()
        if not on or not self.is_leader:
            return None
        now = self.now_ms()
        alive = self.heartbeats.alive
        facts = [GroupFacts(g, m, e, addr, pref, pref in sss, alive(g, pref, now), m is not None and alive(g, m, now))
                 for g, m, e, addr, pref, sss in self.sm.preferred_masters()]
        f = self.rebalancer.plan(facts, delay_ms, now)
        if f is None:
            return None
        self.log.info("preferred_master_handover_started", group=f.group, brokerId=f.master, epoch=f.master_epoch,
                      to=f.preferred)
        self._rebalance_task = asyncio.create_task(self._hand_back(f), name=f"rebalance-{f.group}")
        return f.group

    async def _hand_back(self, f: GroupFacts) -> None:
        ok, why = False, "cancelled"
        try:
            ok, why = await transfer_master(f.master_address, self.config.tls, f.preferred,
                                            self.config.rebalance_handover_timeout_ms)
        except Exception as e:  # noqa: BLE001 - a bad address or TLS files: the broker keeps its role
            why = repr(e)[:200]
        finally:
            self.rebalancer.done(f.group, ok, self.now_ms())
            log = self.log.info if ok else self.log.warning
            log("preferred_master_handover_done", group=f.group, brokerId=f.master, epoch=f.master_epoch,
                to=f.preferred, ok=ok, reason=why)

    def _crashed_master(self) -> bool:
        """Does this node count some group's master as crashed (a closed session) right now?"""
        now = self.now_ms()
        return any(self.heartbeats.crashed(m.broker_name, m.master_broker_id, now) for m in self.sm.masters_refs())

    async def scan_once(self) -> int:
        """Leader only: elect a new master for every group whose master a majority holds DEAD."""
        self._sync_liveness_config()
        now = self.now_ms()
        self.heartbeats.expire(now, keep_ms=max(600_000, 10 * self.heartbeats.timeout_ms))
        if not self.is_leader:
            self.planner.suspects([], self.heartbeats, now)   # keeps the planner's clock moving
            return 0
        masters = self.sm.masters_refs()
        suspects = self.planner.suspects(masters, self.heartbeats, now)
        if not suspects:
            return 0
        view = await self.view(suspects)
        dead_groups = sorted({g for g, b in suspects if view.is_dead(g, b)})
        for g, b in suspects:
            v = view.verdicts.get((g, b))
            if v is not None and not v.dead:
                self.log.info("master_suspect_not_majority", group=g, brokerId=b, dead_votes=v.dead_votes,
                              alive_votes=v.alive_votes)
                epoch, _ = self.sm.master_of(g)
                if not self.heartbeats.crashed(g, b, now):
                    self.alerter.emit_once("liveness_disagreement", g, epoch, sm_adapter.wall_ms(), master=b,
                                           dead_votes=v.dead_votes, alive_votes=v.alive_votes)
        if not dead_groups:
            return 0
        # Full member view of the affected groups, so the elections carry every alive candidate.
        member_keys = [(g, b) for g in dead_groups for b in self.sm.member_ids(g)]
        members_view = await self.view(member_keys)
        group_view = {g: members_view for g in dead_groups}
        plans = self.planner.plan([m for m in masters if m.broker_name in dead_groups], view, now, group_view)
        by_group = {m.broker_name: m for m in masters}
        n = 0
        for req in plans:
            m = by_group[req.broker_name]
            self.log.warning("master_dead_by_majority", group=req.broker_name, brokerId=m.master_broker_id,
                             epoch=m.master_epoch)
            committed = False
            try:
                res = await self.propose_request(req)
                committed = True
                n += 1
                self.log.info("controller_election", group=req.broker_name, code=code_name(res.code),
                              master=res.replica.master_broker_id if res.replica is not None else None)
            except NodeReply as e:
                self.log.warning("controller_election_failed", group=req.broker_name,
                                 code=code_name(e.reply_code), reason=e.message)
                if e.reply_code == Code.CONTROLLER_NOT_LEADER:
                    break
            finally:
                self.planner.record_result(req.broker_name, m.master_epoch, committed, self.now_ms())
        return n

    async def propose_request(self, req: msgs.Request) -> msgs.Reply:
        """Propose an already built messages.Request (the scan planner's elections)."""
        if not self.is_leader:
            raise self._not_leader()
        req = msgspec.structs.replace(req, ts_ms=sm_adapter.wall_ms())   # planner stamps monotonic ms
        try:
            data = sm_adapter.encode_request(req)
        except sm_adapter.BadWrite as e:
            raise NodeReply(Code.CONTROLLER_INVALID_REQUEST, str(e)) from None
        try:
            result = await self.raft.propose(data, timeout_s=self.config.propose_timeout_s)
        except Exception as e:  # noqa: BLE001
            raise self._map_raft_error(e) from None
        out = self._applied(result)
        if isinstance(out, NodeReply):
            raise out
        return out

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
            self.heartbeats.release(group, master_id=replica_info.master_broker_id)
        self._applied_masters[group] = (replica_info.master_broker_id, epoch)
        if self.config.notify_broker_role_changed:
            self.watchers.publish(group, (index, replica_info))


# sm_config's upper bound for heartbeat_timeout_ms: a broker claiming more cannot raise the floor
# past what any config could satisfy.
MAX_ASSUMED_TIMEOUT_MS = 600_000
# After a master's session closes the leader scans at once, then every FAST_RESCAN_S while a peer
# has not seen its own end of the session yet, at most MAX_FAST_RESCANS times (~0.5 s).
FAST_RESCAN_S = 0.025
# /readyz: at most this many committed entries not yet applied.
MAX_READY_LAG = 1000
MAX_FAST_RESCANS = 20

# How far ahead of now the last_dead_report file is written (see _persist_dead_report).
_MARKER_AHEAD_MS = 1000


def _tune_gc() -> None:
    """Process-level GC settings, once the node has started (modules, gRPC, recovered state).

    Those long-lived objects never become garbage; gc.freeze() keeps every later full collection
    from walking them again. The state machine allocates a few dozen small objects per write and
    almost no reference cycles, so the young generation is collected every 20,000 allocations
    instead of 700. py-spy under the write bench: gc_collect_main was ~9% of the leader's busy samples."""
    gc.freeze()
    gc.set_threshold(20_000, 20, 20)


def run_forever(config: ControllerConfig | None, namesrv: dict | None) -> int:
    """Process entry: run a controller node and/or a name server until SIGTERM/SIGINT."""
    from autoswitch.controller.namesrv import NameServerServicer, RouteTable

    from autoswitch.proto import namesrv_pb2_grpc

    log = get_logger("controller.process")

    async def main() -> int:
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        node = None
        server = None
        if namesrv is not None:
            table = RouteTable(default_ttl_s=namesrv["route_ttl_s"])
            ns = NameServerServicer(table)
            poller = None
            if namesrv.get("controllers"):
                from autoswitch.controller.namesrv import PolledAuthority

                authority = PolledAuthority(tls=namesrv["tls"])
                table.authority = authority
                poller = asyncio.create_task(authority.run(namesrv["controllers"]))

            def reg(s):
                namesrv_pb2_grpc.add_NameServerServicer_to_server(ns, s)

            async def expire_loop():
                while True:
                    await asyncio.sleep(1.0)
                    table.expire(time.monotonic())

            expirer = asyncio.create_task(expire_loop())
        ns_observe = None
        if namesrv is not None:
            routes = FnCollector(lambda: [("autoswitch_namesrv_routes", "Broker routes the name server holds", {},
                                           len(table))])
        if config is not None:
            node = ControllerNode(config)
            if namesrv is not None:
                node.metrics.registry.register(routes)     # served with the embedding node's metrics
                # Routes may not outrank the controller: only the master and MasterEpoch this
                # node applied can be a group's master route.
                table.authority = node.applied_master
                node.add_servicer(reg, NAMESRV_RULES)
            await node.start()
        else:
            from autoswitch.controller.namesrv import MAX_CONCURRENT_RPCS

            ns_auth: AuthConfig = namesrv["auth"]
            interceptors = []
            if ns_auth.enabled:
                guard = Guard("namesrv.auth", ns_auth, STANDALONE_NAMESRV_RULES)
                interceptors.append(server_interceptor(guard, tls.peer_identity))
            interceptors.append(stream_limit_interceptor(StreamBudget(MAX_CONCURRENT_RPCS), "namesrv.streams",
                                                         ns_auth.enabled))
            server = grpc.aio.server(options=[("grpc.so_reuseport", 0)], interceptors=interceptors,
                                     maximum_concurrent_rpcs=MAX_CONCURRENT_RPCS)
            reg(server)
            ns_health, ns_hpb = add_grpc_health(server)
            try:
                ns_listener = await tls.bind(server, namesrv["listen"], namesrv["tls"], "namesrv")
            except RuntimeError as e:
                raise OSError(f"cannot listen on {namesrv['listen']}: {e}") from None
            if ns_listener.port == 0:
                raise OSError(f"cannot listen on {namesrv['listen']}")
            await server.start()
            await ns_health.set("", ns_hpb.HealthCheckResponse.SERVING)
            if namesrv.get("metrics_listen"):
                from prometheus_client import CollectorRegistry

                reg = CollectorRegistry(auto_describe=False)
                reg.register(routes)
                ns_observe = ObserveServer(namesrv["metrics_listen"], reg, lambda: (True, "serving"), "namesrv")
                await ns_observe.start()
            if not namesrv["tls"].enabled:
                log.warning("plaintext", listen=namesrv["listen"],
                            note="no TLS: brokers and clients are not authenticated; loopback development only")
            elif not ns_auth.enabled:
                log.warning("no_authorization", listen=namesrv["listen"],
                            note="auth off: any holder of a certificate of the CA may register routes")
            log.info("namesrv_started", listen=namesrv["listen"])
        _tune_gc()
        waiter = asyncio.create_task(stop.wait())
        watch = [waiter] + ([asyncio.create_task(node.wait_stopped())] if node else [])
        await asyncio.wait(watch, return_when=asyncio.FIRST_COMPLETED)
        log.info("shutting_down")
        if node is not None:
            await node.stop()
        if ns_observe is not None:
            await ns_observe.stop()
        if server is not None:
            await ns_listener.close()
            await server.stop(grace=0.5)
        if namesrv is not None:
            expirer.cancel()
            if poller is not None:
                poller.cancel()
        for t in watch:
            t.cancel()
        return 0

    from autoswitch.base.errors import AutoswitchError

    try:
        return asyncio.run(main())
    except (OSError, AutoswitchError) as e:
        # Startup failures (port in use, corrupt Raft storage, bad config): one clear line, exit 2.
        fields = e.to_dict() if isinstance(e, AutoswitchError) else {"code": "OS_ERROR", "message": str(e)}
        log.error("startup_failed", **fields)
        return 2
