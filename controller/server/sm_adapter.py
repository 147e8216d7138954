"""The seam between the process (service/node) and the state machine + Raft cores.

- ``stamp`` / ``encode_request``: a typed write request (built by the servicer straight from
  protobuf) gets the leader's time and becomes Raft log bytes.
- ``AppliedStateMachine``: the Raft ``StateMachine`` we hand to RaftNode. It delegates to the
  pure ControllerStateMachine and, on every node, after each applied entry, appends the
  applied events to events.jsonl and notifies watchers when a group's ReplicaInfo changed.
- ``make_consensus``: builds what replicates the log: the RaftNode with its transport on our
  grpc.aio server, or a store backend's node (controller/store).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec
from autoswitch.controller import messages as m
from autoswitch.controller.api import BrokerReport, BrokerTraffic
from autoswitch.controller.failover import liveness
from autoswitch.controller.state.explain import Decision
from autoswitch.controller.state.history import HistoryRecord

if TYPE_CHECKING:
    from autoswitch.controller.config import ControllerConfig
    from autoswitch.controller.consensus import Consensus


class TopicRateState(msgspec.Struct, frozen=True):
    topic: str
    produce_per_s: float
    consume_per_s: float


class MemberState(msgspec.Struct, frozen=True):
    """One registered replica of a group as this controller node sees it (GetSyncStateData)."""

    broker_id: int
    address: str
    alive: bool
    in_sync: bool
    epoch: int
    max_offset: int
    last_heard_ms_ago: int
    incarnation: str = ""     # the registered process (a master admits HA connections of this one only)
    # its last heartbeat's health (controller/api.BrokerHealth) and digest verdict
    degraded: bool = False
    degraded_reasons: tuple[str, ...] = ()
    append_ms: float = -1.0
    fsync_ms: float = -1.0
    loop_lag_ms: float = -1.0
    diverged: bool = False
    zone: str = ""            # as its heartbeats state it ("" = none)
    confirm_offset: int = 0   # its last heartbeat's (heard or not: what the controllers last knew)
    clean_shutdown: bool = True
    # its last heartbeat's traffic (controller/api.BrokerTraffic; -1 = not stated) and busiest topics
    produce_per_s: float = -1.0
    consume_per_s: float = -1.0
    topic_rates: tuple[TopicRateState, ...] = ()


def _traffic(t: BrokerTraffic | None) -> dict[str, Any]:
    """A member's traffic as its last heartbeat stated it; none for a replica not heard now."""
    if t is None:
        return {}
    return {"produce_per_s": t.produce_per_s, "consume_per_s": t.consume_per_s,
            "topic_rates": tuple(TopicRateState(x.topic, x.produce_per_s, x.consume_per_s) for x in t.topics)}


class GroupState(msgspec.Struct, frozen=True):
    replica_info: m.ReplicaView
    members: tuple[MemberState, ...]


class BadWrite(Exception):
    """A request the messages layer refuses to encode (MalformedRequest): nothing was proposed."""


def wall_ms() -> int:
    return int(time.time() * 1000)


def live_info(broker_id: int, report: BrokerReport | None) -> m.BrokerLiveInfo:
    """A heartbeat report (ours or a peer's) -> messages.BrokerLiveInfo; None ranks last."""
    if report is None:
        return m.BrokerLiveInfo(broker_id=broker_id)
    return liveness.live_info(report)


def stamp(req: m.Request) -> m.Request:
    """The proposing leader's time on a write (every write request has ``ts_ms``; 0 = unset)."""
    if isinstance(req, m.WriteRequest) and req.ts_ms == 0:
        return msgspec.structs.replace(req, ts_ms=wall_ms())
    return req


def encode_request(req: m.Request) -> bytes:
    try:
        return m.encode_request(req)
    except m.MalformedRequest as e:
        raise BadWrite(e.message) from None


# The controller process's own Raft defaults (the [raft] table overrides them). Fewer entries
# between snapshots = less to replay after a restart: replaying ~8,000 controller entries blocks
# the event loop long enough for a new leader to miss heartbeats and lose its term (measured with
# 4,000 groups: ~3 s of leader churn); a 10,000-group snapshot costs ~0.1 s, every 2,000 writes.
PROCESS_RAFT_DEFAULTS: dict[str, Any] = {"snapshot_every": 2000}


