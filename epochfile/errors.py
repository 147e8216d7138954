"""Typed errors of the EpochFile and its algorithms."""

from __future__ import annotations

from autoswitch.base.errors import AutoswitchError, CorruptionError


class EpochRuleError(AutoswitchError):
    """An append or lookup that would break the cache's ordering rules."""

    code = "EPOCH_RULE"


class NoConsistentPoint(AutoswitchError):
    """Slave and master share no epoch with the same start offset: never guess a point.

    ``reason`` is one of ``local_empty`` (the slave has no entries: sync from the
    master's first retained offset, or its last segment, after a reset),
    ``master_empty`` or ``diverged`` (no common epoch/start pair).
    """

    code = "NO_CONSISTENT_POINT"

    def __init__(self, message: str, reason: str = "diverged", **details: object) -> None:
        super().__init__(message, reason=reason, **details)
        self.reason = reason


class EpochFileCorrupt(CorruptionError):
    code = "EPOCH_FILE_CORRUPT"

    def __init__(self, message: str, path: str, **details: object) -> None:
        super().__init__(f"{message}: {path}", path=path, **details)
        self.path = path
