"""HA codec: exact byte layouts, round trips, and every FrameError reason."""

from __future__ import annotations

import struct

import pytest
from autoswitch.ha import codec
from autoswitch.ha.codec import (
    Ack,
    MasterHandshake,
    MasterSideDecoder,
    SlaveHandshake,
    SlaveSideDecoder,
    Transfer,
    encode,
)
from autoswitch.ha.codec_v4 import DigestReport, Digests, Repair
from autoswitch.ha.digest import RangeDigest
from autoswitch.ha.errors import FrameError
from hypothesis import given, settings
from hypothesis import strategies as st

I64 = st.integers(0, 2**63 - 1)
I32 = st.integers(0, 2**31 - 1)


def test_exact_layouts_match_design_notes():
    assert encode(SlaveHandshake(7, True, False, version=0)) == struct.pack(">ihhq", 1, 1, 0, 7)
    assert len(encode(SlaveHandshake(7, version=2))) == 16
    assert encode(SlaveHandshake(7, False, True, version=2)) == struct.pack(">ihhq", 1, 0x200, 1, 7)
    # version 3: the slave's incarnation after the 16 bytes (i16 length + ASCII)
    assert encode(SlaveHandshake(7, False, True, incarnation="ab12", version=3)) == (
        struct.pack(">ihhq", 1, 0x300, 1, 7) + struct.pack(">h", 4) + b"ab12")
    # version 4: the same handshake; the version admits the digest frames
    assert encode(SlaveHandshake(7)) == struct.pack(">ihhq", 1, 0x400, 0, 7) + struct.pack(">h", 0)
    assert encode(Digests((RangeDigest(3, 100, 200, 2**64 - 1),))) == (
        struct.pack(">ii", 5, 28) + struct.pack(">iqqQ", 3, 100, 200, 2**64 - 1))
    assert encode(Repair(3, 100)) == struct.pack(">iiq", 6, 3, 100)
    assert encode(DigestReport(1, 3, 100, 200)) == struct.pack(">iiiqq", 5, 1, 3, 100, 200)
    assert encode(SlaveHandshake(7, False, True, version=1)) == struct.pack(">ihhq", 1, 0x100, 1, 7)
    assert encode(Ack(123)) == struct.pack(">iq", 2, 123)
    assert encode(MasterHandshake(900, 3, ((1, 0), (3, 500)))) == (
        struct.pack(">iiqi", 1, 24, 900, 3) + struct.pack(">iq", 1, 0) + struct.pack(">iq", 3, 500)
    )
    assert encode(Transfer(100, 2, 50, 90, b"xyz")) == struct.pack(">iiqiqq", 2, 3, 100, 2, 50, 90) + b"xyz"
    assert codec.TRANSFER_HEADER_SIZE == 36 and codec.MASTER_HANDSHAKE_HEADER_SIZE == 20
    # version 2: masterMinOffset after the entries, bodySize 12 N + 8
    assert encode(MasterHandshake(900, 3, ((1, 0), (3, 500)), 0)) == (
        struct.pack(">iiqi", 1, 32, 900, 3) + struct.pack(">iq", 1, 0) + struct.pack(">iq", 3, 500)
        + struct.pack(">q", 0)
    )


def _feed_split(dec, data: bytes, cut: int):
    dec.feed(data[:cut])
    out = dec.frames()
    dec.feed(data[cut:])
    return out + dec.frames()


@settings(max_examples=60, deadline=None)
@given(st.lists(st.one_of(
    st.builds(SlaveHandshake, st.integers(1, 2**63 - 1), st.booleans(), st.booleans(), st.integers(0, 2)),
    st.builds(SlaveHandshake, st.integers(1, 2**63 - 1), st.booleans(), st.booleans(), st.just(3),
              st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E), max_size=64)),
    st.builds(Ack, I64), st.builds(lambda v, e, a, n: DigestReport(v, e, a, a + n), st.integers(0, 1),
                                   st.integers(1, 2**31 - 1), st.integers(0, 2**62), st.integers(1, 2**40))),
                max_size=6), st.integers(0, 200))
def test_master_side_roundtrip(frames, cut):
    data = b"".join(encode(f) for f in frames)
    assert _feed_split(MasterSideDecoder(), data, min(cut, len(data))) == frames


