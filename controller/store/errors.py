"""Typed errors of the store backends."""

from __future__ import annotations

from autoswitch.base.errors import AutoswitchError, CorruptionError


class StoreError(AutoswitchError):
    code = "STORE_ERROR"


class Fenced(StoreError):
    """The write's term no longer holds the lock (another controller took it, or it expired by the
    store's clock): nothing of the write was committed."""

    code = "STORE_FENCED"


class StoreUnavailable(StoreError):
    """The store did not answer (connection, timeout, lock wait). For a write the outcome is
    unknown: the node re-reads the log before it writes again."""

    code = "STORE_UNAVAILABLE"


class StoreCorrupt(CorruptionError):
    """A log entry or snapshot in the store fails its CRC, or the log has a hole."""

    code = "STORE_CORRUPT"
