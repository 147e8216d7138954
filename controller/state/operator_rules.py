"""The state machine's deciders of operator requests (pure, like statemachine.py's): preferred
masters, feature levels, maintenance of brokers and controller members, groups imported from
another controller."""

from __future__ import annotations

from autoswitch.controller.codes import Code
from autoswitch.controller.messages import (
    ControllerMaintenanceEvent,
    Event,
    FeatureLevelEvent,
    FinalizeFeaturesRequest,
    ImportGroupEvent,
    ImportGroupRequest,
    MaintenanceEvent,
    MemberLevelEvent,
    PreferredMasterEvent,
    RecordMemberLevelRequest,
    SetControllerMaintenanceRequest,
    SetMaintenanceRequest,
    SetPreferredMasterRequest,
    SetZonePreferenceRequest,
    ZonePreferenceEvent,
)
from autoswitch.controller.state.outcome import Outcome, reject
from autoswitch.controller.state.sm_state import MAX_GROUPS, ControllerState

from autoswitch.base.features import OPERATOR_LEVEL, SAFETY_LEVEL
from autoswitch.base.limits import MAX_CONTROLLERS


def set_preferred_master(req: SetPreferredMasterRequest, state: ControllerState) -> tuple[list[Event], Outcome]:
    g = state.groups.get(req.broker_name)
    if g is None:
        return reject(Code.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED, f"broker-set {req.broker_name} is not registered")
    if req.broker_id and req.broker_id not in g.brokers:
        return reject(Code.CONTROLLER_INVALID_REQUEST,
                       f"brokerId {req.broker_id} is not registered in {req.broker_name}", req.broker_name)
    if req.broker_id == g.preferred_master:
        return [], Outcome(group=req.broker_name, remark="unchanged")
    return [PreferredMasterEvent(req.broker_name, req.broker_id)], Outcome(group=req.broker_name)


def finalize_features(req: FinalizeFeaturesRequest, state: ControllerState) -> tuple[list[Event], Outcome]:
    # The brokers' levels and a live answer from every member were the proposing leader's check
    # (plan_finalize); here what every member decides alike from the state, at the moment the entry
    # commits: every voter the leader named has a recorded level that supports the target (a
    # member rolled back after the leader asked it, once its record says so, is caught here), and
    # a bootstrap applies only to a new cluster's pristine state.
    if req.bootstrap and not state.pristine():
        return [], Outcome(remark="not a new cluster: the bootstrap level is not applied",
                           data={"level": state.feature_level})
    if req.level == state.feature_level:
        return [], Outcome(remark="unchanged", data={"level": state.feature_level})
    if req.level > state.feature_level:
        behind = {v: state.member_levels.get(v, 0) for v in req.voters if state.member_levels.get(v, 0) < req.level}
        if behind:
            who = ", ".join(f"{v} ({'no level recorded' if lvl == 0 else f'supports {lvl}'})"
                            for v, lvl in sorted(behind.items()))
            return reject(Code.CONTROLLER_FEATURE_REFUSED,
                          f"feature level {req.level} refused when it was to commit: not every voter supports it: {who}")
    return [FeatureLevelEvent("", req.level, state.feature_level)], Outcome(data={"level": req.level})


def record_member_level(req: RecordMemberLevelRequest, state: ControllerState) -> tuple[list[Event], Outcome]:
    if state.member_levels.get(req.node_id, 0) == req.level:
        return [], Outcome(remark="unchanged", data={"level": req.level})
    if req.level and req.node_id not in state.member_levels and len(state.member_levels) >= 4 * MAX_CONTROLLERS:
        return reject(Code.CONTROLLER_INVALID_REQUEST, f"too many controller members recorded (limit "
                                                       f"{4 * MAX_CONTROLLERS}): forget departed ones first")
    return [MemberLevelEvent("", req.node_id, req.level)], Outcome(data={"level": req.level})


def needs_level(state: ControllerState, level: int, what: str) -> tuple[list[Event], Outcome] | None:
    if state.feature_level >= level:
        return None
    return reject(Code.CONTROLLER_FEATURE_UNSUPPORTED,
                   f"{what} needs feature level {level}; the cluster is finalized at {state.feature_level}: run "
                   f"`autoswitch admin finalize-features --level {level}` once every member runs a release that "
                   f"supports it (docs/compatibility.md)")


