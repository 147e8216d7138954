"""``FinalizeFeatures`` on the leader: ask every member which feature level it runs, decide with
the pure ``plan_finalize`` (autoswitch/base/features.py) and propose the new level through Raft.

Controllers answer ``GetMetaData`` (voters and learners alike: a learner becomes a voter without
another check); brokers state their level in every heartbeat, and every broker registered in
any group counts, heard or not (a silent one may come back running an older release).
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

import grpc
from autoswitch.controller import messages as m
from autoswitch.controller.codes import Code

from autoswitch.base import features
from autoswitch.base.log import get_logger
from autoswitch.base.tls import grpc_channel
from autoswitch.base.version import VERSION
from autoswitch.proto import controller_pb2 as pb
from autoswitch.proto import controller_pb2_grpc as pbg

if TYPE_CHECKING:
    from autoswitch.controller.server.node_api import ServedNode

_log = get_logger("controller.features")

ASK_TIMEOUT_S = 2.0


async def _controller_levels(node: ServedNode) -> list[pb.FeatureMember]:
    async def one(nid: str, addr: str) -> pb.FeatureMember:
        if nid == node.node_id:
            return pb.FeatureMember(name=f"controller {nid}", kind="controller",
                                    supported=features.SUPPORTED_LEVEL, version=VERSION)
        ch = grpc_channel(addr, node.config.tls)
        try:
            r = await pbg.ControllerServiceStub(ch).GetMetaData(pb.GetMetaDataRequest(), timeout=ASK_TIMEOUT_S)
            supported, version = int(r.feature_level_supported), str(r.version)
        except (grpc.aio.AioRpcError, TimeoutError, OSError):
            supported, version = features.NOT_HEARD, ""
        finally:
            await ch.close()
        return pb.FeatureMember(name=f"controller {nid}", kind="controller", supported=supported, version=version)

    members = sorted((n, a) for n, (a, _role) in node.membership.member_addrs().items())
    return list(await asyncio.gather(*(one(n, a) for n, a in members)))


def _broker_levels(node: ServedNode) -> list[pb.FeatureMember]:
    out = []
    table, now = node.liveness.heartbeats, node.liveness.now_ms()
    for group in node.sm.group_names():
        for bid in node.sm.member_ids(group):
            rep = table.report(group, bid) if table.alive(group, bid, now) else None
            out.append(pb.FeatureMember(name=f"broker {group}/{bid}", kind="broker",
                                        supported=rep.feature_level if rep is not None else features.NOT_HEARD,
                                        version=rep.version if rep is not None else ""))
    return out


async def finalize_features(node: ServedNode, level: int, dry_run: bool) -> pb.FinalizeFeaturesReply:
    """Level 0: describe only. Refusals come back in the header (CONTROLLER_FEATURE_REFUSED) with
    every member's level and the ones behind, so the operator sees whom to upgrade."""
    if not node.is_leader:
        raise node.proposer.not_leader()
    members = [*await _controller_levels(node), *_broker_levels(node)]
    current = node.sm.feature_level
    reply = pb.FinalizeFeaturesReply(header=pb.ReplyHeader(code=0), finalized=current, previous=current,
                                     supported_here=features.SUPPORTED_LEVEL, members=members)
    if level == 0:
        return reply
    plan = features.plan_finalize(level, current, {x.name: x.supported for x in members})
    if not plan.ok:
        reply.header.code, reply.header.message = int(Code.CONTROLLER_FEATURE_REFUSED), plan.reason
        reply.behind.extend(plan.behind)
        return reply
    if dry_run or not plan.changed:
        reply.header.message = (f"dry run: feature level {current} -> {level} would be finalized" if plan.changed
                                else f"feature level {level} is finalized already")
        return reply
    res = await node.proposer.write(m.FinalizeFeaturesRequest(level=level))
    if res.code != Code.SUCCESS:
        reply.header.code, reply.header.message = int(res.code), res.remark
        return reply
    _log.warning("feature_level_finalized", level=level, previous=current,
                     members=len(members), version=VERSION)
    reply.finalized = node.sm.feature_level
    return reply
