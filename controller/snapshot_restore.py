"""Controller disaster recovery, etcd-style: `autoswitch admin snapshot-save` fetches the leader's
state-machine snapshot into a file; `autoswitch restore-member --snapshot FILE` turns an EMPTY
data dir into a member of a NEW controller cluster whose history starts at that snapshot.

Every member of the new cluster is restored from the same file, with the same ``--peers`` and a
new ``cluster_token`` (docs/operations-controller.md "Disaster recovery"): the old members, if
any survive, cannot talk to it (the cluster id differs), and the new members agree on the
snapshot as their common log prefix (index = the snapshot's applied index, term 1). The
broker-facing state (groups, brokerIds, masters, MasterEpochs, SyncStateSets, config) is exactly
the snapshot's; what happened after the snapshot was taken is lost, so brokers that moved on
(a newer MasterEpoch) are fenced by their own epoch checks until an election catches up.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from pathlib import Path

from autoswitch.controller.config import ControllerConfig
from autoswitch.controller.raft.messages import HardState, Snapshot
from autoswitch.controller.raft.storage import FileStorage
from autoswitch.controller.state.sm_snapshot import decode_snapshot
from autoswitch.controller.state.sm_state import SnapshotCorrupt

from autoswitch.base import features
from autoswitch.base.errors import AutoswitchError
from autoswitch.base.fsutil import fsync_dir, write_atomic
from autoswitch.base.log import get_logger

_log = get_logger("controller.restore")

# The term the restored log starts in; elections of the new cluster go on from there.
RESTORED_TERM = 1
MAX_SNAPSHOT_FILE_BYTES = 1 << 30


class RestoreRefused(AutoswitchError):
    code = "RESTORE_REFUSED"


@dataclass
class RestoreResult:
    node_id: str
    index: int
    groups: int


def save_snapshot_file(path: Path, data: bytes, force: bool = False) -> tuple[int, int]:
    """Check (magic, version, CRC, content) and write atomically with fsync: (index, groups).

    An existing file is never replaced unless ``force`` (run as root, ``--out /etc/...`` replaced a
    system file before), and never anything but a regular file; the snapshot is written 0600 (it
    holds every broker's address and the cluster's config)."""
    try:
        state, index = decode_snapshot(data)
    except SnapshotCorrupt as e:
        raise RestoreRefused(f"the controller sent a snapshot that does not decode: {e}") from None
    if path.is_symlink() or (path.exists() and not path.is_file()):
        raise RestoreRefused(f"{path} exists and is not a regular file: give another --out", path=str(path))
    if path.exists() and not force:
        raise RestoreRefused(f"{path} exists: give a new file, or --force to replace it", path=str(path))
    write_atomic(path, data, mode=0o600)
    return index, len(state.groups)


def snapshot_status(path: Path) -> dict:
    """etcdctl's `snapshot status`: what a snapshot file holds, read offline (nothing is started):
    its checksum verified on decode, the applied index it covers, the groups, brokers and masters,
    the feature level and the controller members it knows. RestoreRefused when it is not one."""
    try:
        size = path.stat().st_size
    except OSError as e:
        raise RestoreRefused(f"cannot read {path}: {e.strerror}", path=str(path)) from None
    if size > MAX_SNAPSHOT_FILE_BYTES:
        raise RestoreRefused(f"{path} is {size} bytes, more than a snapshot can be ({MAX_SNAPSHOT_FILE_BYTES})",
                             path=str(path))
    data = path.read_bytes()
    try:
        state, index = decode_snapshot(data)
    except SnapshotCorrupt as e:
        raise RestoreRefused(f"{path} is not a controller snapshot: {e}", path=str(path)) from None
    groups = state.groups.values()
    return {"file": str(path), "bytes": size, "crc32": f"{zlib.crc32(data) & 0xFFFFFFFF:08x}",
            "applied_index": index, "groups": len(state.groups),
            "brokers": sum(len(g.brokers) for g in groups),
            "groups_with_master": sum(1 for g in groups if g.master_broker_id is not None),
            "highest_master_epoch": max((g.master_epoch for g in groups), default=0),
            "feature_level": state.feature_level, "members": dict(sorted(state.member_levels.items())),
            "controllers_in_maintenance": sorted(state.controller_maintenance)}


def restore_member(cfg: ControllerConfig, snapshot_file: Path) -> RestoreResult:
    data_dir = Path(cfg.data_dir)
    raft_dir = data_dir / "raft"
    busy = [p.name for p in (raft_dir, data_dir / "events.jsonl", data_dir / "cluster_id")
            if p.exists() and (not p.is_dir() or any(p.iterdir()))]
    if busy:
        raise RestoreRefused(f"{data_dir} is not empty ({', '.join(busy)}): restore only into a new data dir",
                             path=str(data_dir))
    try:
        size = snapshot_file.stat().st_size
    except OSError as e:
        raise RestoreRefused(f"cannot read {snapshot_file}: {e.strerror}", path=str(snapshot_file)) from None
    if size > MAX_SNAPSHOT_FILE_BYTES:
        raise RestoreRefused(f"{snapshot_file} is {size} bytes, more than {MAX_SNAPSHOT_FILE_BYTES}")
    data = snapshot_file.read_bytes()
    try:
        state, index = decode_snapshot(data)       # magic, version, CRC, content: never a partial state
    except SnapshotCorrupt as e:
        raise RestoreRefused(f"{snapshot_file}: {e}", path=str(snapshot_file)) from None
    if index < 1:
        raise RestoreRefused(f"{snapshot_file} holds no applied entry (index {index})")
    why = features.unsupported(state.feature_level)
    if why is not None:
        raise RestoreRefused(f"{snapshot_file}: {why}", path=str(snapshot_file))
    data_dir.mkdir(parents=True, exist_ok=True)
    st = FileStorage(raft_dir)
    try:
        st.load()
        st.install_snapshot(Snapshot(index, RESTORED_TERM, data))
        st.save(HardState(term=RESTORED_TERM, vote=None, commit=index), [])
    finally:
        st.close()
    fsync_dir(data_dir)
    _log.info("controller_member_restored", node=cfg.node_id, index=index, groups=len(state.groups),
              snapshot=str(snapshot_file))
    return RestoreResult(cfg.node_id, index, len(state.groups))