def set_maintenance(req: SetMaintenanceRequest, state: ControllerState) -> tuple[list[Event], Outcome]:
    refused = needs_level(state, OPERATOR_LEVEL, "maintenance")
    if refused is not None:
        return refused
    g = state.groups.get(req.broker_name)
    if g is None:
        return reject(Code.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED, f"broker-set {req.broker_name} is not registered")
    if req.broker_id not in g.brokers:
        return reject(Code.CONTROLLER_INVALID_REQUEST,
                       f"brokerId {req.broker_id} is not registered in {req.broker_name}", req.broker_name)
    if (req.broker_id in g.maintenance) == req.on:
        return [], Outcome(group=req.broker_name, remark="unchanged")
    return [MaintenanceEvent(req.broker_name, req.broker_id, req.on)], Outcome(group=req.broker_name)


def set_controller_maintenance(req: SetControllerMaintenanceRequest,
                                state: ControllerState) -> tuple[list[Event], Outcome]:
    refused = needs_level(state, OPERATOR_LEVEL, "maintenance")
    if refused is not None:
        return refused
    current = state.controller_maintenance
    if (req.node_id in current) == req.on:
        return [], Outcome(remark="unchanged", data={"maintenance": sorted(current)})
    after = current | {req.node_id} if req.on else current - {req.node_id}
    if req.on and req.voters and set(req.voters) <= after:
        return reject(Code.CONTROLLER_INVALID_REQUEST,
                       f"controller {req.node_id} is the last voter outside maintenance: one must stay able to "
                       f"campaign when the leader dies")
    return [ControllerMaintenanceEvent("", req.node_id, req.on)], Outcome(data={"maintenance": sorted(after)})


def set_zone_preference(req: SetZonePreferenceRequest, state: ControllerState) -> tuple[list[Event], Outcome]:
    refused = needs_level(state, OPERATOR_LEVEL, "zone preference")
    if refused is not None:
        return refused
    g = state.groups.get(req.broker_name)
    if g is None:
        return reject(Code.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED, f"broker-set {req.broker_name} is not registered")
    if req.zones == g.zone_preference:
        return [], Outcome(group=req.broker_name, remark="unchanged")
    return [ZonePreferenceEvent(req.broker_name, req.zones)], Outcome(group=req.broker_name)


def import_group(req: ImportGroupRequest, state: ControllerState) -> tuple[list[Event], Outcome]:
    """A group as another controller holds it, taken over as it is: its running brokers keep
    their ids, their roles and their MasterEpoch, so none of them changes role or truncates.
    Only into a group these controllers do not know (a group they know has its own history, and
    merging two histories has no safe meaning); the very same import again changes nothing."""
    refused = needs_level(state, SAFETY_LEVEL, "importing a group")
    if refused is not None:
        return refused
    name = req.broker_name
    g = state.groups.get(name)
    if g is not None:
        same = (g.cluster_name == req.cluster_name and g.master_epoch == req.master_epoch
                and g.sync_state_set_epoch == req.sync_state_set_epoch
                and g.master_broker_id == (req.master_broker_id or None)
                and g.sync_state_set == frozenset(req.sync_state_set)
                and {b: r.address for b, r in g.brokers.items()} == dict(req.brokers))
        if same:
            return [], Outcome(group=name, remark="already imported")
        return reject(Code.CONTROLLER_INVALID_REQUEST,
                      f"broker-set {name} is known here already (MasterEpoch {g.master_epoch}, brokers "
                      f"{sorted(g.brokers)}): import only into a group these controllers do not know "
                      f"(`clean-broker-metadata` removes it)", name)
    tomb = state.tombstones.get(name)
    if tomb is not None and (req.master_epoch < tomb.master_epoch
                             or req.sync_state_set_epoch < tomb.sync_state_set_epoch):
        return reject(Code.CONTROLLER_INVALID_REQUEST,
                      f"broker-set {name} was removed here at MasterEpoch {tomb.master_epoch}, syncStateSetEpoch "
                      f"{tomb.sync_state_set_epoch}: an import below them would take its epochs backwards")
    if len(state.groups) >= MAX_GROUPS:
        return reject(Code.CONTROLLER_INVALID_REQUEST, f"too many broker groups (limit {MAX_GROUPS})")
    ev = ImportGroupEvent(name, req.cluster_name, tuple(sorted(req.brokers)), req.master_broker_id or None,
                          req.master_epoch, tuple(sorted(req.sync_state_set)), req.sync_state_set_epoch,
                          req.source, req.ts_ms)
    return [ev], Outcome(group=name)
