"""The segmented commit log: placement, raw reads/writes, cuts, and crash recovery.

Segment bases are multiples of ``segment_bytes`` on every replica, so a master's
segment-end padding lands on the slave's segment end too (replicas of a group must
share ``segment_bytes``). The log knows bytes and record boundaries only; topics
and queue offsets are the store's business.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from autoswitch.broker.storage import record as rec
from autoswitch.broker.storage.segment import (
    OsSegmentFiles,
    Segment,
    SegmentFile,
    SegmentFiles,
    parse_segment_name,
    segment_name,
)
from autoswitch.broker.storage.store_errors import LogCorrupt, OffsetOutOfRange

from autoswitch.base.errors import too_new
from autoswitch.base.log import get_logger

_log = get_logger("store.commitlog")


class LogSync:
    """One fsync of the commit log's dirty segments, runnable on any thread (``run``)."""

    __slots__ = ("target", "cuts", "files")

    def __init__(self, target: int, cuts: int, files: list[SegmentFile]) -> None:
        self.target = target
        self.cuts = cuts
        self.files = files      # duplicated handles: this sync's own

    def run(self) -> None:
        """fdatasync each duplicated handle (releases the GIL), then close them all; the first
        error is raised (``FsyncFailed``) after every handle is closed."""
        error: BaseException | None = None
        for f in self.files:
            if error is None:
                try:
                    f.sync(data_only=True)
                except BaseException as e:  # noqa: BLE001 - closed below, raised after
                    error = e
            f.close()
        self.files = []
        if error is not None:
            raise error


