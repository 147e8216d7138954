"""The seam between the process (service/node) and the state machine + Raft cores.

- ``encode_write_request``: service-level fields -> a messages.Request -> Raft log bytes.
- ``reply_dict``: a messages.Reply -> the plain dict the servicer turns into protobuf.
- ``AppliedStateMachine``: the Raft ``StateMachine`` we hand to RaftNode. It delegates to the
  pure ControllerStateMachine and, on every node, after each applied entry, appends the
  applied events to events.jsonl and notifies watchers when a group's ReplicaInfo changed.
- ``make_raft``: builds the RaftNode with its transport on our grpc.aio server.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from autoswitch.controller import messages as m
from autoswitch.controller.codes import Code

# Service-level kind -> request class.
_WRITES = {
    "apply_broker_id": m.ApplyBrokerIdRequest,
    "register_broker": m.RegisterBrokerRequest,
    "elect_master": m.ElectMasterRequest,
    "alter_sync_state_set": m.AlterSyncStateSetRequest,
    "clean_broker_data": m.CleanBrokerDataRequest,
    "update_controller_config": m.UpdateControllerConfigRequest,
}


class BadWrite(Exception):
    """A request the messages layer refuses to encode (MalformedRequest): nothing was proposed."""


def wall_ms() -> int:
    return int(time.time() * 1000)


def live_info(broker_id: int, report: Any) -> m.BrokerLiveInfo:
    """A liveness.BrokerReport (ours or a peer's) -> messages.BrokerLiveInfo; None ranks last."""
    if report is None:
        return m.BrokerLiveInfo(broker_id=broker_id)
    return report.live_info()


def build_request(kind: str, f: dict[str, Any]) -> m.Request:
    ts = f.get("ts_ms") or wall_ms()
    if kind == "apply_broker_id":
        return m.ApplyBrokerIdRequest(cluster_name=f["cluster"], broker_name=f["group"],
                                      applied_broker_id=f["broker_id"],
                                      register_check_code=f["register_check_code"], ts_ms=ts)
    if kind == "register_broker":
        return m.RegisterBrokerRequest(cluster_name=f["cluster"], broker_name=f["group"], broker_id=f["broker_id"],
                                       broker_address=f["address"], clean_shutdown=f.get("clean_shutdown", True),
                                       ts_ms=ts, broker_ha_address=f.get("ha_address", ""))
    if kind == "elect_master":
        alive = tuple(live_info(b, beat) for b, beat in sorted(f["alive"].items()))
        return m.ElectMasterRequest(cluster_name=f["cluster"], broker_name=f["group"], trigger=f["trigger"],
                                    broker_id=f["broker_id"], designate=f["designate"], alive=alive,
                                    ts_ms=ts, dead_broker_ids=tuple(sorted(f.get("dead", ()))))
    if kind == "alter_sync_state_set":
        return m.AlterSyncStateSetRequest(broker_name=f["group"], master_broker_id=f["master_broker_id"],
                                          master_epoch=f["master_epoch"],
                                          new_sync_state_set=tuple(f["new_sync_state_set"]),
                                          sync_state_set_epoch=f["sync_state_set_epoch"],
                                          alive_broker_ids=tuple(sorted(f["alive_broker_ids"])), ts_ms=ts)
    if kind == "clean_broker_data":
        return m.CleanBrokerDataRequest(cluster_name=f["cluster"], broker_name=f["group"],
                                        broker_ids=tuple(f["broker_ids"]),
                                        clean_living_broker=f["clean_living_broker"],
                                        alive_broker_ids=tuple(sorted(f["alive_broker_ids"])), ts_ms=ts)
    if kind == "update_controller_config":
        return m.UpdateControllerConfigRequest(config=dict(f["config"]), ts_ms=ts,
                                               broker_timeout_floor_ms=int(f.get("broker_timeout_floor_ms", 0)))
    raise KeyError(kind)


def encode_write_request(kind: str, fields: dict[str, Any]) -> bytes:
    """Raft log bytes of a write. The leader applies them like every other node: it decodes."""
    return encode_request(build_request(kind, fields))


def encode_request(req: m.Request) -> bytes:
    try:
        return m.encode_request(req)
    except m.MalformedRequest as e:
        raise BadWrite(e.message) from None


def replica_dict(v: m.ReplicaView | None) -> dict | None:
    if v is None:
        return None
    return {
        "cluster_name": v.cluster_name, "broker_name": v.broker_name,
        "master_broker_id": v.master_broker_id or 0, "master_address": v.master_address or "",
        "master_epoch": v.master_epoch, "sync_state_set_epoch": v.sync_state_set_epoch,
        "sync_state_set": list(v.sync_state_set), "eligible_replicas": list(v.eligible_replicas),
        "master_ha_address": v.master_ha_address or "",
    }


def reply_dict(reply: Any) -> dict:
    """messages.Reply -> {"code", "message", "replica_info", "next_broker_id", "sync_state_set", ...}."""
    if not isinstance(reply, m.Reply):
        return {"code": Code.CONTROLLER_INTERNAL_ERROR, "message": f"unexpected apply result {type(reply).__name__}"}
    out: dict[str, Any] = {"code": int(reply.code), "message": reply.remark}
    ri = replica_dict(reply.replica)
    if ri is not None:
        out["replica_info"] = ri
        out["sync_state_set"] = ri["sync_state_set"]
        out["sync_state_set_epoch"] = ri["sync_state_set_epoch"]
    if reply.broker_id is not None:
        out["next_broker_id"] = reply.broker_id
    if reply.data is not None:
        out["data"] = reply.data
    return out




# The controller process's own Raft defaults (the [raft] table overrides them). Fewer entries
# between snapshots = less to replay after a restart: replaying ~8,000 controller entries blocks
# the event loop long enough for a new leader to miss heartbeats and lose its term (measured with
# 4,000 groups: ~3 s of leader churn); a 10,000-group snapshot costs ~0.1 s, every 2,000 writes.
PROCESS_RAFT_DEFAULTS: dict[str, Any] = {"snapshot_every": 2000}


def make_raft(config: Any, data_dir: Path, state_machine: Any, server: Any, min_log_index: int = 0) -> Any:
    from autoswitch.controller.config import cluster_id
    from autoswitch.controller.raft import RaftConfig, RaftNode
    from autoswitch.controller.raft.transport import GrpcRaftTransport

    raft_cfg = RaftConfig(**{**PROCESS_RAFT_DEFAULTS, **config.raft})
    cid = cluster_id(config.cluster_token, config.peers)
    if config.raft_peers:
        # Raft on its own listener (the transport binds raft_peers[node_id]): the client port serves
        # no Raft, and the peer port can be firewalled to the controller hosts.
        peers = dict(config.raft_peers)
        transport = GrpcRaftTransport(config.node_id, peers, raft_cfg, cid)
    else:
        peers = dict(config.peers)
        transport = GrpcRaftTransport(config.node_id, peers, raft_cfg, cid, server=server)
    return RaftNode(config.node_id, peers, data_dir, state_machine, raft_cfg, transport=transport,
                    min_log_index=min_log_index)


class AppliedStateMachine:
    """Raft StateMachine: the pure ControllerStateMachine plus the process's side effects.

    Side effects happen after the entry is applied, on every node, in log order: each event
    history record goes to events.jsonl; each group whose ReplicaInfo changed is reported to
    ``on_change(index, group, replica_info)`` (the node pushes it to WatchReplicaInfo streams).
    """

    def __init__(self, sm_config_strings: dict[str, str], events: Any, on_change: Any, log: Any) -> None:
        from autoswitch.controller.sm_config import SMConfig
        from autoswitch.controller.statemachine import ControllerStateMachine

        self.inner = ControllerStateMachine(SMConfig.from_strings(sm_config_strings), history_sink=self._sink)
        self.events = events
        self.on_change = on_change
        self.log = log
        self._touched: list[str] = []
        self._published: dict[str, dict | None] = {}

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
            if rv is not None and rv.broker_name == group:
                info = replica_dict(rv)
            else:
                info = replica_dict(self.inner.replica_view(group))
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

    def _sink(self, rec: dict) -> None:
        try:
            self.events.append(int(rec["index"]), rec)
        except OSError:
            self.log.error("events_write_failed", exc_info=True, index=rec.get("index"))
        if rec.get("event") not in ("UpdateConfig",):
            self._touched.append(rec["group"])

    # --- local reads (after the node's read-index barrier when linearizability matters) ---

    def read(self, kind: str, f: dict[str, Any], member_view: Any) -> dict:
        if kind == "get_next_broker_id":
            return reply_dict(self.inner.query(m.GetNextBrokerIdRequest(f["cluster"], f["group"])))
        if kind == "get_replica_info":
            return reply_dict(self.inner.query(m.GetReplicaInfoRequest(f["group"])))
        if kind == "get_sync_state_data":
            r = self.inner.query(m.GetSyncStateDataRequest(tuple(f["groups"])))
            out = reply_dict(r)
            if r.code != 0:
                return out
            groups = []
            for name, d in (r.data or {}).items():
                g = self.inner.state.groups.get(name)
                if g is None:
                    continue
                members = []
                for bid, addr in sorted((int(b), a) for b, a in d.get("brokers", {}).items()):
                    alive, ago, beat = member_view(name, bid)
                    members.append({
                        "broker_id": bid, "address": addr, "alive": alive, "in_sync": bid in g.sync_state_set,
                        "epoch": beat.epoch if beat else 0, "max_offset": beat.max_offset if beat else 0,
                        "last_heard_ms_ago": ago,
                    })
                groups.append({"replica_info": replica_dict(g.view()), "members": members})
            out["groups"] = groups
            return out
        raise KeyError(kind)

    def replica_info(self, group: str) -> dict | None:
        return replica_dict(self.inner.replica_view(group))

    def member_ids(self, group: str) -> list[int]:
        g = self.inner.state.groups.get(group)
        return sorted(g.brokers) if g is not None else []

    def masters(self) -> list[tuple[str, str, int]]:
        return [(g.cluster_name, name, g.master_broker_id) for name, g in self.inner.state.groups.items()
                if g.master_broker_id is not None]

    def group_count(self) -> int:
        return len(self.inner.state.groups)

    def config_strings(self) -> dict[str, str]:
        return self.inner.state.config.to_strings()

    def heartbeat_timeout_ms(self) -> int:
        return self.inner.state.config.heartbeat_timeout_ms

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
        from autoswitch.controller.liveness import MasterRef

        return [MasterRef(g.cluster_name, name, g.master_broker_id, g.master_epoch)
                for name, g in self.inner.state.groups.items() if g.master_broker_id is not None]

    def elect_retries(self) -> int:
        return self.inner.state.config.elect_master_max_retry_count
