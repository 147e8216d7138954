"""``FinalizeFeatures`` on the leader: ask every member which feature level it runs, decide with
the pure ``plan_finalize`` (autoswitch/base/features.py) and propose the new level through Raft.

Controllers answer ``GetMetaData`` (voters and learners alike: a learner becomes a voter without
another check); brokers state their level in every heartbeat, and every broker registered in
any group counts, heard or not (a silent one may come back running an older release).

The leader also keeps each controller member's level recorded in the replicated state
(``RecordMemberLevel``, ``keep_member_levels``): the FinalizeFeatures entry names the voters, and
the state machine refuses, when the entry commits, a level one of them is recorded not to support
(issue 58, item 6: the check is part of the committed entry). And a new cluster starts at the
newest level every voter supports (a bootstrap FinalizeFeatures the state machine applies only to
a pristine state), as Kafka formats a new cluster at the newest metadata.version; an upgraded
cluster stays where it was until an operator finalizes.
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


MEMBER_LEVELS_INTERVAL_S = 5.0       # how often the leader asks the members again
BOOTSTRAP_RETRY_S = 0.2              # ... while a new cluster waits for every voter's answer


async def keep_member_levels(node: ServedNode, stopped: asyncio.Event) -> None:
    """On the leader: record every member's answered level; forget departed members; a new
    cluster's first level. Runs until ``stopped``."""
    while not stopped.is_set():
        # a new cluster's first level should commit before its first master: look often until then
        wait = BOOTSTRAP_RETRY_S if node.sm.pristine() else MEMBER_LEVELS_INTERVAL_S
        if node.is_leader and node.feature_unsupported is None:
            try:
                if await sync_member_levels(node):
                    wait = BOOTSTRAP_RETRY_S
            except Exception as e:  # noqa: BLE001 - a lost leadership or a failed proposal: next round
                _log.info("member_levels_not_recorded", error=type(e).__name__, detail=str(e)[:200])
                wait = BOOTSTRAP_RETRY_S
        try:
            await asyncio.wait_for(stopped.wait(), wait)
        except TimeoutError:
            pass


async def sync_member_levels(node: ServedNode) -> bool:
    """One round; True when a new cluster still waits for its first level (ask again soon).

    A member is recorded only once it has applied what this leader had applied when it asked: a
    member that starts with an empty data directory then finds, when it has caught up, no record
    of itself if this is its first start, and its record if it ran here before (a wiped or replaced
    disk: ControllerNode says which, issue 58 item 7)."""
    applied_here = int(node.metadata().get("applied", 0))
    levels = await _member_levels(node)
    answered = {n: lvl for n, (lvl, _) in levels.items() if lvl != features.NOT_HEARD}
    recorded = node.sm.member_levels
    for nid, (lvl, applied) in sorted(levels.items()):
        if lvl == features.NOT_HEARD or recorded.get(nid) == lvl:
            continue
        if nid == node.node_id or applied >= applied_here:
            await node.proposer.write(m.RecordMemberLevelRequest(node_id=nid, level=lvl))
    members = node.membership.member_addrs()
    for nid in sorted(set(recorded) - set(members)):
        await node.proposer.write(m.RecordMemberLevelRequest(node_id=nid, level=0))
    if not node.sm.pristine():
        return False
    voters = node.membership.voter_ids
    if not all(v in answered for v in voters):
        return True
    target = min(answered[v] for v in voters)
    if target > node.sm.feature_level:
        res = await node.proposer.write(m.FinalizeFeaturesRequest(level=target, voters=tuple(sorted(voters)),
                                                                  bootstrap=True))
        if res.code == Code.SUCCESS and node.sm.feature_level == target:
            _log.warning("feature_level_finalized", featureLevel=target, previous=features.BASELINE_LEVEL,
                         bootstrap=True, voters=sorted(voters), version=VERSION)
    return False


async def _member_levels(node: ServedNode) -> dict[str, tuple[int, int]]:
    """node id -> (the highest level it answered (NOT_HEARD when it did not), its applied index)."""
    return {n: (int(x.supported), applied) for n, (x, applied) in (await _asked(node)).items()}


async def _controller_levels(node: ServedNode) -> list[pb.FeatureMember]:
    return [x for x, _ in (await _asked(node)).values()]


async def _asked(node: ServedNode) -> dict[str, tuple[pb.FeatureMember, int]]:
    """Every member's answer to GetMetaData: node id -> (its level and release, its applied index)."""
    async def one(nid: str, addr: str) -> tuple[str, tuple[pb.FeatureMember, int]]:
        if nid == node.node_id:
            return nid, (pb.FeatureMember(name=f"controller {nid}", kind="controller",
                                          supported=features.SUPPORTED_LEVEL, version=VERSION),
                         int(node.metadata().get("applied", 0)))
        ch = grpc_channel(addr, node.config.tls)
        try:
            r = await pbg.ControllerServiceStub(ch).GetMetaData(pb.GetMetaDataRequest(), timeout=ASK_TIMEOUT_S)
            supported, version, applied = int(r.feature_level_supported), str(r.version), int(r.applied_index)
        except (grpc.aio.AioRpcError, TimeoutError, OSError):
            supported, version, applied = features.NOT_HEARD, "", 0
        finally:
            await ch.close()
        return nid, (pb.FeatureMember(name=f"controller {nid}", kind="controller", supported=supported,
                                      version=version), applied)

    members = sorted((n, a) for n, (a, _role) in node.membership.member_addrs().items())
    return dict(await asyncio.gather(*(one(n, a) for n, a in members)))


def _broker_levels(node: ServedNode) -> list[pb.FeatureMember]:
    out = []
    for group in node.sm.group_names():
        for bid in node.sm.member_ids(group):
            rep = node.liveness.live_report(group, bid)
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
    # the records first (what the members just answered), then the entry the state machine checks
    # against them when it commits
    for x in members:
        nid = x.name.removeprefix("controller ")
        if x.kind == "controller" and x.supported != features.NOT_HEARD and node.sm.member_levels.get(nid) != x.supported:
            await node.proposer.write(m.RecordMemberLevelRequest(node_id=nid, level=int(x.supported)))
    res = await node.proposer.write(m.FinalizeFeaturesRequest(level=level,
                                                              voters=tuple(sorted(node.membership.voter_ids))))
    if res.code != Code.SUCCESS:
        reply.header.code, reply.header.message = int(res.code), res.remark
        return reply
    _log.warning("feature_level_finalized", featureLevel=level, previous=current,
                     members=len(members), version=VERSION)
    reply.finalized = node.sm.feature_level
    return reply
