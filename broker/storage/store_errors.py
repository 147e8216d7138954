"""Typed errors of the message store (commit log, consume index, checkpoint)."""

from __future__ import annotations

from autoswitch.base.errors import AutoswitchError, CorruptionError


class StoreError(AutoswitchError):
    code = "STORE_ERROR"


class OffsetMismatch(StoreError):
    """append_raw at an offset other than max_offset: nothing was written."""

    code = "STORE_OFFSET_MISMATCH"


class OffsetOutOfRange(StoreError):
    """A read below min_offset or past max_offset."""

    code = "STORE_OFFSET_OUT_OF_RANGE"


class BadMessage(StoreError):
    """A message the store refuses to encode (size limits, empty topic)."""

    code = "STORE_BAD_MESSAGE"


class BadBatch(StoreError):
    """A replicated batch that is well formed but does not fit (crosses a segment end,
    stale epoch, queue offsets out of sequence); nothing was written."""

    code = "STORE_BAD_BATCH"


class StoreClosed(StoreError):
    code = "STORE_CLOSED"


class LogCorrupt(CorruptionError):
    """Stored bytes fail their CRC/structure check where they must be whole."""

    code = "LOG_CORRUPT"

    def __init__(self, message: str, path: str | None = None, offset: int | None = None, **details) -> None:
        where = f" ({path} at offset {offset})" if path is not None else (
            f" (at offset {offset})" if offset is not None else ""
        )
        super().__init__(message + where, path=path, offset=offset, **details)
        self.path = path
        self.offset = offset
