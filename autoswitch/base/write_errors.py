"""Why a write was not acknowledged: one set of errors for the whole write path. HA raises some of
them while a write waits for its replicas, the broker raises the rest; the broker's service maps
each ``code`` to a produce status. Nothing is matched by class name."""

from __future__ import annotations

from autoswitch.base.errors import AutoswitchError


class WriteError(AutoswitchError):
    code = "WRITE_ERROR"


class NotMaster(WriteError):
    code = "NOT_MASTER"


class Fenced(WriteError):
    code = "FENCED"


class MessageTooLarge(WriteError):
    code = "MESSAGE_TOO_LARGE"


class BadRequest(WriteError):
    code = "BAD_REQUEST"


class StaleEpoch(WriteError):
    code = "STALE_EPOCH"


class InSyncReplicasNotEnough(WriteError):
    code = "IN_SYNC_REPLICAS_NOT_ENOUGH"


class FlushSlaveTimeout(WriteError):
    """No ack in time; the message stays in the log and the producer may retry."""

    code = "FLUSH_SLAVE_TIMEOUT"


class Overloaded(WriteError):
    """A limit, not a failure (too many writes waiting for replicas, too many requests)."""

    code = "OVERLOADED"


class StorageFull(WriteError):
    """The disk holding the log is full (ENOSPC/EDQUOT): nothing was acknowledged; retry once
    space is freed (retention, a bigger disk)."""

    code = "STORAGE_FULL"


class NotAllowed(WriteError):
    """A well-formed request this broker refuses in its mode (roles belong to the controller)."""

    code = "NOT_ALLOWED"
