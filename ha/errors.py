"""Typed errors of the HA layer; every one has a stable ``code``."""

from __future__ import annotations

from autoswitch.base.errors import AutoswitchError

# The write-path errors HA raises while a write waits for its replicas (InSyncReplicasNotEnough,
# FlushSlaveTimeout, Overloaded) are the write path's own, one set for ha/ and broker/:
# autoswitch/base/write_errors.py.
from autoswitch.base.write_errors import Overloaded


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


class RangeRepaired(HAError):
    """The slave cut its log at the master's repair: this connection ends and a fresh handshake
    fetches the range again (not a failure)."""

    code = "HA_RANGE_REPAIRED"


class HABusy(Overloaded):
    """Too many writes waiting for replicas (a limit, not a failure of replication)."""


class SyncStateProposalRejected(HAError):
    code = "SYNC_STATE_PROPOSAL_REJECTED"
