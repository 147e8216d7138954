"""The master's side of range digests (ha/digest.py), beside HAMaster: its RangeBook, what each
version 4 connection is sent, the slaves' verdicts, and the quarantine's alert and repair.

The decisions are the cores': RangeBook cuts the ranges, MasterSession checks a report, the
SyncStateTracker quarantines, shrinks the set and says when a repair is safe. This module moves
frames and writes the log lines operators alert on (``replica_quarantined``,
``replica_repair_requested``, ``replica_quarantine_ended``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol

from autoswitch.ha.codec import Transfer
from autoswitch.ha.codec_v4 import (
    MAX_DIGEST_ENTRIES,
    DigestReport,
    Digests,
    Repair,
    encode_digests,
    encode_repair,
)
from autoswitch.ha.config import HAConfig
from autoswitch.ha.digest import MISMATCH, RangeBook
from autoswitch.ha.log_api import ReplicaLog
from autoswitch.ha.master_session import MasterSession
from autoswitch.ha.sync_state import SyncStateTracker

from autoswitch.base.errors import AutoswitchError


class _Writer(Protocol):
    def write(self, data: bytes) -> None: ...


class DigestConn(Protocol):
    @property
    def session(self) -> MasterSession: ...
    @property
    def writer(self) -> _Writer: ...
    @property
    def closed(self) -> bool: ...
    @property
    def log(self) -> Any: ...


class MasterDigests:
    def __init__(self, log: ReplicaLog, config: HAConfig, tracker: SyncStateTracker, logger: Any,
                 clock: Callable[[], float]) -> None:
        self.config = config
        self.tracker = tracker
        self._log = logger
        self._clock = clock
        self.book = RangeBook(log, config.digest_range_bytes, config.digest_history, config.digest_interval_s / 2,
                              clock()) if config.digests else None
        self.quarantines = 0          # replicas quarantined in this term (metrics)

    def tick(self) -> bool:
        """Housekeeping: cut ranges no transfer read for us, close an idle tail. True when new
        ranges completed (the connections have something to send)."""
        book, cfg = self.book, self.config
        if book is None:
            return False
        try:
            return book.tick(self._clock(), cfg.digest_catch_up_bytes, cfg.transfer_batch_size) > 0
        except AutoswitchError as e:     # our own log failed a read: the store logged where
            self._log.error("digest_book_failed", error=e.code, detail=e.message, cursor=book.cursor)
            return False

    def fed(self, frame: Transfer) -> bool:
        """A transfer just read these bytes: fold them when they are next in line."""
        book = self.book
        return book is not None and book.feed(frame.batch_start_offset, frame.body, frame.epoch, self._clock()) > 0

    def send_to(self, conn: DigestConn) -> None:
        """The ranges completed since this connection last heard (version 4 connections only)."""
        book, session = self.book, conn.session
        if book is None or not session.speaks_digests or book.seq <= session.digest_seq:
            return
        items = book.since(session.digest_seq, MAX_DIGEST_ENTRIES)
        if items:
            conn.writer.write(encode_digests(Digests(tuple(r for _, r in items))))
            session.digest_seq = items[-1][0]
        else:
            session.digest_seq = book.seq

    def on_report(self, conn: DigestConn, f: DigestReport) -> bool:
        """A slave's verdict. True when the SyncStateSet decisions may have changed."""
        f = conn.session.on_report(f)
        bid = conn.session.slave_id
        assert bid is not None
        tracker = self.tracker
        if f.verdict == MISMATCH:
            if tracker.quarantine(bid, f.epoch, f.start, f.end, "digest_mismatch", self._clock()):
                self.quarantines += 1
                # The alert: this replica holds other bytes than ours where it acknowledged them.
                conn.log.error("replica_quarantined", slave=bid, epoch=f.epoch, rangeStart=f.start, rangeEnd=f.end,
                               reason="digest_mismatch", inSyncStateSet=bid in tracker.sync_state_set,
                               note="kept out of the SyncStateSet; told to cut and fetch the range again "
                                    "once no set the controller may hold names it")
            return True
        q = tracker.quarantined.get(bid)
        if q is None:
            return False
        kept = self.book is not None and self.book.find(q.start) is not None
        if tracker.on_verified(bid, f.start, f.end, kept) is None:
            return False
        conn.log.warning("replica_quarantine_ended", slave=bid, epoch=q.epoch, rangeStart=q.start,
                         rangeEnd=q.end, verifiedTo=f.end)
        return True

    def send_repairs(self, conns: Mapping[int, DigestConn]) -> None:
        """Tell each quarantined replica that no set the controller may hold names any more to
        cut its log at the bad range (it then fetches the range again)."""
        for bid in self.tracker.repair_due():
            conn = conns.get(bid)
            if conn is None or conn.closed:
                continue
            q = self.tracker.quarantined[bid]
            conn.writer.write(encode_repair(Repair(q.epoch, q.start)))
            self.tracker.on_repair_sent(bid)
            conn.log.warning("replica_repair_requested", slave=bid, epoch=q.epoch, truncateTo=q.start, rangeEnd=q.end)
