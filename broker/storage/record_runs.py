"""Consume as stored-record runs: the pure parts (planning, checking, decoding).

A ``Consume`` with ``record_runs`` set is answered with the topic's records exactly as the commit
log stores them, in contiguous runs, instead of one protobuf message per record. Kafka's fetch and
RocketMQ's pull both hand out stored bytes for the same reason: building a reply message per record
costs the broker ~12 us each in Python (a consumer keeping up with 100k msg/s would take most of a
core), a run costs one read and one C walk. The broker still CRC-checks every record and checks it
against its consume-index entry before serving it; the client checks the CRCs again (end to end).

Runs never cross a gap in the topic's index (another topic's record, segment padding) nor a
segment end, so each run holds only records of the requested topic, at consecutive queue offsets.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
from autoswitch.broker.storage import record as rec
from autoswitch.broker.storage.record import StoredMessage
from autoswitch.broker.storage.store_errors import LogCorrupt


@dataclass(frozen=True)
class ServedRuns:
    """What one consume serves: (phy offset, records) runs, how many records, and the next
    queue offset to ask for."""

    runs: list[tuple[int, bytes]]
    count: int
    next_q: int


@dataclass(frozen=True)
class RunPlan:
    """Entries [first, end) of the looked-up index slice, read as one byte range."""

    first: int
    end: int
    phy: int
    nbytes: int


def plan_runs(phys: np.ndarray, sizes: np.ndarray, max_phy: int | None, max_bytes: int) -> list[RunPlan]:
    """Split index entries into contiguous byte ranges. Stops before the first entry ending past
    ``max_phy`` (confirmOffset) and before the total would pass ``max_bytes`` (one record is
    always served, so a record larger than the budget does not stall the consumer)."""
    n = len(phys)
    if n == 0:
        return []
    ends = phys + sizes
    if max_phy is not None:
        n = int(np.searchsorted(ends > max_phy, True))  # ends grow with queue offset
    if n == 0:
        return []
    cum = np.cumsum(sizes[:n])
    n = max(1, int(np.searchsorted(cum, max_bytes, side="right")))
    breaks = np.flatnonzero(phys[1:n] != ends[: n - 1]) + 1
    starts = [0, *breaks.tolist()]
    stops = [*breaks.tolist(), n]
    return [RunPlan(a, b, int(phys[a]), int(ends[b - 1] - phys[a])) for a, b in zip(starts, stops, strict=True)]


def check_run(buf: bytes, phy: int, seg_end: int, topic: str, first_q: int, expect_phys: np.ndarray,
              max_record: int) -> int:
    """How many whole records of ``buf`` (read at ``phy``) are valid and are exactly the index
    entries ``expect_phys`` from queue offset ``first_q``; LogCorrupt otherwise. ``seg_end`` is
    the end of the segment holding ``phy`` (padding rules)."""
    stop, why, idx = rec.walk_fast(buf, 0, len(buf), seg_end - phy, phy, max_record, collect=True)
    if why is not None or stop != len(buf):
        raise LogCorrupt(f"invalid record on consume: {why or 'cut record'}", offset=phy + stop)
    assert idx is not None
    want = topic.encode()
    if set(idx) != {want}:
        raise LogCorrupt(f"consume index of {topic!r} points at another topic's record", offset=phy)
    q0, got_phys, _sizes = idx[want]
    n = len(got_phys)
    if int(q0) != first_q or n == 0 or n > len(expect_phys) or not np.array_equal(
            np.asarray(got_phys, dtype=np.int64), expect_phys[:n]):
        raise LogCorrupt(f"consume index entries {topic!r}#{first_q} do not match the records at {phy}", offset=phy)
    return n


def iter_run(run: bytes, phy: int) -> Iterator[StoredMessage]:
    """The messages of one run served at ``phy``, for a client. Every record is CRC-checked first
    (end to end, in C when built); a bad record or a padding record is LogCorrupt."""
    n = len(run)
    # No padding may sit in a run: with the "segment end" one header past the run, a padding
    # record (which must end exactly at the segment end) never validates.
    stop, why, _ = rec.walk_fast(run, 0, n, n + rec.HEADER_SIZE, phy)
    if why is not None or stop != n:
        raise LogCorrupt(f"invalid record in a record run: {why or 'cut record'}", offset=phy + stop)
    if rec.native is not None:
        # ~0.15 us per message instead of ~0.9 (bench.produce --consumer-group); on any surprise
        # the loop below says exactly what is wrong
        try:
            decoded = rec.native.decode_run(run, phy, StoredMessage)
        except (ValueError, UnicodeDecodeError):
            decoded = None
        if decoded is not None:
            yield from decoded
            return
    unpack = rec.HEADER.unpack_from
    pos = 0
    topic_b, topic = b"", ""
    while pos < n:
        (_crc, total, _m, _v, _t, _f, epoch, q, ts, tl, ml, _r, _bl) = unpack(run, pos)
        p = pos + rec.HEADER_SIZE
        if run[p : p + tl] != topic_b:  # decoded once per run: a run holds one topic
            topic_b = run[p : p + tl]
            topic = _utf8(topic_b, phy + pos)
        yield StoredMessage(topic, q, phy + pos, _utf8(run[p + tl : p + tl + ml], phy + pos), ts,
                            run[p + tl + ml : pos + total], epoch, total)
        pos += total


def _utf8(b: bytes, offset: int) -> str:
    try:
        return b.decode()
    except UnicodeDecodeError as e:
        raise LogCorrupt("record topic/msg_id is not UTF-8", offset=offset) from e
