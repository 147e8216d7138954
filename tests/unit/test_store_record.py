"""Record format: encode/parse, and the walker's validity rules."""

from __future__ import annotations

import struct

import pytest
from autoswitch.broker.storage import record as rec
from autoswitch.broker.storage.store_errors import BadMessage, LogCorrupt


def one(topic=b"t", mid=b"m1", body=b"hello", q=7, ts=123, epoch=3) -> bytes:
    return rec.encode_message(topic, mid, body, q, ts, epoch)


def test_round_trip():
    b = one()
    assert len(b) == rec.HEADER_SIZE + 1 + 2 + 5
    info, body = rec.parse_record(b, 0, len(b), 1000)
    assert (info.topic, info.msg_id, info.queue_offset, info.born_ts_ms, info.epoch, info.size) == (
        "t", "m1", 7, 123, 3, len(b)
    )
    assert body == b"hello" and info.phy_offset == 1000 and not info.padding


def test_encode_limits():
    with pytest.raises(BadMessage):
        rec.encode_message(b"", b"m", b"x", 0, 0, 1)
    with pytest.raises(BadMessage):
        rec.encode_message(b"t" * 256, b"m", b"x", 0, 0, 1)
    with pytest.raises(BadMessage):
        rec.encode_message(b"t", b"m" * 129, b"x", 0, 0, 1)


def test_walk_collects_index_entries():
    data = one(q=0) + one(topic=b"u", q=5) + one(q=1)
    end, why, topics = rec.walk(data, 0, len(data), 10_000, 500, collect=True)
    n = len(one())
    assert (end, why) == (len(data), None)
    assert topics == {b"t": [0, [500, 500 + 2 * n], [n, n]], b"u": [5, [500 + n], [len(one(topic=b"u"))]]}


def test_walk_rejects_out_of_sequence_queue_offsets():
    data = one(q=0) + one(q=2)
    end, why, _ = rec.walk(data, 0, len(data), 10_000, 0, collect=True)
    assert end == len(one()) and "sequence" in why


@pytest.mark.parametrize(
    "mutate, reason",
    [
        (lambda b: b[:4] + struct.pack(">I", 0) + b[8:], "bad length 0"),  # zero-length record
        (lambda b: bytes(len(b)), "bad length 0"),  # zero-filled
        (lambda b: b[:-1], "past end"),  # torn
        (lambda b: b[:-1] + bytes([b[-1] ^ 0x40]), "crc"),  # bit flip in the body
        (lambda b: b[:8] + b"\x00" + b[9:], "magic"),
    ],
)
def test_walk_stops_at_invalid(mutate, reason):
    good = one()
    data = good + mutate(one())
    end, why, _ = rec.walk(data, 0, len(data), 10_000, 0)
    assert end == len(good)
    assert reason in why
    with pytest.raises(LogCorrupt):
        rec.parse_record(data, end, len(data), end)


def test_padding_must_end_at_segment_end():
    pad = rec.encode_padding(100, 1)
    assert rec.walk(pad, 0, 100, 100, 0) == (100, None, None)
    end, why, _ = rec.walk(pad, 0, 100, 200, 0)
    assert end == 0 and "padding" in why
    info, body = rec.parse_record(pad, 0, 100, 0)
    assert info.padding and body == bytes(60)


def test_message_must_leave_room_for_padding():
    b = one()
    # segment end 10 bytes after the record: no padding header could fill that gap
    end, why, _ = rec.walk(b, 0, len(b), len(b) + 10, 0)
    assert end == 0 and "padding" in why
    assert rec.walk(b, 0, len(b), len(b), 0)[1] is None
    assert rec.walk(b, 0, len(b), len(b) + rec.HEADER_SIZE, 0)[1] is None


def test_max_record_enforced():
    b = one(body=b"x" * 100)
    end, why, _ = rec.walk(b, 0, len(b), 10_000, 0, max_record=len(b) - 1)
    assert end == 0 and "limit" in why

