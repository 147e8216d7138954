"""Range digests: replicas prove online that they hold the same bytes (sans-IO).

A *range* is a run of whole records of one epoch, about ``digest_range_bytes`` long; its
*digest* is a 64-bit fold over each record's digest word, which the log supplies
(``ReplicaLog.fold_records``: the commit log's CRC32 and length, so a record with any other byte
has another word). The master cuts its log into ranges as it reads it (``RangeBook``): at the
size, at every epoch boundary, and when a range has stayed open ``flush_after_s`` while the log
stands still, so the tail is covered too. The cut is the master's alone; a slave compares
exactly the ranges it is sent (``RangeChecker``), reading them back from its own disk through
``read_raw``, whose CRC check finds a flipped bit and whose chain finds a record of another
length. Which ranges mismatch, and what the master does about it, is docs/replication.md
("Digests and quarantine").
"""

from __future__ import annotations

import collections
from typing import NamedTuple

from autoswitch.ha.errors import HAProtocolError
from autoswitch.ha.log_api import ReplicaLog

from autoswitch.base.errors import AutoswitchError

SEED = 0xCBF29CE484222325     # the fold's start value (FNV-1a offset basis)
U64_MAX = (1 << 64) - 1

# Verdicts of a slave's report (codec.DigestReport.verdict)
VERIFIED = 0
MISMATCH = 1


class RangeDigest(NamedTuple):
    epoch: int
    start: int
    end: int
    digest: int


def check_range(r: RangeDigest) -> None:
    """The structural rules of a range anyone sends (frames are checked with it)."""
    if r.epoch <= 0 or not 0 <= r.start < r.end or not 0 <= r.digest <= U64_MAX:
        raise HAProtocolError("bad_digest_range", f"range {r.epoch}:[{r.start},{r.end}) is not a range")


class RangeBook:
    """The master's digests: folds the log in order into ranges and keeps the last ``history``.

    Fed by the bytes a transfer just read (``feed``: free when the read is at the cursor) and,
    when no connection reads there, by ``tick`` reading the log itself within a budget.
    Every completed range gets a sequence number, so each connection sends what it has not sent.
    """

    def __init__(self, log: ReplicaLog, range_bytes: int, history: int, flush_after_s: float, now: float,
                 start: int | None = None) -> None:
        """``start``: a record boundary to cut from (default: about ``history`` ranges below the end)."""
        self.log = log
        self.range_bytes = range_bytes
        self.flush_after_s = flush_after_s
        self.history: collections.deque[tuple[int, RangeDigest]] = collections.deque(maxlen=history)
        self.seq = 0
        self.cursor = self._start_offset(history) if start is None else start
        self._open: tuple[int, int, int] | None = None    # epoch, start, running digest
        self._open_since = now

    def _start_offset(self, history: int) -> int:
        """A record boundary about ``history`` ranges below the end: the last segment start or
        epoch start at or below it (both are record boundaries)."""
        log = self.log
        target = max(log.min_offset, log.max_offset - history * self.range_bytes)
        start = log.segment_base(target)
        for e in log.epochs.entries():
            if start < e.start_offset <= target:
                start = e.start_offset
        return max(start, log.min_offset)

    def since(self, seq: int, limit: int) -> list[tuple[int, RangeDigest]]:
        """Up to ``limit`` kept ranges numbered above ``seq``, oldest first."""
        out = [x for x in self.history if x[0] > seq]
        return out[:limit]

    def find(self, start: int) -> RangeDigest | None:
        for _, r in self.history:
            if r.start == start:
                return r
        return None

    def feed(self, offset: int, data: bytes | memoryview, epoch: int, now: float) -> int:
        """Whole records of ``epoch`` read at ``offset``; used only when ``offset`` is the cursor.
        Returns how many ranges completed."""
        if offset != self.cursor or not data:
            return 0
        before = self.seq
        n, pos, size = len(data), 0, self.range_bytes
        while pos < n:
            at = offset + pos
            o = self._open
            if o is not None and (o[0] != epoch or at >= o[1] + size):
                self._close(at)
                o = None
            if o is None:
                o = (epoch, at, SEED)
                self._open_since = now
            h, stop = self.log.fold_records(data, pos, n, o[1] + size - offset, o[2])
            if stop == pos:
                # A read_raw result is whole records: a chain that does not fold is a log bug.
                raise HAProtocolError("digest_chain_broken", f"no whole record at {at} to fold")
            self._open = (o[0], o[1], h)
            pos = stop
        self.cursor = offset + n
        return self.seq - before

    def _close(self, end: int) -> None:
        o = self._open
        assert o is not None
        self._open = None
        if end > o[1]:
            self.seq += 1
            self.history.append((self.seq, RangeDigest(o[0], o[1], end, o[2])))

    def read_next(self, budget: int, chunk: int, end: int | None = None, now: float = 0.0) -> int:
        """Read and fold the log at the cursor (at most ``budget`` bytes, never past ``end``);
        returns the bytes read (0: nothing more to read there)."""
        log = self.log
        top = log.max_offset if end is None else min(end, log.max_offset)
        if budget <= 0 or self.cursor >= top:
            return 0
        entry = log.epochs.find_by_offset(self.cursor, log.max_offset)
        if entry is None:
            return 0
        limit = min(log.epochs.end_offset(entry.epoch, log.max_offset), top)
        data = log.read_raw(self.cursor, min(chunk, budget), limit)
        if not data:
            data = log.read_raw(self.cursor, max(chunk, limit - self.cursor), limit)   # one record larger than the chunk
        if data:
            self.feed(self.cursor, data, entry.epoch, now)
        return len(data)

    def close(self) -> None:
        """Close the open range where the cursor stands (the end of what was asked for)."""
        if self._open is not None:
            self._close(self.cursor)

    def tick(self, now: float, budget: int, chunk: int) -> int:
        """Catch up with the log (reading at most ``budget`` bytes) and close a range the log
        has left open for ``flush_after_s``. Returns how many ranges completed."""
        log = self.log
        before = self.seq
        if self.cursor < log.min_offset:
            # Retention removed the bytes under the cursor: start again at the first kept record.
            self._open = None
            self.cursor = log.min_offset
        top = log.max_offset
        while budget > 0 and (n := self.read_next(budget, chunk, now=now)) > 0:
            budget -= n
        if self._open is not None and self.cursor >= top and now - self._open_since >= self.flush_after_s:
            self._close(self.cursor)
        return self.seq - before