class CommitLog:
    def __init__(self, directory: Path, segment_bytes: int, max_record: int,
                 files: SegmentFiles | None = None) -> None:
        """``files``: where the segments live (default: ``directory`` on this host's file system)."""
        assert segment_bytes >= 2 * rec.HEADER_SIZE
        self.files: SegmentFiles = files if files is not None else OsSegmentFiles(directory)
        self.dir = self.files.path
        self.segment_bytes = segment_bytes
        self.max_record = max_record
        self.segments: list[Segment] = []
        self.min_offset = 0
        self.max_offset = 0
        # Every byte below it is on disk (the last fsync covered it): what an ack may count.
        self.synced_offset = 0
        self.cuts = 0       # truncations and resets so far: a sync begun before one covers nothing after it

    # --- placement ----------------------------------------------------------------
    def segment_base(self, offset: int) -> int:
        return offset - offset % self.segment_bytes

    def segment_end(self, offset: int) -> int:
        return self.segment_base(offset) + self.segment_bytes

    def _find(self, offset: int) -> Segment | None:
        if not self.segments:
            return None
        i = (self.segment_base(offset) - self.segments[0].base) // self.segment_bytes
        if 0 <= i < len(self.segments):
            seg = self.segments[i]
            assert seg.base <= offset < seg.end_limit
            return seg
        return None

    def _for_write(self, offset: int) -> Segment:
        seg = self._find(offset)
        if seg is None:
            base = self.segment_base(offset)
            assert not self.segments or base == self.segments[-1].end_limit, (base, self.segments[-1].base)
            seg = Segment(self.files, base, self.segment_bytes)
            self.segments.append(seg)
            self.files.sync()
        return seg

    # --- open ---------------------------------------------------------------------
    def open_files(self) -> None:
        """List segment files; the sequence must be gap-free (a hole is corruption)."""
        bases = []
        for name in self.files.names():
            b = parse_segment_name(name)
            if b is None:
                continue
            if b % self.segment_bytes:
                raise LogCorrupt(
                    f"segment base not a multiple of segment_bytes={self.segment_bytes} (changed config?)",
                    path=str(self.dir / name),
                )
            bases.append(b)
        bases.sort()
        for a, b in zip(bases, bases[1:], strict=False):
            if b != a + self.segment_bytes:
                raise LogCorrupt(f"missing segment between {a} and {b}", path=str(self.dir / segment_name(a)))
        self.segments = [Segment(self.files, b, self.segment_bytes) for b in bases]

    # --- writes -------------------------------------------------------------------
    def write(self, offset: int, data) -> None:
        """Append bytes that lie in one segment; the caller validated them."""
        assert offset == self.max_offset, (offset, self.max_offset)
        assert offset + len(data) <= self.segment_end(offset), "a write never crosses a segment end"
        self._for_write(offset).write(offset, data)
        self.max_offset = offset + len(data)

    def segment_for_write(self, offset: int, n: int) -> Segment:
        """Segment that will hold ``[offset, offset+n)`` written ahead of ``max_offset``
        (pipelined replication: the bytes land first, ``advance`` makes them part of the log)."""
        assert offset >= self.max_offset, (offset, self.max_offset)
        assert offset + n <= self.segment_end(offset), "a write never crosses a segment end"
        return self._for_write(offset)

    def advance(self, offset: int, n: int) -> None:
        """Bytes ``[offset, offset+n)`` were written with ``segment_for_write``: commit them."""
        assert offset == self.max_offset, (offset, self.max_offset)
        seg = self._find(offset)
        assert seg is not None, offset
        seg.dirty = True
        self.max_offset = offset + n

    def fsync(self) -> None:
        end = self.max_offset
        for seg in self.segments[-2:]:
            seg.fsync()
        for seg in self.segments[:-2]:
            if seg.dirty:
                seg.fsync()
        self.synced_offset = end

    def begin_sync(self) -> LogSync:
        """A group commit's fsync, to be run off the caller's thread (``LogSync.run``): the dirty
        segments are marked clean now (a write from here on dirties its segment again) and their
        handles duplicated, so a segment closed meanwhile (retention, a cut) never turns the
        sync into a failure or an fsync of another file. ``finish_sync`` makes it count."""
        files: list[SegmentFile] = []
        try:
            for seg in self.segments:
                if seg.dirty:
                    files.append(seg.duplicate())
                    seg.dirty = False
        except OSError:
            for f in files:
                f.close()
            for seg in self.segments:
                seg.dirty = True
            raise
        return LogSync(self.max_offset, self.cuts, files)

    def finish_sync(self, s: LogSync) -> None:
        """``s`` ran without an error: the bytes below its target are on disk, unless the log was
        cut since it began (then the bytes there may be new ones: they wait for the next sync)."""
        if s.cuts == self.cuts:
            self.synced_offset = max(self.synced_offset, min(s.target, self.max_offset))

    def abort_sync(self, s: LogSync) -> None:
        """``s`` did not run (or failed): its segments are dirty again."""
        for seg in self.segments:
            seg.dirty = True

    # --- reads --------------------------------------------------------------------
    def read_raw(self, offset: int, max_bytes: int, limit: int | None, verify: bool) -> bytes:
        if offset < self.min_offset or offset > self.max_offset:
            raise OffsetOutOfRange(
                f"offset {offset} outside [{self.min_offset}, {self.max_offset}]",
                offset=offset, min_offset=self.min_offset, max_offset=self.max_offset,
            )
        end = min(self.max_offset, self.segment_end(offset))
        if limit is not None:
            end = min(end, limit)
        if end <= offset:
            return b""
        seg = self._find(offset)
        assert seg is not None, offset
        n = min(max(max_bytes, 0), end - offset)
        buf = seg.read(offset, n) if n >= rec.HEADER_SIZE else b""
        pos = self._whole_records(buf, seg, offset, verify)
        if pos == 0:
            # The first record is bigger than max_bytes: serve it alone so replication
            # always makes progress (max_bytes caps batching, not one record).
            if end - offset < rec.HEADER_SIZE:
                raise LogCorrupt("record header cut by the log end", path=str(seg.path), offset=offset)
            total = rec.peek_total(seg.read(offset, rec.HEADER_SIZE), 0)
            if total < rec.HEADER_SIZE or total > rec.HARD_MAX_RECORD:
                raise LogCorrupt(f"bad record length {total}", path=str(seg.path), offset=offset)
            if offset + total > end:
                if offset + total <= min(self.max_offset, seg.end_limit):
                    # ends past the caller's limit: nothing to serve, if the record is really whole
                    why = rec.check_record(seg.read(offset, total), 0, total) if verify else None
                    if why is None:
                        return b""
                    raise LogCorrupt(f"invalid record on read: {why}", path=str(seg.path), offset=offset)
                raise LogCorrupt("record runs past the segment/log end", path=str(seg.path), offset=offset)
            buf = seg.read(offset, total)
            pos = self._whole_records(buf, seg, offset, verify)
            assert pos == total
        return buf if pos == len(buf) else buf[:pos]

    def _whole_records(self, buf: bytes, seg: Segment, offset: int, verify: bool) -> int:
        """Length of the whole-record prefix of ``buf``; CRC-checked when ``verify``."""
        n = len(buf)
        if verify:
            # one walk: it stops at the first record that is not whole and valid; if that
            # record merely continues past the buffer, the prefix before it is the answer
            end, why, _ = rec.walk_fast(buf, 0, n, seg.end_limit - offset, offset, self.max_record)
            if why is None or n - end < rec.HEADER_SIZE:
                return end
            total = rec.peek_total(buf, end)
            if rec.HEADER_SIZE <= total <= rec.HARD_MAX_RECORD and end + total > n:
                return end
            raise LogCorrupt(f"invalid record on read: {why}", path=str(seg.path), offset=offset + end)
        pos = rec.whole_prefix_end(buf, 0, n)
        if n - pos >= rec.HEADER_SIZE:
            total = rec.peek_total(buf, pos)
            if total < rec.HEADER_SIZE:
                raise LogCorrupt(f"bad record length {total}", path=str(seg.path), offset=offset + pos)
        return pos

    def read_exact(self, offset: int, size: int) -> tuple[bytes, Segment]:
        seg = self._find(offset)
        if seg is None or offset < self.min_offset or offset + size > min(self.max_offset, seg.end_limit):
            raise OffsetOutOfRange(f"no record of {size} bytes at {offset}", offset=offset)
        return seg.read(offset, size), seg

    def iter_chunks(self, start: int, chunk: int = 1 << 20) -> Iterator[tuple[int, bytes, Segment]]:
        """Whole-record chunks from ``start`` to the log end, one segment at a time."""
        pos = start
        while pos < self.max_offset:
            data = self.read_raw(pos, chunk, None, verify=True)
            seg = self._find(pos)
            assert seg is not None
            if not data:
                break
            yield pos, data, seg
            pos += len(data)

    # --- cuts ---------------------------------------------------------------------
    def truncate(self, offset: int) -> None:
        """Cut the log to ``offset`` (idempotent): files starting at/after it go, the holder shrinks."""
        assert offset >= self.min_offset
        changed = False
        while self.segments and self.segments[-1].base >= offset:
            self.segments.pop().delete()
            changed = True
        if self.segments:
            seg = self.segments[-1]
            if seg.file_size() > offset - seg.base:
                seg.truncate(offset)
        if changed:
            self.files.sync()
        self.max_offset = max(offset, self.min_offset)
        self.synced_offset = min(self.synced_offset, self.max_offset)
        self.cuts += 1

    def delete_below(self, offset: int) -> int:
        """Retention/reset: delete segments that end at or before ``offset``."""
        n = 0
        while self.segments and self.segments[0].end_limit <= offset:
            self.segments.pop(0).delete()
            n += 1
        if n:
            self.files.sync()
        return n

    def delete_all(self) -> None:
        for seg in self.segments:
            seg.delete()
        self.segments = []
        self.files.sync()
        self.synced_offset = self.min_offset
        self.cuts += 1

    def close(self) -> None:
        for seg in self.segments:
            seg.close()

    # --- recovery -----------------------------------------------------------------
    def recover(self, verify_from: int, synced: int, on_records=None) -> int:
        """Find the log end after a crash; return it (also set as max_offset).

        Records in ``[verify_from, synced)`` must all be whole and valid (else
        LogCorrupt naming file and offset: never guessed around); from ``synced`` on,
        the first invalid record is a torn/zeroed/garbage tail and the log is cut
        there. ``on_records(topics_dict)`` receives index entries for ``[synced, end)``.
        """
        assert self.min_offset <= verify_from <= synced
        if not self.segments:
            if synced > self.min_offset:
                raise LogCorrupt(f"log files missing below synced offset {synced}", path=str(self.dir))
            self.max_offset = self.min_offset
            return self.max_offset
        first = self.segments[0]
        if first.base > self.min_offset:
            raise LogCorrupt(
                f"first segment starts at {first.base}, above the first retained offset {self.min_offset}",
                path=str(first.path),
            )
        S = self.segment_bytes
        for below in self.segments:
            # Below verify_from nothing is walked at start: at least check that every file holds
            # the bytes the log says it does (a middle segment emptied or cut is corruption found
            # now, not a crash on the first read of it; issue 29).
            if below.base >= verify_from:
                break
            need = min(S, verify_from - below.base)
            have = below.file_size()
            if have < need:
                raise LogCorrupt(f"segment file holds {have} bytes, the log below offset {verify_from} needs {need}",
                                 path=str(below.path), offset=below.base + have)
        pos = verify_from
        while True:
            seg = self._find(pos)
            if seg is None:  # pos is a segment end with no next file
                if pos < synced:
                    raise LogCorrupt(f"log ends at {pos}, below synced offset {synced}", path=str(self.dir))
                break
            mm = seg.map()
            fsize = 0 if mm is None else len(mm)
            stop = min(fsize, S)
            rel = pos - seg.base
            topics = None
            try:
                if pos < synced:
                    v_end = min(synced, seg.end_limit) - seg.base
                    if v_end > stop:
                        raise LogCorrupt(
                            f"segment file ends at {seg.base + stop}, below synced offset {synced}",
                            path=str(seg.path), offset=seg.base + stop,
                        )
                    end_rel, why, _ = rec.walk_fast(mm, rel, v_end, S, seg.base, self.max_record)
                    _refuse_newer(why, seg.path, seg.base + end_rel)
                    if why is not None:
                        raise LogCorrupt(
                            f"corrupt record before the synced offset {synced}: {why}",
                            path=str(seg.path), offset=seg.base + end_rel,
                        )
                    rel = end_rel
                if rel < stop:
                    end_rel, why, topics = rec.walk_fast(
                        mm, rel, stop, S, seg.base, self.max_record, collect=on_records is not None
                    )
                else:
                    end_rel, why = rel, None
            finally:
                if mm is not None:
                    mm.close()
            _refuse_newer(why, seg.path, seg.base + end_rel)
            if topics and on_records is not None:
                on_records(topics)
            if why is None and end_rel == S:
                if fsize > S:  # bytes past a full segment's end belong to no record
                    _log.warning("segment_overlong_cut", path=str(seg.path), cut_bytes=fsize - S)
                    seg.truncate(seg.end_limit)
                pos = seg.end_limit
                continue
            pos = seg.base + end_rel
            if why is not None or end_rel < fsize:
                _log.warning(
                    "log_tail_cut", path=str(seg.path), offset=pos, reason=why or "trailing bytes",
                    cut_bytes=fsize - end_rel,
                )
            break
        later = [str(s.path) for s in self.segments if s.base >= pos]
        if later:
            _log.warning("log_segments_cut", offset=pos, files=later)
        self.max_offset = pos
        self.truncate(pos)
        return pos


def _refuse_newer(why: str | None, path: Path, offset: int) -> None:
    """A whole record of a newer release is not a torn tail: cutting it would drop what that
    release acknowledged (a downgrade without the rules of docs/compatibility.md)."""
    found = rec.newer_version(why)
    if found is not None:
        raise too_new(f"commit log {path} at offset {offset}", found, rec.VERSION, path=str(path), offset=offset)
