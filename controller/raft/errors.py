"""Raft's own typed errors (storage, configuration); the errors every consensus layer raises,
NotLeader and the rest, are controller/consensus/errors.py."""

from __future__ import annotations

from autoswitch.base.errors import ConfigError, CorruptionError


class RaftStorageCorrupt(CorruptionError):
    """A Raft log segment, hard-state or snapshot file fails its CRC/structure check."""

    code = "RAFT_STORAGE_CORRUPT"

    def __init__(self, message: str, path: str | None = None, offset: int | None = None) -> None:
        super().__init__(message, path=path, offset=offset)
        self.path = path
        self.offset = offset


class RaftConfigError(ConfigError):
    code = "RAFT_CONFIG_ERROR"
