"""The fetch port's codec (broker/fetch_codec.py): round trips, frames split anywhere, and every
malformed input a typed FetchProtocolError."""

from __future__ import annotations

import struct

import pytest
from autoswitch.broker import fetch_codec as fc


def _frames(data: bytes, max_payload: int = 1 << 20, step: int = 1) -> list[fc.Frame]:
    dec = fc.FrameDecoder(max_payload)
    out: list[fc.Frame] = []
    for i in range(0, len(data), step):
        out += dec.feed(data[i:i + step])
    return out


def test_client_frames_round_trip_even_fed_a_byte_at_a_time():
    req = fc.FetchRequest("orders", 12_345, 1000, 500, 100)
    data = fc.encode_hello("tok-1") + fc.encode_fetch(req) + fc.encode_fetch(fc.FetchRequest("t", 0, 0, 0, 0))
    frames = _frames(data)
    assert [f.type for f in frames] == [fc.HELLO, fc.FETCH, fc.FETCH]
    assert fc.parse_hello(frames[0].payload) == "tok-1"
    assert fc.parse_fetch(frames[1].payload) == req
    assert fc.parse_hello(_frames(fc.encode_hello())[0].payload) == ""


def test_records_round_trip_without_copying_the_runs_on_the_way_out():
    runs = [(0, b"a" * 100), (4096, b"b" * 7)]
    reply = fc.RecordsReply(0, 4200, 42, runs)
    parts = fc.encode_records(reply)
    assert any(p is runs[0][1] for p in parts)          # handed to writelines as it is
    (frame,) = _frames(b"".join(parts), step=13)
    assert frame.type == fc.RECORDS
    assert fc.parse_records(frame.payload) == reply
    err = fc.RecordsReply(7, 0, 0, [], "not the master", "127.0.0.1:9")
    assert fc.parse_records(_frames(b"".join(fc.encode_records(err)))[0].payload) == err


def test_error_frames_round_trip():
    (f,) = _frames(fc.encode_error(fc.ERR_DENIED, "permission denied: Consume needs role reader"))
    assert f.type == fc.ERROR
    assert fc.parse_error(f.payload) == (fc.ERR_DENIED, "permission denied: Consume needs role reader")


@pytest.mark.parametrize(("data", "what"), [
    (b"GET / HTTP/1.1\r\n\r\n", "not a fetch frame"),
    (struct.pack(">2sBBI", b"AF", 2, fc.FETCH, 0), "not a fetch frame"),
    (struct.pack(">2sBBI", b"AF", 1, 99, 0), "unknown frame type"),
    (struct.pack(">2sBBI", b"AF", 1, fc.FETCH, fc.MAX_CLIENT_PAYLOAD + 1), "more than"),
])
def test_bad_frames_are_refused_before_anything_is_buffered(data, what):
    with pytest.raises(fc.FetchProtocolError, match=what):
        fc.FrameDecoder(fc.MAX_CLIENT_PAYLOAD).feed(data)


def test_bad_payloads_are_typed_errors():
    good = fc.encode_fetch(fc.FetchRequest("orders", 1, 1, 0, 0))[fc.FRAME.size:]
    with pytest.raises(fc.FetchProtocolError, match="too short"):
        fc.parse_fetch(good[:5])
    with pytest.raises(fc.FetchProtocolError, match="topic length"):
        fc.parse_fetch(good + b"x")
    with pytest.raises(fc.FetchProtocolError, match="not UTF-8"):
        fc.parse_fetch(good[:-2] + b"\xff\xfe")
    with pytest.raises(fc.FetchProtocolError, match="not UTF-8"):
        fc.parse_hello(b"\xff")
    with pytest.raises(fc.FetchProtocolError, match="longer than"):
        fc.parse_hello(b"x" * (fc.MAX_TOKEN_BYTES + 1))
    rec = b"".join(fc.encode_records(fc.RecordsReply(0, 10, 2, [(0, b"abcdef")])))[fc.FRAME.size:]
    with pytest.raises(fc.FetchProtocolError, match="longer than its frame"):
        fc.parse_records(rec[:-1])
    with pytest.raises(fc.FetchProtocolError, match="trailing"):
        fc.parse_records(rec + b"x")
    with pytest.raises(fc.FetchProtocolError, match="out of bounds"):
        fc.parse_records(struct.pack(">iqqIHH", 0, 0, 0, fc.MAX_RUNS + 1, 0, 0))
    with pytest.raises(fc.FetchProtocolError, match="too short"):
        fc.parse_records(b"\x00" * 4)
    with pytest.raises(ValueError):
        fc.encode_fetch(fc.FetchRequest("", 0, 0, 0, 0))


def test_a_header_is_checked_alone_before_its_payload_is_read():
    head = fc.encode_hello("abc")[:fc.FRAME.size]
    assert fc.parse_header(head, 100) == (fc.HELLO, 3)
    with pytest.raises(fc.FetchProtocolError, match="more than 2"):
        fc.parse_header(head, 2)


def test_produce_frames_carry_protobuf_and_only_they_may_be_long():
    from autoswitch.proto import broker_pb2 as pb

    req = pb.ProduceRequest(topic="t", messages=[pb.ProduceMessage(body=b"x" * 9000, msg_id="m")])
    data = fc.encode_message(fc.PRODUCE, req.SerializeToString())
    dec = fc.FrameDecoder(fc.MAX_CLIENT_PAYLOAD, max_produce=1 << 16)
    [f] = [x for i in range(0, len(data), 1000) for x in dec.feed(data[i:i + 1000])]
    assert f.type == fc.PRODUCE and pb.ProduceRequest.FromString(f.payload) == req
    # the same length on a FETCH frame, or a PRODUCE past the produce limit: refused unread
    with pytest.raises(fc.FetchProtocolError, match="more than 8192"):
        fc.FrameDecoder(fc.MAX_CLIENT_PAYLOAD, max_produce=1 << 16).feed(fc.FRAME.pack(fc.MAGIC, 1, fc.FETCH, 9000))
    with pytest.raises(fc.FetchProtocolError, match="more than 65536"):
        fc.FrameDecoder(fc.MAX_CLIENT_PAYLOAD, max_produce=1 << 16).feed(fc.FRAME.pack(fc.MAGIC, 1, fc.PRODUCE, 65537))
    # a port without produce (max_produce 0) holds PRODUCE frames to the small limit
    with pytest.raises(fc.FetchProtocolError, match="more than 8192"):
        fc.FrameDecoder(fc.MAX_CLIENT_PAYLOAD).feed(fc.FRAME.pack(fc.MAGIC, 1, fc.PRODUCE, 9000))
    with pytest.raises(AssertionError):
        fc.encode_message(fc.FETCH, b"")