def make_consensus(config: ControllerConfig, data_dir: Path, state_machine: AppliedStateMachine, server: Any,
                   min_log_index: int = 0, interceptors: list | None = None,
                   on_membership: Callable[[Any, int], None] | None = None,
                   on_caught_up: Callable[[], None] | None = None) -> Consensus:
    if config.backend != "raft":
        from autoswitch.controller.store.base import open_store
        from autoswitch.controller.store.node import StoreLogNode

        store_cfg = config.store_config
        return StoreLogNode(config.node_id, dict(config.peers), state_machine, store_cfg,
                            open_store(config.backend, store_cfg), config.bootstrap_membership(),
                            min_log_index=min_log_index)
    from autoswitch.controller.raft import RaftConfig, RaftNode
    from autoswitch.controller.raft.transport import GrpcRaftTransport

    raft_cfg = RaftConfig(**{**PROCESS_RAFT_DEFAULTS, **config.raft})
    cid = config.raft_cluster_id
    if config.raft_peers:
        # Raft on its own listener (the transport binds raft_peers[node_id]): the client port serves
        # no Raft, and the peer port can be firewalled to the controller hosts.
        peers = dict(config.raft_peers)
        transport = GrpcRaftTransport(config.node_id, peers, raft_cfg, cid, tls=config.tls,
                                      interceptors=interceptors or [])
    else:
        peers = dict(config.peers)
        transport = GrpcRaftTransport(config.node_id, peers, raft_cfg, cid, server=server, tls=config.tls)
    return RaftNode(config.node_id, peers, data_dir, state_machine, raft_cfg, transport=transport,
                    min_log_index=min_log_index, membership=config.bootstrap_membership(),
                    on_membership=on_membership, on_caught_up=on_caught_up)


