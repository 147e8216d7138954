"""The in-memory epoch cache: ordered ``<MasterEpoch, startOffset>`` entries.

Pure (no I/O). Entries are ordered by epoch; starts never decrease. An epoch in
which the master wrote nothing has the same start as the next entry and is kept
on purpose: RocketMQ drops it and then cannot match "same master, new epoch"
(#9689). End offsets are derived: an entry ends where the next one starts, the
last one at the log's max offset (passed in, because the log owns it).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from autoswitch.epochfile.errors import EpochRuleError
from sortedcontainers import SortedKeyList

# A broker group never sees anywhere near this many terms; a bigger file is garbage.
MAX_ENTRIES = 1_000_000
MAX_EPOCH = (1 << 31) - 1  # the HA wire carries epochs as i32
MAX_OFFSET = (1 << 63) - 1  # the HA wire carries offsets as i64


@dataclass(frozen=True, order=True)
class EpochEntry:
    epoch: int  # MasterEpoch, > 0
    start_offset: int  # first offset written in this epoch, >= 0


def _epoch_key(e: EpochEntry) -> int:
    return e.epoch


class EpochCache:
    __slots__ = ("_entries",)

    def __init__(self, entries: Iterable[EpochEntry] = ()) -> None:
        self._entries: SortedKeyList = SortedKeyList(key=_epoch_key)
        for e in entries:
            self.append(e.epoch, e.start_offset)

    # --- queries -------------------------------------------------------------------
    def entries(self) -> list[EpochEntry]:
        return list(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, EpochCache) and list(self._entries) == list(other._entries)

    def __repr__(self) -> str:
        return "EpochCache(" + ", ".join(f"({e.epoch},{e.start_offset})" for e in self._entries) + ")"

    def first(self) -> EpochEntry | None:
        return self._entries[0] if self._entries else None

    def last(self) -> EpochEntry | None:
        return self._entries[-1] if self._entries else None

    def find_by_epoch(self, epoch: int) -> EpochEntry | None:
        i = self._entries.bisect_key_left(epoch)
        if i < len(self._entries) and self._entries[i].epoch == epoch:
            found: EpochEntry = self._entries[i]
            return found
        return None

    def find_by_offset(self, offset: int, max_offset: int) -> EpochEntry | None:
        """The entry whose ``[start, end)`` holds ``offset``; None outside the log.

        Among entries with equal starts only the newest can be non-empty, so the
        answer is the last entry whose start is <= offset.
        """
        n = len(self._entries)
        if n == 0 or offset >= max_offset or offset < self._entries[0].start_offset:
            return None
        lo, hi = 0, n  # first index with start > offset (starts are non-decreasing)
        while lo < hi:
            mid = (lo + hi) // 2
            if self._entries[mid].start_offset <= offset:
                lo = mid + 1
            else:
                hi = mid
        entry: EpochEntry = self._entries[lo - 1]
        return entry

    def end_offset(self, epoch: int, max_offset: int) -> int:
        i = self._entries.bisect_key_left(epoch)
        if i >= len(self._entries) or self._entries[i].epoch != epoch:
            raise EpochRuleError(f"epoch {epoch} not in cache", epoch=epoch)
        if i + 1 < len(self._entries):
            start: int = self._entries[i + 1].start_offset
            return start
        return max_offset

    # --- mutations -----------------------------------------------------------------
    def append(self, epoch: int, start_offset: int) -> None:
        if not (0 < epoch <= MAX_EPOCH):
            raise EpochRuleError(f"epoch {epoch} out of range", epoch=epoch)
        if not (0 <= start_offset <= MAX_OFFSET):
            raise EpochRuleError(f"start offset {start_offset} out of range", start_offset=start_offset)
        if len(self._entries) >= MAX_ENTRIES:
            raise EpochRuleError("epoch cache full", limit=MAX_ENTRIES)
        last = self.last()
        if last is not None:
            if epoch <= last.epoch:
                raise EpochRuleError(
                    f"epoch {epoch} not above last epoch {last.epoch}", epoch=epoch, last_epoch=last.epoch
                )
            if start_offset < last.start_offset:
                raise EpochRuleError(
                    f"start {start_offset} below last start {last.start_offset}",
                    start_offset=start_offset,
                    last_start=last.start_offset,
                )
        self._entries.add(EpochEntry(epoch, start_offset))

    def truncate_suffix_from_offset(self, offset: int) -> None:
        """Drop entries starting past ``offset`` (an entry starting exactly at it stays:
        it is an epoch whose master has written nothing yet below the cut)."""
        while self._entries and self._entries[-1].start_offset > offset:
            self._entries.pop()

    def truncate_suffix_after_epoch(self, epoch: int) -> None:
        while self._entries and self._entries[-1].epoch > epoch:
            self._entries.pop()

    def truncate_prefix(self, offset: int) -> None:
        """Retention: entries wholly below ``offset`` (start < offset and end <= offset) go;
        the one holding it starts there.

        An entry starting exactly at ``offset`` stays even when it is empty: it is a
        zero-message epoch at the retained start, and dropping it would make this cache
        differ from a replica's that never lost it. The last entry always stays (its end
        is the log's max offset), so the cache never empties because of retention.
        """
        while (
            len(self._entries) > 1
            and self._entries[1].start_offset <= offset
            and self._entries[0].start_offset < offset
        ):
            self._entries.pop(0)
        if self._entries and self._entries[0].start_offset < offset:
            e = self._entries.pop(0)
            self._entries.add(EpochEntry(e.epoch, offset))

    def copy(self) -> EpochCache:
        c = EpochCache()
        c._entries.update(self._entries)
        return c
