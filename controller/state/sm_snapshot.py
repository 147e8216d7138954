"""The controller state's snapshot codec: compact, versioned, CRC-checked (a snapshot is read
back from disk and received from peers, so every field is checked on decode)."""

from __future__ import annotations

import hashlib
import json
import struct
import zlib
from typing import Any

from autoswitch.controller.messages import (
    MAX_AUDIT_FIELD_LEN,
)
from autoswitch.controller.state.sm_config import ConfigValueError, SMConfig
from autoswitch.controller.state.sm_state import (
    BrokerRecord,
    ControllerState,
    GroupState,
    InvariantViolation,
    SnapshotCorrupt,
    Tombstone,
    check_state,
)

from autoswitch.base.errors import too_new
from autoswitch.base.features import BASELINE_LEVEL, MAX_LEVEL
from autoswitch.base.inflate import InflateTooLarge, inflate
from autoswitch.base.limits import MAX_CONTROLLERS

_SNAP_MAGIC = b"ASSM"
_SNAP_VERSION = 1
_SNAP_HEADER = struct.Struct(">4sHIQ")   # magic, version, crc32(payload), payload length
MAX_SNAPSHOT_BYTES = 1 << 30
# The state's JSON: MAX_GROUPS full groups take well under this (about 300 bytes a group)
MAX_SNAPSHOT_JSON_BYTES = 128 << 20


def _doc(state: ControllerState) -> dict[str, Any]:
    """The state as JSON-able positional tuples, in a fixed order (snapshots and state hashes)."""
    groups = []
    for name in sorted(state.groups):
        g = state.groups[name]
        groups.append([
            g.cluster_name, g.broker_name, g.created_ts_ms, g.next_assign_broker_id,
            g.master_broker_id if g.master_broker_id is not None else 0, g.master_epoch, g.sync_state_set_epoch,
            sorted(g.sync_state_set), sorted(g.eligible),
            [[b, r.address, r.register_check_code, *([r.ha_address] if r.ha_address or r.incarnation else []),
              *([r.incarnation] if r.incarnation else [])]
             for b, r in sorted(g.brokers.items())], g.base_master_epoch, g.retired_below, sorted(g.retired),
            *([g.preferred_master] if g.preferred_master or g.holder_replaced or g.maintenance
              or g.zone_preference or g.diverged else []),
            *([int(g.holder_replaced)] if g.holder_replaced or g.maintenance or g.zone_preference or g.diverged
              else []),
            *([sorted(g.maintenance)] if g.maintenance or g.zone_preference or g.diverged else []),
            *([list(g.zone_preference)] if g.zone_preference or g.diverged else []),
            *([sorted(g.diverged)] if g.diverged else []),
        ])
    tombs = [[n, t.master_epoch, t.sync_state_set_epoch, t.next_assign_broker_id]
             for n, t in sorted(state.tombstones.items())]
    doc: dict[str, Any] = {"config": state.config.snapshot_strings(), "groups": groups, "tombstones": tombs}
    if state.feature_level != BASELINE_LEVEL:
        doc["feature_level"] = state.feature_level
    if state.controller_maintenance:
        doc["controller_maintenance"] = sorted(state.controller_maintenance)
    if state.member_levels:
        doc["member_levels"] = dict(sorted(state.member_levels.items()))
    if state.last_outcome != (0, ""):
        doc["last_outcome"] = list(state.last_outcome)
    return doc


def encode_snapshot(state: ControllerState, last_applied_index: int) -> bytes:
    """Compact, versioned, CRC-checked: header + zlib(JSON with positional group tuples)."""
    doc = {"index": last_applied_index, **_doc(state)}
    payload = zlib.compress(json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode(), 1)
    return _SNAP_HEADER.pack(_SNAP_MAGIC, _SNAP_VERSION, zlib.crc32(payload), len(payload)) + payload


def state_hash(state: ControllerState) -> str:
    """SHA-256 (128 bits, hex) of the state's canonical JSON: equal on every member that applied
    the same entries (the online hash check compares it at one applied index, docs/controller.md)."""
    raw = json.dumps(_doc(state), separators=(",", ":"), ensure_ascii=False, sort_keys=True).encode()
    return hashlib.sha256(raw).hexdigest()[:32]


def _broker_record(row: list[Any]) -> BrokerRecord:
    """A snapshot broker row: [id, address, check code], with an HA address [..., ha address], with
    an incarnation [..., ha address, incarnation]."""
    if len(row) not in (3, 4, 5) or not all(isinstance(x, str) for x in row[1:]):
        raise ValueError(f"bad broker row {row[:5]!r}")
    return BrokerRecord(*row[1:])


def _int_list(v: Any, what: str) -> list[int]:
    if not isinstance(v, list) or not all(isinstance(x, int) and not isinstance(x, bool) for x in v):
        raise ValueError(f"bad {what} {v!r}")
    return v