class AppliedStateMachine:
    """Raft StateMachine: the pure ControllerStateMachine plus the process's side effects.

    Side effects happen after the entry is applied, on every node, in log order: each event
    history record goes to events.jsonl; each group whose ReplicaInfo changed is reported to
    ``on_change(index, group, replica_info)`` (the node pushes it to WatchReplicaInfo streams).
    """

    def __init__(self, sm_config_strings: dict[str, str], events: Any, on_change: Any, log: Any,
                 on_record: Callable[[HistoryRecord], None] | None = None,
                 on_feature_level: Callable[[int], None] | None = None,
                 on_controller_maintenance: Callable[[frozenset[str]], None] | None = None) -> None:
        from autoswitch.controller.state.sm_config import SMConfig
        from autoswitch.controller.state.statemachine import ControllerStateMachine

        self.inner = ControllerStateMachine(SMConfig.from_strings(sm_config_strings), history_sink=self._sink)
        self.events = events
        # `admin explain` outlives a restart: the decisions events.jsonl kept (controller/state/explain.py)
        bad = self.inner.decisions.restore(getattr(events, "recovered_decisions", ()))
        if bad:
            log.warning("decisions_unreadable", skipped=bad, path="events.jsonl")
        self.on_change = on_change
        self.on_record = on_record      # every history record too (metrics)
        self.on_feature_level = on_feature_level   # the finalized feature level, after each change
        self.on_controller_maintenance = on_controller_maintenance   # the members in maintenance, likewise
        self.log = log
        self._touched: list[str] = []
        self._published: dict[str, m.ReplicaView | None] = {}

    # --- Raft StateMachine ---

    def apply(self, index: int, data: bytes) -> Any:
        self._touched = []
        reply = self.inner.apply(index, data)
        if not self._touched:
            return reply
        # The reply's view is the named group's state after this entry (the state machine builds
        # it from the group it then commits): reuse it instead of building that view again.
        rv = reply.replica if isinstance(reply, m.Reply) else None
        for group in dict.fromkeys(self._touched):
            info = rv if rv is not None and rv.broker_name == group else self.inner.replica_view(group)
            if info != self._published.get(group):
                self._published[group] = info
                if info is not None:
                    try:
                        self.on_change(index, group, info)
                    except Exception:  # a notification bug must not stop the apply loop
                        self.log.error("notify_failed", exc_info=True, group=group)
            if info is None:
                self._published.pop(group, None)
        return reply

    def after_apply_batch(self) -> None:
        """Raft calls this after applying the committed entries of one Ready (before any of their
        proposers resumes): the batch's events.jsonl lines go to the OS in one write."""
        try:
            self.events.flush()
        except OSError:
            self.log.error("events_write_failed", exc_info=True)

    def snapshot(self) -> bytes:
        return self.inner.snapshot()

    def restore(self, data: bytes) -> None:
        self.inner.restore(data)
        self._published.clear()
        if self.on_feature_level is not None:
            self.on_feature_level(self.inner.state.feature_level)
        if self.on_controller_maintenance is not None:
            self.on_controller_maintenance(self.inner.state.controller_maintenance)

    def _sink(self, rec: HistoryRecord) -> None:
        try:
            self.events.append(rec)
        except OSError:
            self.log.error("events_write_failed", exc_info=True, index=rec.index)
        if rec.event == "FinalizeFeatures":
            if self.on_feature_level is not None:
                self.on_feature_level(self.inner.state.feature_level)
        elif rec.event == "ControllerMaintenance":
            if self.on_controller_maintenance is not None:
                self.on_controller_maintenance(self.inner.state.controller_maintenance)
        elif rec.event != "UpdateConfig":
            self._touched.append(rec.group)
        if self.on_record is not None:
            self.on_record(rec)

    # --- local reads (after the node's read-index barrier when linearizability matters) ---

    def query(self, req: m.Request) -> m.Reply:
        """A read request answered from this node's applied state."""
        return self.inner.query(req)

    def dry_run(self, req: m.Request) -> m.Reply:
        """What ``req`` would do to this node's applied state, applying nothing (the pure handle)."""
        from autoswitch.controller.state.statemachine import handle

        return handle(req, self.inner.state)[1]

    def sync_state_data(self, groups: tuple[str, ...], member_view: Any) -> tuple[m.Reply, list[GroupState]]:
        """GetSyncStateData: each group's view and its members as this node sees them."""
        r = self.inner.query(m.GetSyncStateDataRequest(groups))
        out: list[GroupState] = []
        if r.code != 0:
            return r, out
        for name, d in (r.data or {}).items():
            g = self.inner.state.groups.get(name)
            if g is None:
                continue
            members = []
            for bid, addr in sorted((int(b), a) for b, a in d.get("brokers", {}).items()):
                alive, ago, beat = member_view(name, bid)
                rec = g.brokers.get(bid)
                h = beat.health if beat is not None else None
                members.append(MemberState(
                    bid, addr, alive, bid in g.sync_state_set, beat.epoch if beat else 0,
                    beat.max_offset if beat else 0, ago, rec.incarnation if rec is not None else "",
                    degraded=h is not None and bool(h.reasons), degraded_reasons=h.reasons if h else (),
                    append_ms=h.append_ms if h else -1.0, fsync_ms=h.fsync_ms if h else -1.0,
                    loop_lag_ms=h.loop_lag_ms if h else -1.0, diverged=bool(beat and beat.diverged),
                    zone=beat.zone if beat is not None else "",
                    confirm_offset=beat.confirm_offset if beat is not None else 0,
                    clean_shutdown=beat.clean_shutdown if beat is not None else True,
                    **_traffic(beat.traffic if beat is not None and alive else None)))
            out.append(GroupState(g.view(), tuple(members)))
        return r, out

    def replica_info(self, group: str) -> m.ReplicaView | None:
        return self.inner.replica_view(group)

    def group_names(self) -> list[str]:
        return sorted(self.inner.state.groups)

    def member_ids(self, group: str) -> list[int]:
        g = self.inner.state.groups.get(group)
        return sorted(g.brokers) if g is not None else []

    def registered_incarnation(self, group: str, broker_id: int) -> str:
        """The broker process the last applied registration of this id named ("" = none stated)."""
        g = self.inner.state.groups.get(group)
        rec = g.brokers.get(broker_id) if g is not None else None
        return rec.incarnation if rec is not None else ""

    def masters(self) -> list[tuple[str, str, int]]:
        return [(g.cluster_name, name, g.master_broker_id) for name, g in self.inner.state.groups.items()
                if g.master_broker_id is not None]

    def group_count(self) -> int:
        return len(self.inner.state.groups)

    @property
    def last_applied_index(self) -> int:
        return int(self.inner.last_applied_index)

    def decisions(self, group: str, last: int) -> list[Decision]:
        """The group's last ``last`` decisions applied here, newest first."""
        return list(self.inner.decisions.last(group, last))

    def latest_election(self, group: str) -> Decision | None:
        """The group's latest election decision applied here, or None."""
        return self.inner.decisions.latest_election(group)

    @property
    def feature_level(self) -> int:
        """The cluster's finalized feature level as applied here."""
        return self.inner.state.feature_level

    @property
    def member_levels(self) -> dict[str, int]:
        """Each controller member's recorded highest feature level (RecordMemberLevel)."""
        return self.inner.state.member_levels

    def pristine(self) -> bool:
        """Nothing written yet that a lower feature level would read: a new cluster."""
        return self.inner.state.pristine()

    @property
    def controller_maintenance(self) -> frozenset[str]:
        """The controller members in maintenance as applied here."""
        return self.inner.state.controller_maintenance

    def maintenance(self, group: str) -> frozenset[int]:
        g = self.inner.state.groups.get(group)
        return g.maintenance if g is not None else frozenset()

    def config_strings(self) -> dict[str, str]:
        return self.inner.state.config.to_strings()

    def heartbeat_timeout_ms(self) -> int:
        return self.inner.state.config.heartbeat_timeout_ms

    def min_in_sync_replicas(self) -> int:
        return self.inner.state.config.min_in_sync_replicas

    def scan_interval_ms(self) -> int:
        return self.inner.state.config.scan_interval_ms

    def master_epoch(self, group: str) -> int:
        g = self.inner.state.groups.get(group)
        return g.master_epoch if g is not None else 0

    def master_of(self, group: str) -> tuple[int, int]:
        """(MasterEpoch, master brokerId or 0) as applied on this node."""
        g = self.inner.state.groups.get(group)
        if g is None:
            return 0, 0
        return g.master_epoch, g.master_broker_id or 0

    def masters_refs(self) -> list[Any]:
        from autoswitch.controller.failover.liveness import MasterRef

        return [MasterRef(g.cluster_name, name, g.master_broker_id, g.master_epoch)
                for name, g in self.inner.state.groups.items() if g.master_broker_id is not None]

    def preferred_masters(self) -> list[tuple[str, int | None, int, str, int, frozenset[int], bool]]:
        """(group, master, MasterEpoch, master address, preferred master, SyncStateSet, preferred
        in maintenance) of every group with a preferred master."""
        out = []
        for name, g in self.inner.state.groups.items():
            if g.preferred_master:
                rec = g.brokers.get(g.master_broker_id) if g.master_broker_id is not None else None
                out.append((name, g.master_broker_id, g.master_epoch, rec.address if rec is not None else "",
                            g.preferred_master, g.sync_state_set, g.preferred_master in g.maintenance))
        return out

    def rebalance(self) -> tuple[bool, int, int]:
        """(auto_rebalance_masters, rebalance_delay_ms, rebalance_max_in_flight) of the replicated config."""
        cfg = self.inner.state.config
        return cfg.auto_rebalance_masters, cfg.rebalance_delay_ms, cfg.rebalance_max_in_flight

    def gray_failover(self) -> tuple[bool, int, int]:
        """(gray_failover, gray_failover_delay_ms, gray_failover_cooldown_ms) of the replicated config."""
        cfg = self.inner.state.config
        return cfg.gray_failover, cfg.gray_failover_delay_ms, cfg.gray_failover_cooldown_ms

    def groups_members(self) -> list[tuple[str, int | None, int, str, frozenset[int], tuple[int, ...]]]:
        """Every group: (name, master, MasterEpoch, master address, SyncStateSet, registered ids)."""
        out = []
        for name, g in self.inner.state.groups.items():
            m = g.master_broker_id
            addr = g.brokers[m].address if m is not None and m in g.brokers else ""
            out.append((name, m, g.master_epoch, addr, g.sync_state_set, tuple(sorted(g.brokers))))
        return out

    def draining_groups(self) -> list[tuple[str, int, int, str, frozenset[int], int, frozenset[int],
                                            tuple[int, ...]]]:
        """Groups whose master is in maintenance: (name, master, MasterEpoch, master address,
        maintenance, preferred master, SyncStateSet, registered ids)."""
        out = []
        for name, g in self.inner.state.groups.items():
            m = g.master_broker_id
            if m is not None and m in g.maintenance:
                addr = g.brokers[m].address if m in g.brokers else ""
                out.append((name, m, g.master_epoch, addr, g.maintenance, g.preferred_master, g.sync_state_set,
                            tuple(sorted(g.brokers))))
        return out

    def elect_retries(self) -> int:
        return self.inner.state.config.elect_master_max_retry_count
