"""Broker replies: typed errors to wire Status codes, and the protobuf shape of a committed offset."""

from __future__ import annotations

from autoswitch.broker.consumer_groups import Committed

from autoswitch.proto import broker_pb2 as pb

_STATUS_BY_CODE: dict[str, pb.Status] = {
    "NOT_MASTER": pb.NOT_MASTER,
    "FENCED": pb.FENCED,
    "IN_SYNC_REPLICAS_NOT_ENOUGH": pb.IN_SYNC_REPLICAS_NOT_ENOUGH,
    "FLUSH_SLAVE_TIMEOUT": pb.FLUSH_SLAVE_TIMEOUT,
    "MESSAGE_TOO_LARGE": pb.MESSAGE_TOO_LARGE,
    "BAD_REQUEST": pb.BAD_REQUEST,
    "STALE_EPOCH": pb.STALE_EPOCH,
    "NOT_ALLOWED": pb.NOT_ALLOWED,
    "STORAGE_FULL": pb.STORAGE_FULL,
    "NOT_FOUND": pb.NOT_FOUND,
    # Overload is a transient refusal: same client reaction as a replica timeout (retry later).
    "OVERLOADED": pb.FLUSH_SLAVE_TIMEOUT,
}


def status_of(e: BaseException) -> pb.Status:
    return _STATUS_BY_CODE.get(getattr(e, "code", ""), pb.INTERNAL)


def committed_pb(c: Committed) -> pb.CommittedOffset:
    return pb.CommittedOffset(topic=c.topic, found=c.offset is not None, queue_offset=c.offset or 0,
                              log_end=c.log_end, clamped=c.clamped_from is not None,
                              committed_beyond=c.clamped_from or 0, consumer_group=c.group, owner=c.owner)
