"""What the controller's unary service and its streams share: request checks and reply pieces."""

from __future__ import annotations

import math
from typing import Any, TypeVar

import msgspec
from autoswitch.controller import messages as m
from autoswitch.controller.api import BrokerHealth, BrokerReport, BrokerTraffic, Heartbeat, TopicRate
from autoswitch.controller.failover.liveness import HEALTH_SIGNALS, cap_timeout

from autoswitch.base import features
from autoswitch.base.addr import is_hostport
from autoswitch.base.auth import current_caller
from autoswitch.base.errors import AutoswitchError
from autoswitch.base.limits import (
    MAX_ADDRESS_LEN,
    MAX_HEALTH_MS,
    MAX_RATE_PER_S,
    MAX_TOPIC_RATES,
    MAX_VERSION_LEN,
    MAX_ZONES,
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


R = TypeVar("R", bound=m.Request)
# Text a caller names that ends up in log lines, metrics labels and file names: one line of it.
_TEXT_FIELDS = ("cluster_name", "broker_name", "register_check_code")


def checked(req: R) -> R:
    """``req`` as its message type accepts it (field ranges and rules: messages.check_request,
    the decode every Raft-log entry gets), plus what the network edge adds: names on one line.
    BadRequest naming the field otherwise."""
    try:
        out = m.check_request(req)
    except m.MalformedRequest as e:
        raise BadRequest(f"{req.TYPE}: {e.message}") from None
    for f in _TEXT_FIELDS:
        _one_line(getattr(out, f, ""), f)
    for name in getattr(out, "broker_names", ()):
        _one_line(name, "broker_names")
    return out  # type: ignore[return-value]  # check_request returns the request's own type


def check_field(v: Any, kind: Any, what: str) -> Any:
    """``v`` as the message field type ``kind`` (messages.BrokerId, messages.Name, ...) accepts it:
    for calls that are no controller request (liveness queries, streams)."""
    try:
        out = msgspec.convert(v, kind)
    except msgspec.ValidationError as e:
        raise BadRequest(f"{what}: {e}") from None
    if isinstance(out, str):
        _one_line(out, what)
    return out


def _one_line(v: str, what: str) -> None:
    if "\n" in v or "\r" in v or "\0" in v:
        raise BadRequest(f"{what} must be printable text on one line")


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
        preferred_master_broker_id=v.preferred_master, maintenance=list(v.maintenance),
        zone_preference=list(v.zone_preference),
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


def checked_health(r: pb.BrokerHeartbeatRequest) -> BrokerHealth:
    """The heartbeat's health signals: known signal names only, once each; figures finite and in
    [-1, MAX_HEALTH_MS] (a hostile or buggy broker cannot plant an absurd figure on the status page)."""
    reasons = tuple(r.degraded_reasons)
    if len(reasons) > len(HEALTH_SIGNALS) or not set(reasons) <= HEALTH_SIGNALS or len(set(reasons)) != len(reasons):
        raise BadRequest(f"degraded_reasons must name distinct signals of {sorted(HEALTH_SIGNALS)}")
    if r.degraded != bool(reasons):
        raise BadRequest("degraded must be true exactly when degraded_reasons names a signal")
    figures = (r.append_ms, r.fsync_ms, r.loop_lag_ms)
    if not all(math.isfinite(x) and -1.0 <= x <= MAX_HEALTH_MS for x in figures):
        raise BadRequest(f"append_ms, fsync_ms and loop_lag_ms must be in [-1, {MAX_HEALTH_MS}]")
    return BrokerHealth(reasons, *figures)


def checked_traffic(r: Any) -> BrokerTraffic:
    """A heartbeat's traffic: rates finite in [-1, MAX_RATE_PER_S], at most MAX_TOPIC_RATES named
    topics, each once (a hostile broker cannot plant an absurd figure or a flood of names)."""
    def rate(x: float, what: str) -> float:
        if not (math.isfinite(x) and -1.0 <= x <= MAX_RATE_PER_S):
            raise BadRequest(f"{what} must be in [-1, {MAX_RATE_PER_S:g}]")
        return float(x)

    if len(r.topic_rates) > MAX_TOPIC_RATES:
        raise BadRequest(f"at most {MAX_TOPIC_RATES} topic_rates")
    topics = tuple(TopicRate(check_field(t.topic, m.Name, "topic_rates.topic"), rate(t.produce_per_s, "produce_per_s"),
                             rate(t.consume_per_s, "consume_per_s")) for t in r.topic_rates)
    if len({t.topic for t in topics}) != len(topics):
        raise BadRequest("topic_rates names a topic twice")
    return BrokerTraffic(rate(r.produce_per_s, "produce_per_s"), rate(r.consume_per_s, "consume_per_s"), topics)


def checked_level(level: int) -> int:
    if not 0 <= level <= features.MAX_LEVEL:
        raise BadRequest(f"feature_level must be in [0, {features.MAX_LEVEL}]")
    return level


def check_version(version: str) -> str:
    if len(version) > MAX_VERSION_LEN or not version.isprintable():
        raise BadRequest(f"version must be printable, at most {MAX_VERSION_LEN} characters")
    return version


def check_zone_count(n: int) -> int:
    if not 0 <= n <= MAX_ZONES:
        raise BadRequest(f"min_in_sync_zones {n} outside [0, {MAX_ZONES}]")
    return n


def check_zone(zone: str) -> str:
    """A zone name as a heartbeat states it: "" or a name (the ElectMaster entry carries it)."""
    return check_field(zone, m.Name, "zone") if zone else ""


def checked_heartbeat(r: pb.BrokerHeartbeatRequest) -> Heartbeat:
    """A BrokerHeartbeatRequest checked (BadRequest otherwise) and typed for the liveness desk:
    what it reports has the ranges of the BrokerLiveInfo an election carries it in."""
    check_field(r.broker_name, m.Name, "broker_name")
    if r.broker_address:
        check_addr(r.broker_address, "broker_address")
    if r.heartbeat_timeout_ms < 0:
        raise BadRequest("heartbeat_timeout_ms must be >= 0")
    try:
        info = m.check_live_info(m.BrokerLiveInfo(
            broker_id=r.broker_id, epoch=r.epoch, max_offset=r.max_offset, confirm_offset=r.confirm_offset,
            election_priority=r.election_priority, clean_shutdown=r.clean_shutdown,
            min_in_sync_replicas=r.min_in_sync_replicas, ack_mode=check_field(r.ack_mode, m.AckMode, "ack_mode"),
            incarnation=r.incarnation, diverged=r.diverged))
    except m.MalformedRequest as e:
        raise BadRequest(f"heartbeat: {e.message}") from None
    return Heartbeat(
        cluster=r.cluster_name, group=r.broker_name,
        report=BrokerReport(broker_id=r.broker_id, address=r.broker_address, epoch=r.epoch, max_offset=r.max_offset,
                            confirm_offset=r.confirm_offset, election_priority=r.election_priority,
                            clean_shutdown=r.clean_shutdown, assumed_timeout_ms=cap_timeout(r.heartbeat_timeout_ms),
                            min_in_sync_replicas=r.min_in_sync_replicas, incarnation=r.incarnation,
                            ack_mode=info.ack_mode, diverged=r.diverged, health=checked_health(r),
                            feature_level=checked_level(r.feature_level), version=check_version(r.version),
                            zone=check_zone(r.zone), min_in_sync_zones=check_zone_count(r.min_in_sync_zones),
                            traffic=checked_traffic(r)),
        stopping=r.stopping, lease_quorum=r.lease_quorum, controllers_index=r.controllers_index)
