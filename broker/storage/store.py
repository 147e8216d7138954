"""MessageStore: one replica's commit log + consume indexes + EpochFile + checkpoint.

Satisfies ``autoswitch.ha.log_api.ReplicaLog`` and adds the broker-facing calls
(docs/interfaces.md, "Message store"; docs/storage.md for formats and decisions).
Single-threaded by contract: the broker's event loop is the only caller.

Why one long module: it owns the replica's durable structures together, and its multi-step
operations (truncate, reset, retention, recovery) are crash-safe only as one sequence
(checkpoint intent -> files -> indexes -> EpochFile); split, that order would live in no one place.

Files under ``data_dir``::

    commitlog/<base:020d>     fixed-size segments (see segment.py / record.py)
    index/<hex topic>/<q:020d> consume-index files (consume_index.py)
    epochfile                  the <MasterEpoch, startOffset> entries (autoswitch.epochfile)
    checkpoint                 what recovery may trust (checkpoint.py)

Multi-file changes (truncate, reset, retention) first write a checkpoint that
describes the end state (with an intent for truncate/reset), then change files;
recovery finishes whatever the intent says, so a crash at any step converges.
"""

from __future__ import annotations

import functools
import shutil
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import numpy as np
from autoswitch.broker.storage import checkpoint as ckpt
from autoswitch.broker.storage import divergence, quarantine
from autoswitch.broker.storage import record as rec
from autoswitch.broker.storage import record_runs as runs
from autoswitch.broker.storage.commitlog import CommitLog, LogSync
from autoswitch.broker.storage.consume_index import TopicIndex, pack_entries, topic_dir_name
from autoswitch.broker.storage.record import AppendResult, Message, RecordInfo, StoredMessage
from autoswitch.broker.storage.segment import SegmentFiles
from autoswitch.broker.storage.store_config import StoreConfig
from autoswitch.broker.storage.store_errors import (
    BadBatch,
    BadMessage,
    LogCorrupt,
    OffsetMismatch,
    OffsetOutOfRange,
    StoreClosed,
    StoreError,
)
from autoswitch.epochfile import EpochCache, EpochFile, EpochRuleError

from autoswitch.base.crashpoints import crash_point
from autoswitch.base.errors import CorruptionError, FormatTooNew
from autoswitch.base.fsutil import FsyncFailed, fsync_dir
from autoswitch.base.log import get_logger

__all__ = [
    "AppendResult",
    "FsyncFailed",
    "BadBatch",
    "BadMessage",
    "LogCorrupt",
    "Message",
    "MessageStore",
    "OffsetMismatch",
    "OffsetOutOfRange",
    "RecordInfo",
    "StoreClosed",
    "StoreConfig",
    "StoreError",
    "StoredMessage",
]


def _durable(method):
    """A method that may fsync: a failed fsync poisons the store (``MessageStore._poison``)."""

    @functools.wraps(method)
    def guarded(self, *args, **kwargs):
        try:
            return method(self, *args, **kwargs)
        except FsyncFailed as e:
            self._poison(e)
            raise

    return guarded


