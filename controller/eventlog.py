"""<data-dir>/events.jsonl: the applied-event history, one JSON object per line, in Raft index order.

Written from the apply path on every node, so each node has the full history. After a restart
the Raft log may re-apply entries already recorded (those after the last snapshot); each line
carries its Raft index and indices at or below the last recorded one are skipped, so the file
holds each applied entry once. It is a history for operators and the pipeline, not a source of
truth: the Raft log and snapshots are. A torn last line (crash mid-write) is cut off at open.
"""

from __future__ import annotations

import json
import os
from array import array
from pathlib import Path
from typing import Any

from autoswitch.base.log import get_logger

_log = get_logger("controller.eventlog")

MAX_LINE_BYTES = 1 << 20

# A line is json.dumps(rec, default=str, separators=(",", ":"), sort_keys=True) (ASCII-only).
_ENCODER = json.JSONEncoder(default=str, separators=(",", ":"), sort_keys=True)
_esc = json.encoder.encode_basestring_ascii   # what that encoder uses for every string
# The keys of history.event_history_record (the only records the controller writes).
_HISTORY_KEYS = frozenset({"ts_ms", "index", "group", "event", "master_broker_id", "master_epoch",
                           "sync_state_set", "sync_state_set_epoch", "reason", "unclean"})
_N_HISTORY_KEYS = len(_HISTORY_KEYS)


def _history_line(rec: dict[str, Any]) -> str | None:
    """The JSON text of an event history record, byte-identical to ``_ENCODER.encode(rec)``, or
    None when ``rec`` is not of the plain shape this handles (then the encoder does it)."""
    if type(rec) is not dict or len(rec) != _N_HISTORY_KEYS:
        return None
    try:   # a plain dict of ten keys, all of these: exactly the history keys
        event, group, index, master, mepoch = rec["event"], rec["group"], rec["index"], \
            rec["master_broker_id"], rec["master_epoch"]
        reason, sss, sepoch, ts, unclean = rec["reason"], rec["sync_state_set"], rec["sync_state_set_epoch"], \
            rec["ts_ms"], rec["unclean"]
    except KeyError:
        return None
    if not (type(event) is str and type(group) is str and type(reason) is str and type(index) is int
            and type(mepoch) is int and type(sepoch) is int and type(ts) is int
            and (master is None or type(master) is int) and type(sss) is list
            and (unclean is True or unclean is False)):
        return None
    for x in sss:
        if type(x) is not int:
            return None
    # Sorted key order; an exact int formats as its repr, like the encoder writes it.
    return (f'{{"event":{_esc(event)},"group":{_esc(group)},"index":{index},'
            f'"master_broker_id":{"null" if master is None else master},"master_epoch":{mepoch},'
            f'"reason":{_esc(reason)},"sync_state_set":[{",".join(map(str, sss))}],'
            f'"sync_state_set_epoch":{sepoch},"ts_ms":{ts},"unclean":{"true" if unclean else "false"}}}')


class EventLog:
    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._offsets = array("q")      # byte offset of each line start; bounded by file size / 8
        self.last_index = 0
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
                pos += len(raw)
                good = pos
        if good != self.path.stat().st_size:
            _log.warning("events_torn_tail_cut", path=str(self.path), keep_bytes=good)
            with open(self.path, "r+b") as f:
                f.truncate(good)

    def __len__(self) -> int:
        return len(self._offsets)

    def append(self, index: int, record: dict[str, Any]) -> bool:
        if index <= self.recovered_index:
            return False
        assert index >= self.last_index, f"event index went back: {index} < {self.last_index}"
        if record.get("index") is not index:
            record = {**record, "index": index}
        line = _history_line(record)
        if line is None:
            line = _ENCODER.encode(record)
        data = line.encode() + b"\n"
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
