"""What the controller's unary service and its streams share: request checks and reply pieces."""

from __future__ import annotations

from autoswitch.controller import messages as m
from autoswitch.controller.liveness import BrokerReport, Heartbeat, cap_timeout

from autoswitch.base.addr import is_hostport
from autoswitch.base.auth import current_caller
from autoswitch.base.errors import AutoswitchError
from autoswitch.base.limits import (
    MAX_ADDRESS_LEN,
    MAX_BROKER_ID,
    MAX_INCARNATION_LEN,
    MAX_NAME_LEN,
    MAX_REPLICAS_PER_GROUP,
)
from autoswitch.base.log import RateLimitedLog, get_logger
from autoswitch.proto import controller_pb2 as pb


class BadRequest(AutoswitchError):
    code = "CONTROLLER_MALFORMED_REQUEST"


class NodeReply(AutoswitchError):
    """Raised by the node for a non-success outcome that is not a state-machine reply."""

    code = "CONTROLLER_NODE_REPLY"

    def __init__(self, reply_code: int, message: str, leader_id: str = "", leader_addr: str = "") -> None:
        super().__init__(message, reply_code=reply_code)
        self.reply_code = reply_code
        self.leader_id = leader_id
        self.leader_addr = leader_addr


def check_name(v: str, what: str, required: bool = True) -> str:
    if required and not v:
        raise BadRequest(f"{what} is required")
    if len(v) > MAX_NAME_LEN or "\n" in v or "\r" in v or "\0" in v:
        raise BadRequest(f"{what} must be at most {MAX_NAME_LEN} printable chars")
    return v


def check_id(v: int, what: str, allow_zero: bool = False) -> int:
    if not (0 if allow_zero else 1) <= v <= MAX_BROKER_ID:
        raise BadRequest(f"{what} out of range: {v}")
    return v


def check_addr(v: str, what: str) -> str:
    if not is_hostport(v):
        raise BadRequest(f"{what} must be HOST:PORT (at most {MAX_ADDRESS_LEN} characters), got {v[:64]!r}")
    return v


def replica_info_pb(v: m.ReplicaView | None) -> pb.ReplicaInfo:
    if v is None:
        return pb.ReplicaInfo()
    return pb.ReplicaInfo(
        cluster_name=v.cluster_name, broker_name=v.broker_name, master_broker_id=v.master_broker_id or 0,
        master_address=v.master_address or "", master_epoch=v.master_epoch,
        sync_state_set_epoch=v.sync_state_set_epoch, sync_state_set=sorted(v.sync_state_set),
        eligible_replicas=sorted(v.eligible_replicas), master_ha_address=v.master_ha_address or "",
        preferred_master_broker_id=v.preferred_master,
    )


# What a caller's bad input makes the controller say: one line per (caller, rpc, reason) per 10 s,
# however fast the caller sends (issue 29: malformed Batch calls wrote 16.7 MB of log in 1.3 s).
_refusals = RateLimitedLog(get_logger("controller.service"))


def caller_name() -> str:
    p = current_caller()
    return p.name[:128] if p is not None else "anonymous"


def log_refused(rpc: str, reason: str, kind: str = "bad_request", **fields) -> None:
    who = caller_name()
    _refusals.warning((who, rpc, kind), kind, rpc=rpc, reason=reason[:256], caller=who, **fields)


def log_internal(rpc: str, e: BaseException) -> None:
    _refusals.error((rpc, type(e).__name__), "rpc_internal_error", exc_info=e, rpc=rpc)


def checked_heartbeat(r: pb.BrokerHeartbeatRequest) -> Heartbeat:
    """A BrokerHeartbeatRequest checked (BadRequest otherwise) and typed for the liveness desk."""
    check_name(r.broker_name, "broker_name")
    check_id(r.broker_id, "broker_id")
    if r.broker_address:
        check_addr(r.broker_address, "broker_address")
    for f in ("epoch", "max_offset", "confirm_offset", "heartbeat_timeout_ms"):
        if getattr(r, f) < 0:
            raise BadRequest(f"{f} must be >= 0")
    if (len(r.incarnation) > MAX_INCARNATION_LEN or r.ack_mode not in m.ACK_MODES
            or not 0 <= r.min_in_sync_replicas <= MAX_REPLICAS_PER_GROUP):
        raise BadRequest(f"incarnation over {MAX_INCARNATION_LEN} characters, ack_mode not one of "
                         f"{sorted(m.ACK_MODES)}, or min_in_sync_replicas not in [0, {MAX_REPLICAS_PER_GROUP}]")
    return Heartbeat(
        group=r.broker_name,
        report=BrokerReport(broker_id=r.broker_id, address=r.broker_address, epoch=r.epoch, max_offset=r.max_offset,
                            confirm_offset=r.confirm_offset, election_priority=r.election_priority,
                            clean_shutdown=r.clean_shutdown, assumed_timeout_ms=cap_timeout(r.heartbeat_timeout_ms),
                            min_in_sync_replicas=r.min_in_sync_replicas, incarnation=r.incarnation,
                            ack_mode=r.ack_mode),
        stopping=r.stopping, lease_quorum=r.lease_quorum, controllers_index=r.controllers_index)