class MessageStore:
    def __init__(self, data_dir: Path, config: StoreConfig | None = None,
                 on_fsync_failed: Callable[[FsyncFailed], None] | None = None,
                 log_files: SegmentFiles | None = None) -> None:
        """``on_fsync_failed``: called once when an fsync fails (the broker process ends then: the
        store refuses every later call anyway, see ``_poison``). ``log_files``: where the commit
        log's segments live (default ``data_dir/commitlog`` on this host; the storage simulator
        passes its simulated disk)."""
        self.on_fsync_failed = on_fsync_failed
        self._poisoned: FsyncFailed | None = None
        self.config = config or StoreConfig()
        self.dir = Path(data_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self._logger = get_logger("store", data_dir=str(self.dir))
        self._cp_path = self.dir / "checkpoint"
        self._index_root = self.dir / "index"
        self._epoch_file = EpochFile(self.dir / "epochfile")
        self._log = CommitLog(self.dir / "commitlog", self.config.segment_bytes, self.config.max_record_bytes,
                              files=log_files)
        self._indexes: dict[str, TopicIndex] = {}
        self._epochs = EpochCache()
        self._confirm = 0
        # Called when confirm_offset moves forward (the broker wakes long-polling consumers).
        self.on_confirm_advanced: Callable[[], None] | None = None
        self._closed = False
        self._divergence: divergence.Divergence | None = None
        try:
            self._cp = self._recover()
            self._divergence = divergence.load(self.dir)
        except (CorruptionError, FormatTooNew) as e:
            self._logger.error("store_recovery_refused", code=e.code, error=str(e))
            self._release()
            raise

    # ================================================================ recovery
    def _recover(self) -> ckpt.Checkpoint:
        t0 = time.monotonic()
        cp = ckpt.load(self._cp_path)
        self._log.open_files()
        self._index_root.mkdir(exist_ok=True)
        if cp is None:
            if self._log.segments or any(self._index_root.iterdir()) or self._epoch_file.path.exists():
                raise LogCorrupt("checkpoint missing but store files exist", path=str(self._cp_path))
            # An empty EpochFile from the start: later, a missing one next to a non-empty log
            # means it was lost, never that it was not written yet.
            self._epoch_file.save(EpochCache())
            fsync_dir(self.dir)  # commitlog/ and index/ exist before the first checkpoint does
            cp = ckpt.Checkpoint()
            ckpt.save(self._cp_path, cp)
        epochs = self._epoch_file.load()
        self._log.min_offset = cp.min_offset
        if cp.intent == ckpt.INTENT_RESET:
            self._log.delete_all()
            shutil.rmtree(self._index_root, ignore_errors=True)
            self._index_root.mkdir()
            epochs = EpochCache()
            self._epoch_file.save(epochs)
        self._log.delete_below(cp.min_offset)
        if cp.intent == ckpt.INTENT_TRUNCATE:
            # finish a cut that a crash interrupted: nothing past intent_offset may come back
            self._log.truncate(cp.intent_offset)
        # consume indexes: cut back to the checkpointed counts; the log tail re-indexes the rest
        known = set()
        for name, (min_q, next_q) in cp.topics.items():
            if next_q == 0:
                continue  # cut away entirely by a truncate: its directory goes below
            ti = TopicIndex(self._index_root / topic_dir_name(name), name, self.config.index_entries_per_file,
                            min_q, next_q)
            ti.open_files()
            if ti.next_q < next_q:
                raise LogCorrupt(
                    f"consume index of topic {name!r} holds {ti.next_q} entries, checkpoint says {next_q}",
                    path=str(ti.dir),
                )
            ti.truncate_to(next_q)
            if min_q < next_q and (not ti.bases or ti.bases[0] > min_q):
                raise LogCorrupt(
                    f"consume index files of topic {name!r} missing below queue offset "
                    f"{ti.bases[0] if ti.bases else next_q} (checkpoint keeps {min_q}..{next_q})",
                    path=str(ti.dir),
                )
            ti.min_q = min_q
            ti.drop_below(min_q)
            self._indexes[name] = ti
            known.add(ti.dir.name)
        for d in self._index_root.iterdir():
            if d.name not in known:
                shutil.rmtree(d, ignore_errors=True)
        end = self._log.recover(cp.verify_from, cp.log_synced, on_records=self._index_records)
        if not self._epoch_file.path.exists():
            if end > self._log.min_offset:
                # Every byte of the log belongs to a MasterEpoch; without the file the handshake
                # could not find the consistent point and would keep or serve a divergent tail.
                raise LogCorrupt(
                    f"EpochFile {self._epoch_file.path} is missing but the commit log "
                    f"{self._log.dir} holds {end - self._log.min_offset} bytes (offsets "
                    f"{self._log.min_offset}..{end}); refusing to start. To rebuild this replica, move "
                    "its whole data directory aside, remove its brokerId from the controller "
                    "(autoswitch admin clean-broker-metadata) and start it: it registers as a new "
                    "replica and copies the log from the master (docs/operations.md)",
                    path=str(self._epoch_file.path),
                )
            self._epoch_file.save(epochs)       # empty log: nothing to lose, start with an empty file
        # EpochFile reconciliation: entries past the log end go (startup rule); an interrupted
        # truncate also drops epochs above its last common epoch; retention moves the first start.
        before = epochs.entries()
        epochs.truncate_suffix_from_offset(end)
        if cp.intent == ckpt.INTENT_TRUNCATE and cp.intent_epoch is not None:
            epochs.truncate_suffix_after_epoch(cp.intent_epoch)
        epochs.truncate_prefix(self._log.min_offset)
        if epochs.entries() != before:
            self._epoch_file.save(epochs)
            self._logger.warning("epochs_reconciled", before=[(e.epoch, e.start_offset) for e in before],
                                 after=[(e.epoch, e.start_offset) for e in epochs.entries()])
        self._epochs = epochs
        self._confirm = min(cp.confirm, end)
        for seg in self._log.segments:
            if seg.base + seg.size_limit > cp.log_synced:
                seg.dirty = True  # the recovered tail may only be in the page cache
        self._cp = cp
        synced_before = cp.log_synced
        cp = self._sync_and_checkpoint(force=True)
        self._logger.info(
            "store_recovered", min_offset=self._log.min_offset, max_offset=end, synced_before=synced_before,
            topics=len(self._indexes), epochs=len(epochs), duration_ms=round((time.monotonic() - t0) * 1000, 3),
        )
        return cp

    def _index_records(self, topics: dict[bytes, list]) -> None:
        """Append bulk entries collected by record.walk (recovery tail and append_raw)."""
        for tb, (q0, phys, sizes) in topics.items():
            name = tb.decode()
            ti = self._indexes.get(name)
            if ti is None:
                ti = self._new_topic(name, q0)
            if q0 != ti.next_q:
                raise LogCorrupt(
                    f"topic {name!r} record at queue offset {q0}, index expects {ti.next_q}", offset=phys[0]
                )
            ti.append(q0, pack_entries(phys, sizes))

    def _new_topic(self, name: str, q0: int) -> TopicIndex:
        if len(self._indexes) >= self.config.max_topics:
            raise StoreError(f"too many topics (limit {self.config.max_topics})", topic=name)
        ti = TopicIndex(self._index_root / topic_dir_name(name), name, self.config.index_entries_per_file, q0, q0)
        ti.dir.mkdir(parents=True, exist_ok=True)
        fsync_dir(self._index_root)  # the checkpoint will name this topic: its directory must last
        self._indexes[name] = ti
        return ti

    # ================================================================ properties
    @property
    def max_offset(self) -> int:
        return self._log.max_offset

    @property
    def min_offset(self) -> int:
        return self._log.min_offset

    @property
    def epochs(self) -> EpochCache:
        """The live cache: read it, never mutate it (use append_epoch/truncate/reset)."""
        return self._epochs

    @property
    def confirm_offset(self) -> int:
        return self._confirm

    @confirm_offset.setter
    def confirm_offset(self, value: int) -> None:
        # a master may announce a commit point the slave has not reached yet
        new = max(0, min(int(value), self._log.max_offset))
        advanced = new > self._confirm
        self._confirm = new
        if advanced and self.on_confirm_advanced is not None:
            self.on_confirm_advanced()

    def has_confirmed(self, topic: str, queue_offset: int, count: int, max_phy: int) -> bool:
        """Whether ``count`` messages of ``topic`` from ``queue_offset`` end at or below
        ``max_phy``: one index entry read (long polls ask it on every wake-up)."""
        self._check_open()
        ti = self._indexes.get(topic)
        if ti is None or count <= 0:
            return count <= 0
        last = max(queue_offset, ti.min_q) + count - 1
        if last >= ti.next_q:
            return False
        ((phy, size),) = ti.lookup(last, 1)
        return phy + size <= max_phy

    def fold_records(self, data, pos: int, end: int, limit: int, h: int) -> tuple[int, int]:
        return rec.fold_records(data, pos, end, limit, h)

    def segment_base(self, offset: int) -> int:
        return max(self._log.min_offset, min(offset, self._log.segment_base(offset)))

    def max_queue_offset(self, topic: str) -> int:
        ti = self._indexes.get(topic)
        return ti.next_q if ti is not None else 0

    def min_queue_offset(self, topic: str) -> int:
        ti = self._indexes.get(topic)
        return ti.min_q if ti is not None else 0

    def topics(self) -> list[str]:
        return sorted(self._indexes)

    # ================================================================ divergence (divergence.py)
    @property
    def divergence(self) -> divergence.Divergence | None:
        """A range of this log found to differ from the master's, not repaired yet (durable)."""
        return self._divergence

    @_durable
    def mark_diverged(self, epoch: int, start: int, end: int, cut: bool = False) -> None:
        self._check_open()
        d = divergence.Divergence(epoch, start, end, cut)
        if d != self._divergence:
            divergence.save(self.dir, d)
            self._divergence = d
            self._logger.warning("divergence_recorded", epoch=epoch, start=start, end=end, cut=cut)

    @_durable
    def clear_diverged(self, why: str) -> None:
        self._check_open()
        if self._divergence is not None:
            divergence.clear(self.dir)
            self._logger.warning("divergence_cleared", epoch=self._divergence.epoch, start=self._divergence.start,
                                 end=self._divergence.end, reason=why)
            self._divergence = None

    @property
    def synced_offset(self) -> int:
        """Every byte of the log below it is on disk (fsynced): an acknowledgement that promises
        durability never counts past it."""
        return min(self._log.synced_offset, self._log.max_offset)

    def _check_open(self) -> None:
        if self._poisoned is not None:
            raise self._poisoned
        if self._closed:
            raise StoreClosed("store is closed")

    def _poison(self, e: FsyncFailed) -> None:
        """A failed fsync: the page cache may have dropped our dirty pages and marked them clean,
        so a later fsync could "succeed" without them. Never again: every later call raises
        this error (nothing more is appended, acknowledged or served from these files), and the
        owner is told once (the broker process ends; its next start is unclean)."""
        if self._poisoned is not None:
            return
        self._poisoned = e
        self._logger.critical("fsync_failed", error=e.message, path=e.details.get("path"),
                              errno=e.details.get("errno"),
                              note="the store refuses every further call; the process must restart")
        if self.on_fsync_failed is not None:
            self.on_fsync_failed(e)

    # ================================================================ master appends
    @_durable
    def append_messages(self, msgs: list[Message]) -> AppendResult:
        """Encode, place and write one batch (one write per segment touched)."""
        self._check_open()
        if not msgs:
            raise BadMessage("empty batch")
        last = self._epochs.last()
        if last is None:
            raise StoreError("append_messages needs an epoch: the master appends (epoch, offset) first")
        epoch = last.epoch
        cfg = self.config
        items: list[tuple] = []  # (topic, topic_b, msg_id_b, body, q, born_ts_ms, size)
        pending: dict[str, int] = {}
        total = 0
        for m in msgs:  # validate everything before writing anything
            body = m.body
            if len(body) > cfg.max_message_bytes:
                raise BadMessage(f"body of {len(body)} bytes over max_message_bytes={cfg.max_message_bytes}")
            topic_b = m.topic.encode()
            mid_b = m.msg_id.encode()
            q = pending.get(m.topic)
            if q is None:
                if m.topic not in self._indexes and len(self._indexes) + len(pending) >= cfg.max_topics:
                    raise BadMessage(f"too many topics (limit {cfg.max_topics})")
                q = self.max_queue_offset(m.topic)
            rec.check_fields(topic_b, mid_b, q, m.born_ts_ms, epoch)
            pending[m.topic] = q + 1
            size = rec.HEADER_SIZE + len(topic_b) + len(mid_b) + len(body)
            total += size
            if total > cfg.max_batch_bytes:
                raise BadMessage(f"batch over max_batch_bytes={cfg.max_batch_bytes}")
            items.append((m.msg_id, topic_b, mid_b, body, q, m.born_ts_ms, size))
        # placement: records never span segments; padding fills a segment's end
        start = pos = self._log.max_offset
        seg_end = self._log.segment_end(pos)
        chunks: list[tuple[int, int, list]] = []  # (chunk start, padding size, [(pos, item)])
        chunk_start = pos
        placed: list = []
        for it in items:
            n = it[6]
            room = seg_end - pos
            if room == 0:
                # the record before filled its segment to the byte: the next one starts the next
                # segment, with no padding (found by the storage simulator, tests/sim/store_sim.py)
                chunks.append((chunk_start, 0, placed))
                placed = []
                chunk_start = seg_end
                seg_end += self._log.segment_bytes
            elif n > room or 0 < room - n < rec.HEADER_SIZE:
                assert room >= rec.HEADER_SIZE, room  # invariant: a padding header always fits
                chunks.append((chunk_start, room, placed))
                placed = []
                pos = chunk_start = seg_end
                seg_end += self._log.segment_bytes
            placed.append((pos, it))
            pos += n
        chunks.append((chunk_start, 0, placed))
        records: list[tuple[int, int, str]] = []
        index: dict[bytes, list] = {}
        try:
            for c_start, pad, placed in chunks:
                # bytes concatenation + one join measured cheaper (CPU time) than pack_into a bytearray
                parts = []
                for p, (msg_id, topic_b, mid_b, body, q, ts, n) in placed:
                    parts.append(rec.encode_message(topic_b, mid_b, body, q, ts, epoch))
                    records.append((p, q, msg_id))
                    ent = index.get(topic_b)
                    if ent is None:
                        index[topic_b] = [q, [p], [n]]
                    else:
                        ent[1].append(p)
                        ent[2].append(n)
                if pad:
                    parts.append(rec.encode_padding(pad, epoch))
                if parts:
                    self._log.write(c_start, b"".join(parts))
        except OSError as e:
            # A write failed (ENOSPC, EIO) in the middle of the batch: nothing of it may stay. The
            # chunks written before would hold records no index has, whose queue offsets the next
            # batch takes again (two records of one queue offset: slaves refuse to copy them), and
            # a part of the failed write past the log end could come back whole after a crash.
            self._logger.error("append_failed", error=str(e), errno=e.errno, start_offset=start,
                               cut_bytes=self._log.max_offset - start)
            self._log.truncate(start)
            raise
        assert self._log.max_offset == pos
        self._index_records(index)
        if cfg.flush_mode == "sync":
            self._log.fsync()
        return AppendResult(start, pos, records)

    # ================================================================ replication
    def read_raw(self, offset: int, max_bytes: int, limit: int | None = None) -> bytes:
        self._check_open()
        try:
            return self._log.read_raw(offset, max_bytes, limit, self.config.verify_reads)
        except LogCorrupt as e:
            self._logger.error("read_corrupt", path=e.path, offset=e.offset, error=str(e))
            raise

    @_durable
    def append_raw(self, offset: int, data: bytes | memoryview, epoch: int, epoch_start: int) -> int:
        """Validate (every record CRC-checked), write, commit; returns the new max_offset."""
        self._check_open()
        end = self._log.max_offset
        if offset != end:
            if self._log.max_offset == self._log.min_offset and offset >= 0:
                self.reset(offset)  # an empty store restarts wherever the master starts it
            else:
                raise OffsetMismatch(
                    f"batch at {offset}, log ends at {end}", offset=offset, max_offset=end,
                )
        n = len(data)
        if n > self.config.max_batch_bytes:
            raise BadBatch(f"batch of {n} bytes over max_batch_bytes={self.config.max_batch_bytes}")
        seg_end = self._log.segment_end(offset)
        if offset + n > seg_end:
            raise BadBatch(f"batch [{offset}, {offset + n}) crosses the segment end {seg_end}", offset=offset)
        last = self._epochs.last()
        if last is not None and epoch < last.epoch:
            raise BadBatch(f"batch epoch {epoch} below the last local epoch {last.epoch}", epoch=epoch)
        if epoch_start > offset:
            raise BadBatch(f"epoch {epoch} starts at {epoch_start}, after the batch offset {offset}", epoch=epoch)
        topics: dict[bytes, list] = {}
        if n:
            end, why, found = rec.walk_fast(data, 0, n, seg_end - offset, offset, self.config.max_record_bytes,
                                            collect=True)
            if why is not None:
                self._logger.warning("append_raw_rejected", offset=offset + end, reason=why, epoch=epoch)
                raise LogCorrupt(f"replicated batch invalid: {why}", offset=offset + end)
            assert found is not None
            topics = found
            new_topics = 0
            for tb, (q0, _p, _s) in topics.items():
                try:
                    name = tb.decode()
                except UnicodeDecodeError as e:
                    raise LogCorrupt("replicated record topic is not UTF-8", offset=offset) from e
                ti = self._indexes.get(name)
                if ti is None:
                    new_topics += 1
                elif q0 != ti.next_q:
                    raise BadBatch(f"topic {name!r} queue offset {q0}, index expects {ti.next_q}", topic=name)
            if len(self._indexes) + new_topics > self.config.max_topics:
                raise BadBatch(f"too many topics (limit {self.config.max_topics})")
        if last is None or epoch > last.epoch:
            self.append_epoch(epoch, epoch_start)  # persisted before the bytes
        if not n:
            return self._log.max_offset
        seg = self._log.segment_for_write(offset, n)
        try:
            seg.pwrite_all(offset, data)
        except BaseException:
            self._log.truncate(self._log.max_offset)   # cut whatever part of the batch landed
            raise
        self._log.advance(offset, n)
        self._index_records(topics)
        if self.config.flush_mode == "sync":
            self._log.fsync()
        return self._log.max_offset

    @_durable
    def append_epoch(self, epoch: int, start_offset: int) -> None:
        self._check_open()
        if start_offset > self._log.max_offset:
            raise EpochRuleError(
                f"epoch {epoch} would start at {start_offset}, past the log end {self._log.max_offset}",
                epoch=epoch,
            )
        # entries never start below the first retained offset (same rule as retention)
        start_offset = max(start_offset, self._log.min_offset)
        cache = self._epochs.copy()
        cache.append(epoch, start_offset)
        self._epoch_file.save(cache)
        self._epochs = cache
        self._logger.info("epoch_appended", epoch=epoch, start_offset=start_offset)

    # ================================================================ cuts
    @_durable
    def truncate(self, offset: int, last_common_epoch: int | None = None) -> None:
        """Crash-safe cut: checkpoint with the intent first, then files, then EpochFile."""
        self._check_open()
        if offset < self._log.min_offset or offset > self._log.max_offset:
            raise OffsetOutOfRange(
                f"truncate to {offset} outside [{self._log.min_offset}, {self._log.max_offset}] (use reset)",
                offset=offset,
            )
        if offset < self._log.max_offset:  # the cut must land on a whole, valid record
            head, seg = self._log.read_exact(offset, rec.HEADER_SIZE)
            total = rec.peek_total(head, 0)
            if not (rec.HEADER_SIZE <= total <= self._log.max_offset - offset) or rec.check_record(
                self._log.read_exact(offset, total)[0], 0, total
            ):
                raise LogCorrupt("truncate offset is not a record boundary", path=str(seg.path), offset=offset)
        last = self._epochs.last()
        quarantine.keep_tail(self.dir, self._log, offset, last.epoch if last is not None else 0,
                             self.config.quarantine_max_bytes, self._logger)
        cuts = {name: ti.first_q_at_or_after(offset) for name, ti in self._indexes.items()}
        # a topic cut back to queue offset 0 never existed on the surviving log: forget it
        # (a topic that keeps a later next offset keeps its queue numbering)
        gone = {name for name, q in cuts.items() if q == 0}
        old = self._cp
        topics = {
            name: (mn, min(nx, cuts.get(name, nx))) for name, (mn, nx) in old.topics.items() if name not in gone
        }
        synced = min(old.log_synced, offset)
        cp = replace(
            old, log_synced=synced, verify_from=min(old.verify_from, synced), confirm=min(old.confirm, offset),
            intent=ckpt.INTENT_TRUNCATE, intent_offset=offset, intent_epoch=last_common_epoch, topics=topics,
        )
        ckpt.save(self._cp_path, cp)
        self._cp = cp
        crash_point("store.truncate_intent_written")
        self._log.truncate(offset)
        crash_point("store.truncate_log_cut")
        for name, ti in self._indexes.items():
            ti.truncate_to(cuts[name])
        for name in gone:
            self._indexes.pop(name).delete()
        crash_point("store.truncate_index_cut")
        cache = self._epochs.copy()
        cache.truncate_suffix_from_offset(offset)
        if last_common_epoch is not None:
            cache.truncate_suffix_after_epoch(last_common_epoch)
        if cache != self._epochs:
            self._epoch_file.save(cache)
            self._epochs = cache
        crash_point("store.truncate_epochs_saved")
        self._confirm = min(self._confirm, offset)
        self._sync_and_checkpoint(force=True)
        self._logger.info("store_truncated", offset=offset, last_common_epoch=last_common_epoch,
                          epochs=[(e.epoch, e.start_offset) for e in self._epochs.entries()])

    @_durable
    def reset(self, start_offset: int) -> None:
        """Drop everything; an empty log restarting at start_offset (crash-safe via intent). What
        it drops is copied to quarantine/ first, as a truncation's tail is (up to the cap)."""
        self._check_open()
        if start_offset < 0:
            raise OffsetOutOfRange(f"reset to negative offset {start_offset}", offset=start_offset)
        last = self._epochs.last()
        quarantine.keep_tail(self.dir, self._log, self._log.min_offset, last.epoch if last is not None else 0,
                             self.config.quarantine_max_bytes, self._logger)
        cp = ckpt.Checkpoint(start_offset, start_offset, start_offset, start_offset, ckpt.INTENT_RESET,
                             start_offset, None, {})
        ckpt.save(self._cp_path, cp)
        self._cp = cp
        crash_point("store.reset_intent_written")
        self._log.delete_all()
        for ti in self._indexes.values():
            ti.close()
        self._indexes = {}
        shutil.rmtree(self._index_root, ignore_errors=True)
        self._index_root.mkdir()
        fsync_dir(self.dir)
        self._epochs = EpochCache()
        self._epoch_file.save(self._epochs)
        self._log.min_offset = self._log.max_offset = start_offset
        self._confirm = start_offset
        crash_point("store.reset_files_dropped")
        self._sync_and_checkpoint(force=True)
        self._logger.warning("store_reset", start_offset=start_offset)

    @_durable
    def apply_retention(self, keep_bytes: int | None, keep_seconds: float | None) -> int:
        """Delete whole old segments (never the last): by size (Kafka's rule: while the log
        without the segment still holds >= keep_bytes) and/or by file age. Returns how many."""
        self._check_open()
        self.flush()
        now = time.time()
        new_min = self._log.min_offset
        victims = 0
        for seg in self._log.segments[:-1]:
            by_size = keep_bytes is not None and self._log.max_offset - seg.end_limit >= keep_bytes
            by_age = keep_seconds is not None and now - seg.modified_at() > keep_seconds
            if not (by_size or by_age):
                break
            new_min = seg.end_limit
            victims += 1
        if not victims:
            return 0
        mins = {name: ti.first_q_at_or_after(new_min) for name, ti in self._indexes.items()}
        old = self._cp
        cp = replace(
            old, min_offset=new_min, verify_from=max(old.verify_from, new_min),
            log_synced=max(old.log_synced, new_min),
            topics={name: (max(mn, min(mins.get(name, mn), nx)), nx) for name, (mn, nx) in old.topics.items()},
        )
        ckpt.save(self._cp_path, cp)
        self._cp = cp
        crash_point("store.retention_checkpoint_written")
        self._log.delete_below(new_min)
        self._log.min_offset = new_min
        for name, ti in self._indexes.items():
            ti.drop_below(mins[name])
        cache = self._epochs.copy()
        cache.truncate_prefix(new_min)
        if cache != self._epochs:
            self._epoch_file.save(cache)
            self._epochs = cache
        self._confirm = max(self._confirm, min(new_min, self._log.max_offset))
        self._sync_and_checkpoint(force=True)
        self._logger.info("retention_applied", segments=victims, min_offset=new_min)
        return victims

    # ================================================================ durability
    @_durable
    def flush(self) -> None:
        """fsync log + indexes, then the checkpoint (skipped when nothing changed)."""
        self._check_open()
        self._sync_and_checkpoint(force=False)

    @_durable
    def sync_log(self) -> None:
        """fsync the commit log's new bytes only: what an acknowledgement needs (``synced_offset``).
        A group commit's one fdatasync instead of ``flush``'s three or four (indexes, the
        checkpoint's temp file and its directory): recovery walks whole records past the
        checkpoint and indexes them again, so the indexes and the checkpoint follow on the
        flusher's interval (docs/storage.md, "Group commit")."""
        self._check_open()
        self._log.fsync()

    def begin_log_sync(self) -> LogSync:
        """``sync_log`` in three steps, so the fdatasync can run on another thread while this one
        appends on: ``s = begin_log_sync()``, ``s.run()`` anywhere, then ``finish_log_sync(s, error)``
        back here (the broker's group commit: write_path.GroupFlusher)."""
        self._check_open()
        return self._log.begin_sync()

    def finish_log_sync(self, s: LogSync, error: BaseException | None) -> None:
        """``s`` ran: ``synced_offset`` moves to its target, or ``error`` (its FsyncFailed)
        poisons the store and is raised."""
        if error is None:
            self._log.finish_sync(s)
            return
        self._log.abort_sync(s)
        if isinstance(error, FsyncFailed):
            self._poison(error)
        raise error

    def _sync_and_checkpoint(self, force: bool) -> ckpt.Checkpoint:
        self._log.fsync()
        for ti in self._indexes.values():
            ti.fsync()
        synced = self._log.max_offset
        lo = self._log.min_offset
        # recovery verifies the segment holding the last synced record, from its start
        verify_from = max(lo, self._log.segment_base(synced - 1)) if synced > lo else synced
        cp = ckpt.Checkpoint(
            synced, verify_from, self._confirm, lo, ckpt.INTENT_NONE, 0, None,
            {name: (ti.min_q, ti.next_q) for name, ti in self._indexes.items()},
        )
        if force or cp != self._cp:
            ckpt.save(self._cp_path, cp)
            self._cp = cp
        return cp

    def close(self) -> None:
        if self._closed:
            return
        try:
            if self._poisoned is None:
                self._sync_and_checkpoint(force=False)
        except FsyncFailed as e:
            self._poison(e)
            raise
        finally:
            self._release()

    def _release(self) -> None:
        self._closed = True
        self._log.close()
        for ti in self._indexes.values():
            ti.close()

    def abandon(self) -> None:
        """Test/simulator helper: drop the store like a killed process (no flush, no checkpoint)."""
        self._release()

    # ================================================================ reads
    def read_messages(
        self, topic: str, queue_offset: int, max_count: int, max_phy: int | None = None
    ) -> list[StoredMessage]:
        """By consume index from max(queue_offset, min queue offset); stops before a record
        whose end is past max_phy. Every record is CRC-checked and must match its entry."""
        self._check_open()
        ti = self._indexes.get(topic)
        if ti is None or max_count <= 0:
            return []
        out: list[StoredMessage] = []
        entries = ti.lookup(queue_offset, min(max_count, self.config.max_read_messages))
        q = max(queue_offset, ti.min_q)
        for phy, size in entries:
            if max_phy is not None and phy + size > max_phy:
                break
            if phy < self._log.min_offset:
                q += 1
                continue
            try:
                buf, seg = self._log.read_exact(phy, size)
            except OffsetOutOfRange as e:
                raise LogCorrupt(
                    f"consume index of {topic!r} points past the log ({phy}+{size})", offset=phy
                ) from e
            try:
                info, body = rec.parse_record(buf, 0, size, phy)
                if info.padding or info.topic != topic or info.queue_offset != q or info.size != size:
                    raise LogCorrupt(f"consume index entry {topic!r}#{q} does not match the record at {phy}")
            except LogCorrupt as e:
                self._logger.error("read_corrupt", path=str(seg.path), offset=phy, topic=topic, error=e.message)
                raise LogCorrupt(e.message, path=str(seg.path), offset=phy) from e
            out.append(StoredMessage(topic, q, phy, info.msg_id, info.born_ts_ms, body, info.epoch, size))
            q += 1
        return out

    def read_record_runs(self, topic: str, queue_offset: int, max_count: int, max_phy: int | None,
                         max_bytes: int) -> runs.ServedRuns:
        """``read_messages`` as stored bytes: contiguous runs of records (record_runs.py). The same checks: every record CRC-checked and matched to
        its index entry; at most ``max_bytes`` of records (but at least one)."""
        self._check_open()
        ti = self._indexes.get(topic)
        if ti is None or max_count <= 0:
            return runs.ServedRuns([], 0, queue_offset)
        q0, phys, sizes = ti.lookup_arrays(queue_offset, min(max_count, self.config.max_read_messages))
        skip = int(np.searchsorted(phys, self._log.min_offset))  # entries retention already cut
        served = skip  # entries before this index are served or skipped
        out: list[tuple[int, bytes]] = []
        for plan in runs.plan_runs(phys[skip:], sizes[skip:], max_phy, max_bytes):
            phy, want, end = plan.phy, plan.nbytes, skip + plan.end
            while want > 0:  # a run may span a segment end: read_raw serves one segment at a time
                try:
                    buf = self._log.read_raw(phy, want, phy + want, verify=False)
                except OffsetOutOfRange as e:
                    raise LogCorrupt(f"consume index of {topic!r} points past the log ({phy}+{want})",
                                     offset=phy) from e
                if not buf:
                    raise LogCorrupt(f"consume index of {topic!r} points at a cut record ({phy})", offset=phy)
                try:
                    n = runs.check_run(buf, phy, self._log.segment_end(phy), topic, q0 + served,
                                       phys[served:end], self._log.max_record)
                except LogCorrupt as e:
                    self._logger.error("read_corrupt", offset=e.offset, topic=topic, error=e.message)
                    raise
                out.append((phy, buf))
                served += n
                phy += len(buf)
                want -= len(buf)
        return runs.ServedRuns(out, served - skip, q0 + served)

    def scan(self, from_offset: int | None = None, include_padding: bool = False) -> Iterator[RecordInfo]:
        """Every record in log order from ``from_offset`` (a record boundary; default the first
        retained offset), CRC-checked. Padding is skipped unless asked for."""
        self._check_open()
        pos = self._log.min_offset if from_offset is None else from_offset
        for start, data, seg in self._log.iter_chunks(pos):
            p = 0
            n = len(data)
            while p < n:  # read_raw verified every record of the chunk
                try:
                    info = rec.record_info(data, p, start + p)
                except LogCorrupt as e:
                    raise LogCorrupt(e.message, path=str(seg.path), offset=start + p) from e
                if include_padding or not info.padding:
                    yield info
                p += info.size