@st.composite
def master_handshakes(draw):
    n = draw(st.integers(0, 5))
    epochs = sorted(draw(st.sets(st.integers(1, 2**31 - 1), min_size=n, max_size=n)))
    starts = sorted(draw(st.lists(st.integers(0, 10**12), min_size=n, max_size=n)))
    mx = draw(st.integers(starts[-1] if starts else 0, 2**62))
    # version 2 handshakes also carry masterMinOffset (<= the first start and the max)
    min_off = draw(st.one_of(st.none(), st.integers(0, starts[0] if starts else mx)))
    return MasterHandshake(mx, epochs[-1] if epochs else draw(I32), tuple(zip(epochs, starts, strict=True)), min_off)


@st.composite
def transfers(draw):
    start = draw(st.integers(0, 2**62))
    return Transfer(start, draw(I32), draw(st.integers(0, start)), draw(I64), draw(st.binary(max_size=64)))


RANGES = st.builds(lambda e, a, n, d: RangeDigest(e, a, a + n, d), st.integers(1, 2**31 - 1),
                   st.integers(0, 2**62), st.integers(1, 2**40), st.integers(0, 2**64 - 1))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.one_of(master_handshakes(), transfers(),
                          st.builds(Digests, st.lists(RANGES, max_size=4).map(tuple)),
                          st.builds(Repair, st.integers(1, 2**31 - 1), I64)), max_size=5), st.integers(0, 400))
def test_slave_side_roundtrip(frames, cut):
    data = b"".join(encode(f) for f in frames)
    assert _feed_split(SlaveSideDecoder(), data, min(cut, len(data))) == frames


def test_byte_by_byte_feeding():
    frames = [MasterHandshake(10, 1, ((1, 0),)), Transfer(0, 1, 0, 0, b"0123456789"), Transfer(10, 1, 0, 10)]
    dec = SlaveSideDecoder()
    out = []
    for b in b"".join(encode(f) for f in frames):
        dec.feed(bytes([b]))
        out += dec.frames()
    assert out == frames


@pytest.mark.parametrize("hs,reason", [
    (struct.pack(">iiqi", 1, 12 + 8, 900, 3) + struct.pack(">iq", 3, 500) + struct.pack(">q", 501), "bad_min_offset"),
    (struct.pack(">iiqi", 1, 8, 900, 0) + struct.pack(">q", 901), "bad_min_offset"),
    (struct.pack(">iiqi", 1, 12 + 4, 900, 3) + struct.pack(">iq", 3, 500) + b"\0" * 4, "body_not_entry_multiple"),
])
def test_version_2_master_handshake_is_checked(hs, reason):
    dec = SlaveSideDecoder()
    dec.feed(hs)
    with pytest.raises(FrameError) as ei:
        dec.frames()
    assert ei.value.reason == reason


def _master_err(data: bytes) -> str:
    dec = MasterSideDecoder()
    dec.feed(data)
    with pytest.raises(FrameError) as ei:
        dec.frames()
    # A broken decoder stays broken: no frame can be pulled out after garbage.
    with pytest.raises(FrameError):
        dec.next_frame()
    return ei.value.reason


def _slave_err(data: bytes, **kw) -> str:
    dec = SlaveSideDecoder(**kw)
    dec.feed(data)
    with pytest.raises(FrameError) as ei:
        dec.frames()
    with pytest.raises(FrameError):
        dec.feed(b"more")
    return ei.value.reason


@pytest.mark.parametrize("data,reason", [
    (struct.pack(">iiiqq", 5, 2, 1, 0, 10), "bad_digest_report"),      # verdict 2 does not exist
    (struct.pack(">iiiqq", 5, 0, 0, 0, 10), "bad_digest_report"),      # epoch 0
    (struct.pack(">iiiqq", 5, 1, 1, 10, 10), "bad_digest_report"),     # an empty range
])
def test_bad_digest_reports_are_refused(data, reason):
    assert _master_err(data) == reason


@pytest.mark.parametrize("data,reason", [
    (struct.pack(">ii", 5, 27), "bad_digests_size"),
    (struct.pack(">ii", 5, 28 * 1025), "bad_digests_size"),
    (struct.pack(">ii", 5, 28) + struct.pack(">iqqQ", 0, 0, 10, 1), "bad_digest_range"),
    (struct.pack(">ii", 5, 28) + struct.pack(">iqqQ", 1, 10, 10, 1), "bad_digest_range"),
    (struct.pack(">iiq", 6, 0, 10), "bad_repair"),
    (struct.pack(">iiq", 6, 1, -1), "bad_repair"),
])
def test_bad_digest_frames_from_a_master_are_refused(data, reason):
    assert _slave_err(data) == reason