def decode_snapshot(data: bytes) -> tuple[ControllerState, int]:
    """Inverse of encode_snapshot; SnapshotCorrupt on any damage (never a partial state)."""
    if len(data) < _SNAP_HEADER.size:
        raise SnapshotCorrupt("controller snapshot shorter than its header")
    magic, version, crc, length = _SNAP_HEADER.unpack_from(data)
    if magic != _SNAP_MAGIC:
        raise SnapshotCorrupt("controller snapshot has a bad magic")
    if version > _SNAP_VERSION and zlib.crc32(bytes(data[_SNAP_HEADER.size:])) == crc:
        raise too_new("controller snapshot", version, _SNAP_VERSION)
    if version != _SNAP_VERSION:
        raise SnapshotCorrupt(f"unsupported controller snapshot version {version}")
    payload = bytes(data[_SNAP_HEADER.size:])
    if length != len(payload) or length > MAX_SNAPSHOT_BYTES:
        raise SnapshotCorrupt(f"controller snapshot length {len(payload)} != header {length}")
    if zlib.crc32(payload) != crc:
        raise SnapshotCorrupt("controller snapshot CRC mismatch")
    # Decompressed in bounded steps (autoswitch/base/inflate.py): a zip bomb (a 1 MB snapshot of
    # zeros) made restore-member use 2.15 GB before; more than MAX_SNAPSHOT_JSON_BYTES of state is
    # corrupt, not a snapshot.
    try:
        raw = inflate(payload, MAX_SNAPSHOT_JSON_BYTES)
    except InflateTooLarge:
        raise SnapshotCorrupt(f"controller snapshot decompresses to more than {MAX_SNAPSHOT_JSON_BYTES} bytes") from None
    except zlib.error as e:
        raise SnapshotCorrupt(f"controller snapshot does not decompress: {e}") from None
    try:
        doc = json.loads(raw)
        state = ControllerState(SMConfig.from_strings(doc["config"]))
        for row in doc["groups"]:
            if len(row) == 10:   # written before baseMasterEpoch existed: 0 is the conservative value
                row = [*row, 0]
            if len(row) == 11:   # written before retired ids: every id below next was used (the old rule)
                row = [*row, row[3], []]
            if len(row) == 13:   # no preferred master (the column is only written when set)
                row = [*row, 0]
            if len(row) == 14:   # no replaced holder (written only when set)
                row = [*row, 0]
            if len(row) == 15:   # nobody in maintenance (written only when someone is)
                row = [*row, []]
            if len(row) == 16:   # no zone preference (written only when set)
                row = [*row, []]
            if len(row) == 17:   # no replica without an acknowledged copy (written only when one is)
                row = [*row, []]
            (cluster, name, created, nxt, master, mepoch, sepoch, sss, elig, brokers, base, below, retired, pref,
             replaced, maint, zones, diverged) = row
            if not isinstance(zones, list) or not all(isinstance(z, str) and z for z in zones):
                raise ValueError(f"bad zone preference {zones!r}")
            if not isinstance(pref, int) or isinstance(pref, bool) or pref < 0:
                raise ValueError(f"bad preferred master {pref!r}")
            if replaced not in (0, 1) or isinstance(replaced, bool):
                raise ValueError(f"bad holder_replaced {replaced!r}")
            g = GroupState(cluster, name, created, nxt, {int(r[0]): _broker_record(r) for r in brokers},
                           master or None, mepoch, frozenset(sss), sepoch, frozenset(elig), base, below,
                           frozenset(int(x) for x in retired), pref, bool(replaced),
                           frozenset(_int_list(maint, "maintenance")), tuple(zones),
                           frozenset(_int_list(diverged, "diverged")))
            state.groups[name] = g
        for n, me, se, nxt in doc["tombstones"]:
            state.tombstones[n] = Tombstone(me, se, nxt)
        code, remark = doc.get("last_outcome", (0, ""))
        if not isinstance(code, int) or isinstance(code, bool) or not isinstance(remark, str):
            raise ValueError("bad last_outcome")
        state.last_outcome = (code, remark[:MAX_AUDIT_FIELD_LEN])
        level = doc.get("feature_level", BASELINE_LEVEL)
        if not isinstance(level, int) or isinstance(level, bool) or not BASELINE_LEVEL <= level <= MAX_LEVEL:
            raise ValueError(f"bad feature_level {level!r}")
        state.feature_level = level
        cm = doc.get("controller_maintenance", [])
        if not isinstance(cm, list) or not all(isinstance(x, str) and x for x in cm):
            raise ValueError("bad controller_maintenance")
        state.controller_maintenance = frozenset(cm)
        ml = doc.get("member_levels", {})
        if not isinstance(ml, dict) or len(ml) > MAX_CONTROLLERS * 4 or not all(
                isinstance(k, str) and k and isinstance(v, int) and not isinstance(v, bool) and 1 <= v <= MAX_LEVEL
                for k, v in ml.items()):
            raise ValueError("bad member_levels")
        state.member_levels = dict(ml)
        index = doc["index"]
        if not isinstance(index, int) or index < 0:
            raise ValueError("bad index")
        check_state(state)
    except (ValueError, KeyError, TypeError, zlib.error, InvariantViolation, ConfigValueError) as e:
        raise SnapshotCorrupt(f"controller snapshot content is invalid: {e}") from None
    return state, index
