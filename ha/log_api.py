"""What the HA layer needs from a replica's log (docs/interfaces.md, store section).

`autoswitch.broker.storage.store.MessageStore` satisfies it; tests and the simulator may use an
in-memory implementation. Offsets are physical byte offsets (Python ints, never 32-bit).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from autoswitch.epochfile import EpochCache


class Divergence(Protocol):
    """broker/storage/divergence.py's record, as HA reads it."""

    @property
    def epoch(self) -> int: ...
    @property
    def start(self) -> int: ...
    @property
    def end(self) -> int: ...
    @property
    def cut(self) -> bool: ...


@runtime_checkable
class ReplicaLog(Protocol):
    @property
    def max_offset(self) -> int:
        """Next write position (maxPhyOffset)."""
        ...

    @property
    def min_offset(self) -> int:
        """First retained offset."""
        ...

    @property
    def epochs(self) -> EpochCache:
        """Read-only view; mutate only through append_raw/append_epoch/truncate/reset."""
        ...

    confirm_offset: int  # settable; never > max_offset

    @property
    def synced_offset(self) -> int:
        """Every byte below it is on disk (the last fsync covered it). An ack that promises
        durability (``sync_before_ack``) never counts past it: flush first."""
        ...

    def segment_base(self, offset: int) -> int:
        """Start offset of the segment holding `offset` (for isSyncFromLastFile); a record boundary.

        Added for HA: `segment_base(max_offset)` is where an empty slave that asked to sync from
        the master's last file starts. Must be >= min_offset and <= offset.
        """
        ...

    def fold_records(self, data: bytes | memoryview, pos: int, end: int, limit: int, h: int) -> tuple[int, int]:
        """Fold every whole record of ``data[pos:end]`` (as read_raw returns them) that starts
        before ``limit`` into the range digest ``h`` (ha/digest.py); returns (h, the position it
        stopped at). The record format is the log's, so the log folds: a record's digest word
        must change whenever its content does (the commit log uses its CRC and length)."""
        ...

    def read_raw(self, offset: int, max_bytes: int, limit: int | None = None) -> bytes:
        """Whole records from `offset`: at most max_bytes, never past `limit`, never crossing a
        segment end; b"" when nothing to read."""
        ...

    def append_raw(self, offset: int, data: bytes | memoryview, epoch: int, epoch_start: int) -> int:
        """Slave side: append whole records at offset == max_offset (an empty store restarts at
        `offset`); records (epoch, epoch_start) first when epoch is new. Returns the new max_offset."""
        ...

    def append_epoch(self, epoch: int, start_offset: int) -> None:
        """Persist a new (epoch, startOffset) entry before returning."""
        ...

    def truncate(self, offset: int, last_common_epoch: int | None = None) -> None:
        """Crash-safe cut of the log to `offset`, then the EpochFile."""
        ...

    def reset(self, start_offset: int) -> None:
        """Drop everything; empty log restarting at start_offset."""
        ...

    def flush(self) -> None:
        ...

    def sync_log(self) -> None:
        """fsync the log's bytes (``synced_offset`` reaches ``max_offset``): what an ack needs,
        cheaper than ``flush`` (which makes the log's indexes and recovery point durable too)."""
        ...

    def begin_log_sync(self) -> Any:
        """``sync_log`` split so its fdatasync runs on another thread: ``s.run()`` there, then
        ``finish_log_sync(s, error)`` here (``error``: what ``run`` raised, re-raised here). ``s``
        is the log's own (a LogSync: ``target``, ``run``), handed back to the log that made it."""
        ...

    def finish_log_sync(self, s: Any, error: BaseException | None) -> None:
        ...

    @property
    def divergence(self) -> Divergence | None:
        """A range of this log found to differ from the master's and not yet repaired and
        re-verified: durable (it survives a restart and a change of master)."""
        ...

    def mark_diverged(self, epoch: int, start: int, end: int, cut: bool = False) -> None:
        """Record (durably) that ``[start, end)`` of ``epoch`` differs from the master's;
        ``cut``: it was cut away and is being fetched again."""
        ...

    def clear_diverged(self, why: str) -> None:
        """The repair re-verified the range (or fetched it again past its end)."""
        ...
