"""The event history record: one JSON line per applied event, on every node, in log order (the
format events.jsonl, the metrics, the status page, the alerts and the pipeline read)."""

from __future__ import annotations

from typing import Any

from autoswitch.controller.messages import (
    AdminAuditEvent,
    AlterSyncStateSetEvent,
    ApplyBrokerIdEvent,
    CleanBrokerDataEvent,
    ElectMasterEvent,
    EligibleChangeEvent,
    Event,
    PreferredMasterEvent,
    UpdateBrokerAddressEvent,
    UpdateConfigEvent,
    event_name,
)
from autoswitch.controller.sm_state import ControllerState, GroupState


def event_history_record(event: Event, index: int, ts_ms: int,
                         state: ControllerState | GroupState | None) -> dict[str, Any]:
    """One JSON-lines record per applied event (the format the pipeline reads).

    ``state`` is the state right after the event (a ControllerState or the group itself).
    """
    g = state.groups.get(event.broker_name) if isinstance(state, ControllerState) else state
    reason = ""
    if isinstance(event, ElectMasterEvent | AlterSyncStateSetEvent | EligibleChangeEvent):
        reason = event.reason
    elif isinstance(event, UpdateConfigEvent):
        reason = ",".join(f"{k}={v}" for k, v in event.changes)
    elif isinstance(event, CleanBrokerDataEvent):
        reason = "ids=" + ",".join(map(str, event.broker_ids)) if event.broker_ids else "whole_group"
    elif isinstance(event, UpdateBrokerAddressEvent):
        reason = f"address_changed:{event.broker_id}"
    elif isinstance(event, ApplyBrokerIdEvent):
        reason = f"broker_id_applied:{event.broker_id}"
    elif isinstance(event, PreferredMasterEvent):
        reason = f"preferred_master:{event.broker_id}"
    elif isinstance(event, AdminAuditEvent):
        reason = f"{event.action} code={event.code} {event.detail}" + (f" ({event.remark})" if event.remark else "")
    rec = {
        "ts_ms": ts_ms,
        "index": index,
        "group": event.broker_name,
        "event": event_name(event),
        "master_broker_id": g.master_broker_id if g is not None else None,
        "master_epoch": g.master_epoch if g is not None else 0,
        "sync_state_set": sorted(g.sync_state_set) if g is not None else [],
        "sync_state_set_epoch": g.sync_state_set_epoch if g is not None else 0,
        "reason": reason,
        "unclean": isinstance(event, ElectMasterEvent) and event.unclean,
    }
    if isinstance(event, AdminAuditEvent):
        rec["actor"] = event.actor
    return rec
