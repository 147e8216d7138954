"""The storage simulator: the real ``MessageStore`` (commit log, group-commit sync, flush,
checkpoint, recovery) over a simulated disk that fails fsyncs, loses and tears unsynced writes at
power cuts and flips bits (sim_disk.py), one integer seed, no threads (issue 61, the disk part).

The commit log's segments live on the simulated disk; the store's small files (checkpoint,
EpochFile, consume indexes) stay on a real temporary folder, where a power cut loses nothing, so
they may outlive the log bytes they describe, as independent files do on a real machine.

What runs, in a seeded random order: appends (1-20 messages over three topics; a failed write,
ENOSPC or EIO, refuses the batch), the broker's
group commit as the write path drives it (``begin_log_sync``, maybe more appends while the sync
is "on its thread", ``run``, ``finish_log_sync``), full flushes, clean closes, power cuts, failed
fsyncs (EIO) and bit flips in synced bytes; after every restart the store recovers as a broker's
would.

Invariants (a violation raises ``Violation``):
- ``store.acked_lost``: every message an acknowledgement may count (its end at or below
  ``synced_offset`` after a sync that succeeded, or written before a clean close) is read back
  after every restart with its msg_id and body, unless a bit flip hit it;
- ``store.corruption_served``: a record a bit flip hit is never served with other bytes (a read
  raises LogCorrupt, or recovery refuses the store);
- ``store.fsync_failure_ignored``: after a failed fsync the store refuses every further call
  (the process must restart), and nothing after the failure is ever counted as synced;
- ``store.refused_clean_store``: recovery never refuses a store no bit flip touched;
- ``store.queue_offsets``: the log holds each queue offset of a topic once and in order, and the
  index ends where the log does (a slave copying the log checks the same).
"""

from __future__ import annotations

import contextlib
import random
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from autoswitch.broker.storage.commitlog import CommitLog
from autoswitch.broker.storage.record import Message
from autoswitch.broker.storage.store import MessageStore, StoreConfig
from autoswitch.broker.storage.store_errors import LogCorrupt, StoreError

from autoswitch.base.fsutil import FsyncFailed

from .common import Violation, quiet_logs
from .sim_disk import SimDisk

TOPICS = ("orders", "audit", "t3")
# planted bugs of this simulator -> what they break in the real store (patched for one run)
STORE_BUGS = ("sync_counts_later_appends", "fsync_error_ignored")


@dataclass
class _Msg:
    topic: str
    q: int
    phy: int
    end: int
    msg_id: str
    body: bytes


@dataclass
class StoreSimStats:
    steps: int = 0
    appends: int = 0
    messages: int = 0
    acked: int = 0
    syncs: int = 0
    restarts: int = 0
    refusals: int = 0           # recoveries that refused a corrupted store (after a bit flip)
    lost_to_flips: int = 0      # acknowledged records cut with a flipped one before them
    write_failures: int = 0     # appends refused by a failed write
    checks: int = 0
    disk: dict[str, int] = field(default_factory=dict)


@contextlib.contextmanager
def _planted(bug: str | None) -> Iterator[None]:
    """Re-introduce one bug into the real store for the length of a run."""
    if bug is None:
        yield
        return
    if bug == "sync_counts_later_appends":
        orig = CommitLog.finish_sync

        def finish_sync(self, s):       # BUG: counts every byte appended, not the sync's target
            if s.cuts == self.cuts:
                self.synced_offset = self.max_offset
        CommitLog.finish_sync = finish_sync
        try:
            yield
        finally:
            CommitLog.finish_sync = orig
    elif bug == "fsync_error_ignored":
        orig_f = MessageStore.finish_log_sync

        def finish_log_sync(self, s, error):   # BUG: a failed fsync is taken for a good one
            return orig_f(self, s, None)
        MessageStore.finish_log_sync = finish_log_sync
        try:
            yield
        finally:
            MessageStore.finish_log_sync = orig_f
    else:
        raise ValueError(bug)


