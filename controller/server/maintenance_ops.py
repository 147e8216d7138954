"""``SetMaintenance`` and ``SetZonePreference`` on the leader: record the cordon through Raft, then say what happens to the
mastership (the leader's scan carries the drain out, controller/failover/drain.py, so a drain
survives a leader change), or hand the Raft leadership off a controller member put in maintenance.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from autoswitch.controller import messages as m
from autoswitch.controller.codes import Code
from autoswitch.controller.failover.drain import drain_target
from autoswitch.controller.server.service_common import (
    BadRequest,
    NodeReply,
    check_field,
    checked,
    replica_info_pb,
)

from autoswitch.base.features import OPERATOR_LEVEL
from autoswitch.base.limits import MAX_ZONES
from autoswitch.proto import controller_pb2 as pb

if TYPE_CHECKING:
    from autoswitch.controller.server.node_api import ServedNode


async def set_maintenance(node: ServedNode, request: pb.SetMaintenanceRequest) -> pb.SetMaintenanceReply:
    """The RPC: a controller member (``controller_node_id``) or a broker."""
    if request.controller_node_id:
        if request.broker_name or request.broker_id:
            raise BadRequest("name a broker (broker_name, broker_id) or a controller (controller_node_id), not both")
        nid = check_field(request.controller_node_id, m.Name, "controller_node_id")
        members = await set_controller_maintenance(node, nid, bool(request.on))
        return pb.SetMaintenanceReply(header=pb.ReplyHeader(code=0), controller_maintenance=members)
    res, drain = await set_broker_maintenance(node, checked(m.SetMaintenanceRequest(
        broker_name=request.broker_name, broker_id=request.broker_id, on=bool(request.on))))
    return pb.SetMaintenanceReply(header=pb.ReplyHeader(code=int(res.code), message=res.remark),
                                  replica_info=replica_info_pb(res.replica), drain=drain,
                                  controller_maintenance=sorted(node.sm.controller_maintenance))


def needs_operator_level(node: ServedNode, what: str = "maintenance") -> None:
    """Refused before anything is proposed: an entry of a level the cluster has not finalized
    would be refused differently by members of the older release (docs/compatibility.md)."""
    if node.sm.feature_level < OPERATOR_LEVEL:
        raise NodeReply(Code.CONTROLLER_FEATURE_UNSUPPORTED,
                        f"{what} needs feature level {OPERATOR_LEVEL}; the cluster is finalized at "
                        f"{node.sm.feature_level}: run `autoswitch admin finalize-features --level "
                        f"{OPERATOR_LEVEL}` once every member runs a release that supports it "
                        f"(docs/compatibility.md)")


async def set_broker_maintenance(node: ServedNode, req: m.SetMaintenanceRequest) -> tuple[m.Reply, str]:
    """(the applied entry's reply, what happens to the mastership)."""
    if not node.is_leader:
        raise node.proposer.not_leader()
    needs_operator_level(node)
    res = await node.proposer.write(req)
    if res.code != Code.SUCCESS or not req.on:
        return res, ""
    master = res.replica.master_broker_id if res.replica is not None else None
    if master != req.broker_id:
        return res, f"broker {req.broker_id} is not the master of {req.broker_name}: nothing to drain"
    facts = {f.group: f for f in node.drains.facts()}.get(req.broker_name)
    if facts is None:     # the master changed meanwhile
        return res, f"broker {req.broker_id} is no longer the master of {req.broker_name}"
    target = drain_target(facts)
    if isinstance(target, str):
        return res, target
    node.drains.once()
    return res, f"draining: the master role of {req.broker_name} moves from broker {req.broker_id} to broker {target}"


async def set_zone_preference(node: ServedNode, request: pb.SetZonePreferenceRequest) -> pb.SetZonePreferenceReply:
    if len(request.zones) > MAX_ZONES:
        raise BadRequest(f"at most {MAX_ZONES} zones")
    req = checked(m.SetZonePreferenceRequest(broker_name=request.broker_name,
                                             zones=tuple(check_field(z, m.Name, "zone") for z in request.zones)))
    if not node.is_leader:
        raise node.proposer.not_leader()
    needs_operator_level(node, "a zone preference")
    res = await node.proposer.write(req)
    return pb.SetZonePreferenceReply(header=pb.ReplyHeader(code=int(res.code), message=res.remark),
                                     replica_info=replica_info_pb(res.replica))


async def set_controller_maintenance(node: ServedNode, node_id: str, on: bool) -> list[str]:
    """The members in maintenance afterwards. A leader put in maintenance hands leadership to the
    most caught-up voter outside it before it answers."""
    if not node.is_leader:
        raise node.proposer.not_leader()
    node.refuse_on_store("controller maintenance")
    needs_operator_level(node)
    voters = tuple(sorted(node.membership.voter_ids))
    if node_id not in voters and node_id not in node.membership.member_addrs():
        raise NodeReply(Code.CONTROLLER_INVALID_REQUEST, f"unknown controller {node_id[:64]!r}; voters: {list(voters)}")
    res = await node.proposer.write(m.SetControllerMaintenanceRequest(node_id=node_id, on=on, voters=voters))
    if res.code != Code.SUCCESS:
        raise NodeReply(res.code, res.remark)
    if on and node_id == node.node_id:
        await leave_leadership(node)
    return sorted(node.sm.controller_maintenance)


def leadership_successor(node: ServedNode) -> str | None:
    """The most caught-up other voter outside maintenance, or None."""
    match = node.metadata()["match"]
    skip = node.sm.controller_maintenance | {node.node_id}
    return max((v for v in node.membership.voter_ids if v not in skip), key=lambda v: (match.get(v, 0), v),
               default=None)


async def leave_leadership(node: ServedNode) -> None:
    """A leader in maintenance hands leadership to the most caught-up voter outside it."""
    if not node.is_leader or node.node_id not in node.sm.controller_maintenance:
        return
    to = leadership_successor(node)
    if to is None:
        node.log.warning("controller_maintenance_no_successor", node=node.node_id,
                         note="every other voter is in maintenance: this member keeps leading")
        return
    node.log.info("controller_maintenance_leave_leadership", node=node.node_id, to=to, term=node.term)
    try:
        await node.move_leader(to, None)
    except Exception as e:  # noqa: BLE001 - the leader's next scan tries again
        node.log.warning("controller_maintenance_leave_failed", node=node.node_id, to=to, error=repr(e)[:200])
