"""Typed errors of the HA layer; every one has a stable ``code``."""

from __future__ import annotations

from autoswitch.base.errors import AutoswitchError


class HAError(AutoswitchError):
    code = "HA_ERROR"


class FrameError(HAError):
    """Bytes on the HA port that do not form a valid frame. The connection must close."""

    code = "HA_FRAME_ERROR"

    def __init__(self, reason: str, message: str | None = None, **details) -> None:
        super().__init__(message or reason, reason=reason, **details)
        self.reason = reason


class HAProtocolError(HAError):
    """Valid frames in an invalid order or with values the session state forbids."""

    code = "HA_PROTOCOL_ERROR"

    def __init__(self, reason: str, message: str | None = None, **details) -> None:
        super().__init__(message or reason, reason=reason, **details)
        self.reason = reason


class OffsetMismatch(HAProtocolError):
    """batchStartOffset differs from the slave's max offset: disconnect and re-handshake."""

    code = "HA_OFFSET_MISMATCH"


class InSyncReplicasNotEnough(HAError):
    code = "IN_SYNC_REPLICAS_NOT_ENOUGH"


class FlushSlaveTimeout(HAError):
    """No ack in time; the message stays in the log and the producer may retry."""

    code = "FLUSH_SLAVE_TIMEOUT"


class HABusy(HAError):
    """Too many writes waiting for replicas (a limit, not a failure of replication)."""

    code = "HA_BUSY"


class SyncStateProposalRejected(HAError):
    code = "SYNC_STATE_PROPOSAL_REJECTED"
