"""The event history record: one per applied event, on every node, in log order. One typed
record (``HistoryRecord``) from the state machine to events.jsonl (its JSON line), the metrics,
the status page, the alerts, the CLI and the pipeline (whose events schema is derived from it).

Fields in name order, so a line's keys come sorted as they always have; ``actor``, ``trigger``,
``crash`` and ``decision`` appear only where they say something (admin audits, elections,
SyncStateSet changes). ``decision`` is the typed decision record (controller/state/explain.py)
as JSON: the one `admin explain` shows, kept here so it outlives a restart and reaches the
pipeline's event table.
"""

from __future__ import annotations

import msgspec
from autoswitch.controller.messages import (
    AdminAuditEvent,
    AlterSyncStateSetEvent,
    ApplyBrokerIdEvent,
    CleanBrokerDataEvent,
    ControllerMaintenanceEvent,
    ElectMasterEvent,
    EligibleChangeEvent,
    Event,
    FeatureLevelEvent,
    ImportGroupEvent,
    MaintenanceEvent,
    MemberLevelEvent,
    PreferredMasterEvent,
    UpdateBrokerAddressEvent,
    UpdateConfigEvent,
    ZonePreferenceEvent,
    event_name,
)
from autoswitch.controller.state.sm_state import ControllerState, GroupState


class HistoryRecord(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    actor: str = ""                 # AdminAudit: who made the admin call
    crash: bool = False             # ElectMaster/NoMaster: the master was dead on crash evidence only
    decision: str = ""              # ElectMaster/NoMaster/AlterSyncStateSet: explain.Decision as JSON
    event: str                      # messages.event_name: ElectMaster, NoMaster, AlterSyncStateSet, ...
    group: str
    index: int                      # the Raft log index of the entry that caused it
    master_broker_id: int | None    # the group's state right after the event
    master_epoch: int
    reason: str
    sync_state_set: tuple[int, ...]
    sync_state_set_epoch: int
    trigger: str = ""               # ElectMaster/NoMaster: controller, broker, admin, handover, registration
    ts_ms: int                      # the proposing leader's wall clock
    unclean: bool


_ENCODER = msgspec.json.Encoder()
_DECODER = msgspec.json.Decoder(HistoryRecord)


def encode_record(rec: HistoryRecord) -> bytes:
    """The events.jsonl line of a record (without the newline)."""
    return _ENCODER.encode(rec)


def decode_record(line: bytes | str) -> HistoryRecord:
    """A line of events.jsonl as a record (msgspec.ValidationError / DecodeError on a bad one)."""
    return _DECODER.decode(line)


DECIDED_EVENTS = frozenset({"ElectMaster", "NoMaster", "AlterSyncStateSet"})


def event_history_record(event: Event, index: int, ts_ms: int,
                         state: ControllerState | GroupState | None, decision: str = "") -> HistoryRecord:
    """The record of one applied event; ``state`` is the state right after the event (a
    ControllerState or the group itself); ``decision``: the entry's decision record (JSON), kept
    on the events it decided."""
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
    elif isinstance(event, ImportGroupEvent):
        reason = (f"imported:brokers={','.join(f'{b}@{a}' for b, a in event.brokers)}"
                  + (f" from={event.source}" if event.source else ""))
    elif isinstance(event, FeatureLevelEvent):
        reason = f"feature_level:{event.previous}->{event.level}"
    elif isinstance(event, ZonePreferenceEvent):
        reason = "zone_preference:" + ",".join(event.zones)
    elif isinstance(event, MaintenanceEvent):
        reason = f"maintenance_{'on' if event.on else 'off'}:{event.broker_id}"
    elif isinstance(event, MemberLevelEvent):
        reason = f"member_level:{event.node_id}={event.level}"
    elif isinstance(event, ControllerMaintenanceEvent):
        reason = f"controller_maintenance_{'on' if event.on else 'off'}:{event.node_id}"
    elif isinstance(event, PreferredMasterEvent):
        reason = f"preferred_master:{event.broker_id}"
    elif isinstance(event, AdminAuditEvent):
        reason = f"{event.action} code={event.code} {event.detail}" + (f" ({event.remark})" if event.remark else "")
    elect = event if isinstance(event, ElectMasterEvent) else None
    return HistoryRecord(
        ts_ms=ts_ms, index=index, group=event.broker_name, event=event_name(event),
        master_broker_id=g.master_broker_id if g is not None else None,
        master_epoch=g.master_epoch if g is not None else 0,
        sync_state_set=tuple(sorted(g.sync_state_set)) if g is not None else (),
        sync_state_set_epoch=g.sync_state_set_epoch if g is not None else 0,
        reason=reason, unclean=elect is not None and elect.unclean,
        actor=event.actor if isinstance(event, AdminAuditEvent) else "",
        trigger=elect.trigger if elect is not None else "", crash=elect is not None and elect.crash,
        decision=decision if event_name(event) in DECIDED_EVENTS else "")