class StoreSim:
    def __init__(self, seed: int, steps: int = 300, bug: str | None = None, bit_flips: bool = True) -> None:
        self.seed = seed
        self.rng = random.Random(f"store/{seed}")
        self.steps = steps
        self.bug = bug
        self.bit_flips = bit_flips
        self.t = 0
        self.disk = SimDisk(random.Random(f"store-disk/{seed}"), clock=lambda: float(self.t))
        self.stats = StoreSimStats()
        self.acked: dict[str, _Msg] = {}        # msg_id -> a message an acknowledgement may count
        self.pending: list[_Msg] = []           # appended, not yet covered by a sync
        # log offsets of the bytes bit flips hit (in an acknowledged record, or in the padding after
        # it that its end counts: a record's end here is the next record's start)
        self.flipped: set[int] = set()
        self.next_id = 0
        self.config = StoreConfig(segment_bytes=self.rng.choice([80 << 10, 128 << 10, 512 << 10]),
                                  retention_hours=None, max_message_bytes=64 << 10)
        self.store: MessageStore | None = None
        self.dir: Path | None = None

    # ------------------------------------------------------------------ the run

    def run(self) -> StoreSimStats:
        with quiet_logs(), _planted(self.bug), tempfile.TemporaryDirectory(prefix="store-sim-") as tmp:
            self.dir = Path(tmp)
            if not self._open():
                return self._done()
            assert self.store is not None
            self.store.append_epoch(1, 0)
            for step in range(self.steps):
                self.t = step
                self.stats.steps += 1
                if not self._step():
                    break           # recovery refused a corrupted store: the operator's turn
            else:
                self._check()
            if self.store is not None:
                with contextlib.suppress(StoreError, FsyncFailed):
                    self.store.close()
        return self._done()

    def _done(self) -> StoreSimStats:
        self.stats.acked = len(self.acked)
        self.stats.disk = dict(self.disk.stats)
        return self.stats

    def _fail(self, kind: str, detail: str) -> Violation:
        return Violation(kind, f"seed {self.seed}: {detail}", self.t)

    def _open(self) -> bool:
        """Start the store as a broker process does (full recovery); False when it refuses a
        store that a bit flip corrupted (the only acceptable refusal)."""
        assert self.dir is not None
        while True:
            try:
                self.store = MessageStore(self.dir, self.config, log_files=self.disk.folder(self.dir / "commitlog"))
                break
            except FsyncFailed:
                # recovery's own fsync failed: this start ends, the machine goes on, the next
                # start recovers again (each injected failure is used once)
                self.disk.power_cut()
                continue
            except LogCorrupt as e:
                if not self.flipped:
                    raise self._fail("store.refused_clean_store", f"recovery refused: {e}") from e
                self.stats.refusals += 1
                self.store = None
                return False
        self.stats.restarts += 1
        end = max((m.end for m in self.acked.values()), default=0)
        cut = self.store.max_offset
        if cut < end:
            # Recovery walks the bytes past its checkpoint and cuts at the first bad record: it
            # cannot tell a flipped bit there from a torn tail, so the records from a flipped one
            # on may go (the replica then holds less than it acknowledged: the controllers' record
            # of each replica's acknowledged offset keeps it from counting as clean, issue 58
            # item 8). Anything else below an acknowledgement is a loss.
            # the cut must be at the start of the record (or padding) holding a flipped byte: no
            # acknowledged record starts between the cut and that byte
            if not any(f >= cut and not any(cut < m.phy <= f for m in self.acked.values()) for f in self.flipped):
                raise self._fail("store.acked_lost", f"recovered log ends at {cut}, below acknowledged bytes "
                                 f"up to {end} (bit flips at {sorted(self.flipped)})")
            gone = [k for k, m in self.acked.items() if m.end > cut]
            for k in gone:
                del self.acked[k]
            self.stats.lost_to_flips += len(gone)
            self.flipped = {f for f in self.flipped if f < cut}
        self.pending = []
        return True

    def _step(self) -> bool:
        r = self.rng.random()
        if r < 0.42:
            return self._append()
        elif r < 0.66:
            return self._group_commit()
        elif r < 0.72:
            return self._flush()
        elif r < 0.79:
            return self._power_cut()
        elif r < 0.83:
            return self._clean_restart()
        elif r < 0.86:
            self.disk.fail_syncs += 1
        elif r < 0.88:
            # the next write, or one after it (the second write of a batch that crosses a segment end)
            self.disk.writes_before_failure = self.rng.choice((0, 1, 1, 2))
        elif r < 0.885 and self.bit_flips:
            self._flip()
        else:
            self._check()
        return True

    # ------------------------------------------------------------------ operations

    def _append(self) -> bool:
        store = self.store
        assert store is not None
        msgs = []
        for _ in range(self.rng.randint(1, 20)):
            n = self.rng.choice([0, 1, 17, 200, 1500, 5000])
            body = self.rng.randbytes(n)
            msgs.append(Message(self.rng.choice(TOPICS), body, f"m{self.next_id}", 1_700_000_000_000 + self.t))
            self.next_id += 1
        try:
            res = store.append_messages(msgs)
        except FsyncFailed:
            # the cut after a failed write needed an fsync, and that failed too: poisoned
            self.stats.write_failures += 1
            return self._after_fsync_failure()
        except OSError:
            # a failed write (ENOSPC, EIO): the produce is refused, nothing acknowledged; the
            # store goes on taking writes (the broker answers STORAGE_FULL and keeps running)
            self.stats.write_failures += 1
            return True
        self.stats.appends += 1
        self.stats.messages += len(msgs)
        for m, (phy, q, mid) in zip(msgs, res.records, strict=True):
            self.pending.append(_Msg(m.topic, q, phy, 0, mid, m.body))
        # each record ends where the next begins; the batch's last one at the append's end
        recs = self.pending[-len(msgs):]
        for a, b in zip(recs, recs[1:], strict=False):
            a.end = b.phy
        recs[-1].end = res.end_offset
        return True

    def _synced(self) -> None:
        """Messages the store now says are on the disk become acknowledgeable."""
        store = self.store
        assert store is not None
        synced = store.synced_offset
        still = []
        for m in self.pending:
            if m.end <= synced:
                self.acked[m.msg_id] = m
            else:
                still.append(m)
        self.pending = still

    def _group_commit(self) -> bool:
        """The write path's group commit: the sync begins, the loop may append more while it runs
        on its thread, then it finishes back on the loop (write_path.GroupFlusher)."""
        store = self.store
        assert store is not None
        self.stats.syncs += 1
        s = store.begin_log_sync()
        if self.rng.random() < 0.5:
            going = self._append()
            if self.store is not store:     # the append poisoned the store: that process is gone
                for f in s.files:
                    f.close()
                return going
        error: BaseException | None = None
        try:
            s.run()
        except FsyncFailed as e:
            error = e
        try:
            store.finish_log_sync(s, error)
        except FsyncFailed:
            return self._after_fsync_failure()
        if error is not None and self.bug is None:
            raise self._fail("store.fsync_failure_ignored", "finish_log_sync took a failed sync")
        self._synced()
        return True

    def _flush(self) -> bool:
        store = self.store
        assert store is not None
        try:
            store.flush()
        except FsyncFailed:
            return self._after_fsync_failure()
        self._synced()
        return True

    def _after_fsync_failure(self) -> bool:
        """The store is poisoned: every further call is refused, the process ends, and what a
        power cut leaves is what the next start finds (the failed sync's writes never reached
        the disk)."""
        store = self.store
        assert store is not None
        try:
            store.append_messages([Message("orders", b"after", "after-failure", 0)])
        except (StoreError, FsyncFailed):
            pass        # refused: the store stays poisoned
        else:
            raise self._fail("store.fsync_failure_ignored", "the store took an append after a failed fsync")
        store.abandon()
        self.disk.power_cut()
        return self._open()

    def _power_cut(self) -> bool:
        store = self.store
        assert store is not None
        store.abandon()
        self.disk.power_cut()
        if not self._open():
            return False
        self._check()
        return True

    def _clean_restart(self) -> bool:
        store = self.store
        assert store is not None
        try:
            store.close()           # flushes: everything written is on the disk after it
        except FsyncFailed:
            self.disk.power_cut()
            return self._open()
        for m in self.pending:
            self.acked[m.msg_id] = m
        self.pending = []
        if not self._open():
            return False
        self._check()
        return True

    def _flip(self) -> None:
        """A bit flip inside an acknowledged record's bytes on the disk."""
        if not self.acked:
            return
        m = self.acked[self.rng.choice(sorted(self.acked))]
        store = self.store
        assert store is not None and self.dir is not None
        base = store.segment_base(m.phy)
        key = str(self.dir / "commitlog" / f"{base:020d}")
        if key not in self.disk.files:
            return
        # within the record or the padding after it, in its segment
        pos = m.phy + self.rng.randrange(max(1, min(m.end, base + self.config.segment_bytes) - m.phy))
        self.disk.flip_bit(key, pos - base)
        self.flipped.add(pos)

    # ------------------------------------------------------------------ the check

    def _hit(self, m: _Msg) -> bool:
        return any(m.phy <= f < m.end for f in self.flipped)

    def _check(self) -> None:
        store = self.store
        assert store is not None
        self.stats.checks += 1
        # the log holds each queue offset of a topic once, in order (what a slave's copy checks)
        nxt: dict[str, int] = {}
        try:
            for info in store.scan():
                want = nxt.get(info.topic)
                if want is not None and info.queue_offset != want:
                    raise self._fail("store.queue_offsets", f"{info.topic}#{info.queue_offset} at {info.phy_offset} "
                                     f"follows #{want - 1}")
                nxt[info.topic] = info.queue_offset + 1
        except LogCorrupt:
            if not self.flipped:
                raise
            nxt = {}            # the walk stopped at a flipped record: nothing to compare the index with
        for topic, n in nxt.items():
            if store.max_queue_offset(topic) != n:
                raise self._fail("store.queue_offsets", f"{topic}: the index ends at {store.max_queue_offset(topic)}, "
                                 f"the log at {n}")
        for m in sorted(self.acked.values(), key=lambda x: x.phy):
            try:
                got = store.read_messages(m.topic, m.q, 1)
            except LogCorrupt:
                if self._hit(m):
                    continue        # found and refused: what a bit flip must come to
                raise self._fail("store.acked_lost", f"{m.msg_id} at {m.phy} unreadable (LogCorrupt)") from None
            ok = len(got) == 1 and got[0].msg_id == m.msg_id and got[0].body == m.body and got[0].phy_offset == m.phy
            if not ok:
                kind = "store.corruption_served" if self._hit(m) else "store.acked_lost"
                seen = (got[0].msg_id, got[0].phy_offset) if got else None
                raise self._fail(kind, f"{m.msg_id} ({m.topic}#{m.q} at {m.phy}) read back as {seen}")


def run_seed(seed: int, steps: int = 300, bug: str | None = None) -> StoreSimStats:
    return StoreSim(seed, steps=steps, bug=bug).run()


def first_catch(bug: str, max_seeds: int) -> tuple[int, Violation] | None:
    for seed in range(max_seeds):
        try:
            run_seed(seed, bug=bug)
        except Violation as v:
            return seed, v
    return None


if __name__ == "__main__":
    import sys
    import time

    n = int(sys.argv[1]) if len(sys.argv) > 1 else 50
    t0 = time.monotonic()
    total = StoreSimStats()
    for s in range(n):
        st = run_seed(s)
        total.messages += st.messages
        total.acked += st.acked
        total.restarts += st.restarts
        total.refusals += st.refusals
    print(f"{n} seeds in {time.monotonic() - t0:.1f} s: {total}")
    for b in STORE_BUGS:
        print(b, first_catch(b, 50))
