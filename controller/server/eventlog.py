"""<data-dir>/events.jsonl: the applied-event history, one JSON object per line, in Raft index order.

Written from the apply path on every node, so each node has the full history. After a restart
the Raft log may re-apply entries already recorded (those after the last snapshot); each line
carries its Raft index and indices at or below the last recorded one are skipped, so the file
holds each applied entry once. It is a history for operators and the pipeline, not a source of
truth: the Raft log and snapshots are. A torn last line (crash mid-write) is cut off at open.

The decision records the last lines carry (``recovered_decisions``, the most recent
``DECISIONS_RECOVERED``) seed `admin explain` after a restart.
"""

from __future__ import annotations

import collections
import json
import os
from array import array
from pathlib import Path

from autoswitch.controller.state.history import HistoryRecord, encode_record

from autoswitch.base.log import get_logger

_log = get_logger("controller.eventlog")

MAX_LINE_BYTES = 1 << 20
DECISIONS_RECOVERED = 4096

class EventLog:
    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._offsets = array("q")      # byte offset of each line start; bounded by file size / 8
        self.last_index = 0
        self.recovered_decisions: collections.deque[str] = collections.deque(maxlen=DECISIONS_RECOVERED)
        self._recover()
        # One entry can produce several events (same index): dedup only what a previous run wrote.
        self.recovered_index = self.last_index
        self._f = open(self.path, "ab")
        self._pos = self._f.tell()      # where the next line starts (this object is the only writer)

    def _recover(self) -> None:
        if not self.path.exists():
            return
        good = 0
        with open(self.path, "rb") as f:
            pos = 0
            for raw in f:
                if not raw.endswith(b"\n"):
                    break
                try:
                    rec = json.loads(raw)
                except ValueError:
                    break
                self._offsets.append(pos)
                self.last_index = max(self.last_index, int(rec.get("index", 0)))
                if isinstance(d := rec.get("decision"), str) and d:
                    self.recovered_decisions.append(d)
                pos += len(raw)
                good = pos
        if good != self.path.stat().st_size:
            _log.warning("events_torn_tail_cut", path=str(self.path), keep_bytes=good)
            with open(self.path, "r+b") as f:
                f.truncate(good)

    def __len__(self) -> int:
        return len(self._offsets)

    def append(self, record: HistoryRecord) -> bool:
        """The record's line, unless a previous run of this node wrote its index already."""
        index = record.index
        if index <= self.recovered_index:
            return False
        assert index >= self.last_index, f"event index went back: {index} < {self.last_index}"
        data = encode_record(record) + b"\n"
        if len(data) > MAX_LINE_BYTES:
            _log.error("event_record_too_large", index=index, bytes=len(data))
            data = json.dumps({"index": index, "truncated": True}).encode() + b"\n"
        self._offsets.append(self._pos)
        try:
            # Buffered: flush() runs once per applied Raft batch (AppliedStateMachine.after_apply_batch)
            # and before every read, so readers never see a partial line from this process and a
            # write reply never leaves before its history line was handed to the OS. Durability
            # comes from the Raft log, not from this file.
            self._f.write(data)
        except BaseException:
            self._pos = self._f.tell()   # whatever part got buffered or written, as tell() saw it before
            raise
        self._pos += len(data)
        self.last_index = index
        return True

    def flush(self) -> None:
        self._f.flush()

    def read(self, from_line: int, max_lines: int) -> tuple[list[str], int, bool]:
        self._f.flush()
        n = len(self._offsets)
        if from_line >= n:
            return [], n, True
        end = min(n, from_line + max_lines)
        out = []
        with open(self.path, "rb") as f:
            f.seek(self._offsets[from_line])
            for _ in range(end - from_line):
                out.append(f.readline().decode().rstrip("\n"))
        return out, end, end >= n

    def close(self) -> None:
        try:
            self._f.flush()
            os.fsync(self._f.fileno())
        finally:
            self._f.close()