class RangeChecker:
    """The slave's side: the master's ranges (the newest ``keep``), verified against the local log."""

    def __init__(self, keep: int) -> None:
        self.keep = keep
        self.expected: dict[int, RangeDigest] = {}     # by start offset
        self.mismatch: RangeDigest | None = None       # reported; waiting for the master's repair

    def expect(self, ranges: list[RangeDigest]) -> None:
        for r in ranges:
            check_range(r)
            self.expected[r.start] = r
        if len(self.expected) > self.keep:
            for start in sorted(self.expected)[: len(self.expected) - self.keep]:
                del self.expected[start]

    def due(self, log: ReplicaLog, budget: int) -> list[RangeDigest]:
        """The ranges held locally to verify this round: newest first, within ``budget`` bytes."""
        if self.mismatch is not None:
            return []
        out: list[RangeDigest] = []
        lo, hi = log.min_offset, log.max_offset
        for start in sorted(self.expected, reverse=True):
            r = self.expected[start]
            if r.start < lo or r.end > hi:
                continue
            budget -= r.end - r.start
            if budget < 0 and out:
                break
            out.append(r)
        out.reverse()
        return out

    @staticmethod
    def verify(log: ReplicaLog, r: RangeDigest) -> tuple[str, str] | None:
        """None when the local bytes of ``r`` fold to its digest; else (reason, detail). Reads
        the whole range (one read per segment it spans: read_raw stops at a segment's end)."""
        entry = log.epochs.find_by_offset(r.start, log.max_offset)
        if entry is None or entry.epoch != r.epoch or log.epochs.end_offset(entry.epoch, log.max_offset) < r.end:
            return "epoch_differs", f"local epoch at {r.start} is {entry.epoch if entry else None}, master's {r.epoch}"
        h, at = SEED, r.start
        while at < r.end:
            try:
                data = log.read_raw(at, r.end - at, r.end)
            except AutoswitchError as e:      # the CRC check or the length chain of the read failed
                return "corrupt_record", f"{e.code}: {e.message}"
            if not data:
                return "record_boundary", f"no whole record at {at} ends by {r.end}"
            h, stop = log.fold_records(data, 0, len(data), len(data), h)
            if stop != len(data):
                return "record_boundary", f"records at {at} do not chain"
            at += len(data)
        if at != r.end:
            return "record_boundary", f"records end at {at}, the range at {r.end}"
        if h != r.digest:
            return "digest_differs", f"local digest {h:016x}, master's {r.digest:016x}"
        return None