@pytest.mark.parametrize("data,reason", [
    (struct.pack(">iq", 3, 0), "bad_state"),                         # SUSPEND is never sent on the wire
    (struct.pack(">iq", 0, 0), "bad_state"),
    (struct.pack(">iq", -1, 0), "bad_state"),
    (struct.pack(">iq", 2, -5), "negative_offset"),
    (struct.pack(">ihhq", 1, 0, 0, 0), "bad_broker_id"),
    (struct.pack(">ihhq", 1, 0, 0, -3), "bad_broker_id"),
    (struct.pack(">ihhq", 1, 2, 0, 1), "reserved_flag_bits"),
    (struct.pack(">ihhq", 1, 0, 0x100, 1), "reserved_flag_bits"),
    (struct.pack(">ihhq", 1, -1, 0, 1), "reserved_flag_bits"),
    (struct.pack(">ihhq", 1, 0x500, 0, 1), "unsupported_version"),
    (struct.pack(">ihhq", 1, 0x300, 0, 1) + struct.pack(">h", 65) + b"a" * 65, "bad_incarnation"),
    (struct.pack(">ihhq", 1, 0x300, 0, 1) + struct.pack(">h", -1), "bad_incarnation"),
    (struct.pack(">ihhq", 1, 0x300, 0, 1) + struct.pack(">h", 3) + b"a b", "bad_incarnation"),
])
def test_master_side_frame_errors(data, reason):
    assert _master_err(data) == reason


@pytest.mark.parametrize("data,reason", [
    (struct.pack(">iiqi", 4, 0, 0, 0), "bad_state"),
    (struct.pack(">iiqi", 1, -12, 0, 0), "negative_body_size"),
    (struct.pack(">iiqi", 1, 13, 0, 0), "body_not_entry_multiple"),
    (struct.pack(">iiqi", 1, 12 * 11, 0, 0), "too_many_epoch_entries"),
    (struct.pack(">iiqi", 1, 0, -1, 0), "negative_offset"),
    (struct.pack(">iiqi", 1, 0, 0, -1), "negative_epoch"),
    (struct.pack(">iiqi", 1, 24, 900, 3) + struct.pack(">iqiq", 3, 0, 1, 10), "bad_epoch_entries"),
    (struct.pack(">iiqi", 1, 24, 900, 3) + struct.pack(">iqiq", 1, 500, 3, 10), "bad_epoch_entries"),
    (struct.pack(">iiqi", 1, 12, 900, 1) + struct.pack(">iq", 1, 901), "bad_epoch_entries"),
    (struct.pack(">iiqi", 1, 12, 900, 1) + struct.pack(">iq", 0, 0), "bad_epoch_entries"),
    (struct.pack(">iiqi", 1, 12, 900, 5) + struct.pack(">iq", 1, 0), "last_epoch_mismatch"),
    (struct.pack(">ii", 2, -1), "negative_body_size"),
    (struct.pack(">ii", 2, 1001), "body_too_large"),                # rejected before the body arrives
    (struct.pack(">iiqiqq", 2, 0, -1, 1, 0, 0), "negative_offset"),
    (struct.pack(">iiqiqq", 2, 0, 10, 1, 0, -1), "negative_offset"),
    (struct.pack(">iiqiqq", 2, 0, 10, -1, 0, 0), "negative_epoch"),
    (struct.pack(">iiqiqq", 2, 0, 10, 1, 11, 0), "epoch_start_after_batch"),
])
def test_slave_side_frame_errors(data, reason):
    assert _slave_err(data, max_body_size=1000, max_epoch_entries=10) == reason


def test_incarnation_needs_version_3_and_printable_ascii():
    with pytest.raises(FrameError) as ei:
        encode(SlaveHandshake(7, version=2, incarnation="x"))
    assert ei.value.reason == "unsupported_field"
    with pytest.raises(FrameError) as ei:
        encode(SlaveHandshake(7, incarnation="a" * 65))
    assert ei.value.reason == "bad_incarnation"


def test_buffer_is_bounded():
    dec = MasterSideDecoder()
    dec.feed(struct.pack(">i", 1)[:3])
    with pytest.raises(FrameError) as ei:
        dec.feed(b"\x00" * (MasterSideDecoder.MAX_FEED + 100))
    assert ei.value.reason == "buffer_overflow"


def test_encoder_refuses_out_of_range_values():
    with pytest.raises(FrameError):
        encode(Ack(-1))
    with pytest.raises(FrameError):
        encode(Transfer(0, 2**31, 0, 0))
    with pytest.raises(FrameError):
        encode(SlaveHandshake(1, version=200))
