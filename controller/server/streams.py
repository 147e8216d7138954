"""The controller's server streams: WatchReplicaInfo pushes and BrokerSession (crash-fast failover).

A BrokerSession carries one event and then nothing; the broker holds it for its whole life and
its end is the evidence: a dead process's kernel closes the socket, gRPC cancels this handler,
and ``node.liveness.session_closed`` may make the broker count as crashed (docs/controller.md).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from autoswitch.controller import messages as m
from autoswitch.controller.codes import Code
from autoswitch.controller.server.alerts import ALL
from autoswitch.controller.server.service_common import (
    BadRequest,
    NodeReply,
    check_field,
    log_refused,
    replica_info_pb,
)

from autoswitch.base.log import get_logger
from autoswitch.proto import controller_pb2 as pb

if TYPE_CHECKING:
    from autoswitch.controller.server.node_api import StreamedNode

_log = get_logger("controller.streams")


def _event(node: StreamedNode, code: int = 0, message: str = "", tracked: bool = False) -> pb.BrokerSessionEvent:
    return pb.BrokerSessionEvent(header=pb.ReplyHeader(code=code, message=message, node_id=node.node_id),
                                 tracked=tracked)


async def broker_session(node: StreamedNode, request: pb.BrokerSessionRequest) -> AsyncIterator[pb.BrokerSessionEvent]:
    try:
        group = check_field(request.broker_name, m.Name, "broker_name")
        bid = check_field(request.broker_id, m.BrokerId, "broker_id")
        check_field(request.ack_mode, m.AckMode, "ack_mode")
        check_field(request.incarnation, m.Incarnation, "incarnation")
    except BadRequest as e:
        log_refused("BrokerSession", e.message)
        yield _event(node, Code.CONTROLLER_MALFORMED_REQUEST, e.message)
        return
    try:
        # another process of this id is the one heartbeating: a session of this one (a copied
        # data directory) would make its end look like the live broker's crash
        node.liveness.check_incarnation(group, bid, request.incarnation, "BrokerSession")
    except NodeReply as e:
        yield _event(node, e.reply_code, e.message)
        return
    if node.open_sessions >= node.config.max_broker_sessions:
        log_refused("BrokerSession", "too many broker sessions", kind="broker_sessions_full", group=group,
                    brokerId=bid, limit=node.config.max_broker_sessions)
        yield _event(node, Code.CONTROLLER_OVERLOADED, "too many broker sessions")
        return
    node.open_sessions += 1
    tracked = False
    try:
        tracked = node.liveness.session_opened(group, bid, request.ack_mode, request.incarnation)
        yield _event(node, tracked=tracked)
        await node.wait_stopped()      # or, far more often, the caller goes away and we are cancelled
    finally:
        node.open_sessions -= 1
        if tracked:
            node.liveness.session_closed(group, bid)


async def watch_alerts(node: StreamedNode, request: pb.WatchAlertsRequest) -> AsyncIterator[pb.AlertEvent]:
    queue = node.watchers.subscribe(ALL)
    if queue is None:
        yield pb.AlertEvent(header=pb.ReplyHeader(code=Code.CONTROLLER_OVERLOADED, message="too many watchers",
                                                  node_id=node.node_id))
        return
    try:
        yield pb.AlertEvent(header=pb.ReplyHeader(code=0, node_id=node.node_id))    # subscribed
        while True:
            alert: Any = await queue.get()
            if alert is None:   # node stopping or the subscriber fell too far behind
                return
            yield pb.AlertEvent(header=pb.ReplyHeader(code=0, node_id=node.node_id), kind=alert.kind,
                                group=alert.group, ts_ms=alert.ts_ms, json=alert.to_json())
    finally:
        node.watchers.unsubscribe(ALL, queue)


async def watch_replica_info(node: StreamedNode, request: pb.WatchReplicaInfoRequest) -> AsyncIterator[pb.ReplicaInfoEvent]:
    try:
        group = check_field(request.broker_name, m.Name, "broker_name")
    except BadRequest as e:
        yield pb.ReplicaInfoEvent(header=pb.ReplyHeader(code=Code.CONTROLLER_MALFORMED_REQUEST, message=e.message,
                                                        node_id=node.node_id))
        return
    queue = node.watchers.subscribe(group)
    if queue is None:
        yield pb.ReplicaInfoEvent(header=pb.ReplyHeader(code=Code.CONTROLLER_OVERLOADED, message="too many watchers",
                                                        node_id=node.node_id))
        return
    try:
        first = node.local_replica_info(group)
        yield pb.ReplicaInfoEvent(header=pb.ReplyHeader(code=0, node_id=node.node_id),
                                  replica_info=replica_info_pb(first), raft_index=0)
        while True:
            item: Any = await queue.get()
            if item is None:   # node stopping or the subscriber fell too far behind
                return
            index, info = item
            yield pb.ReplicaInfoEvent(header=pb.ReplyHeader(code=0, node_id=node.node_id),
                                      replica_info=replica_info_pb(info), raft_index=index)
    finally:
        node.watchers.unsubscribe(group, queue)
