"""Issue 34 item 2: a format version newer than this release reads is refused by name, never
taken for damage. Above all the commit log: a whole record of a later record version at the tail
is not a torn write, and cutting it (what recovery does to a torn tail) would drop what a newer
release acknowledged before a downgrade."""

from __future__ import annotations

import struct
import zlib

import pytest
from autoswitch.broker.storage import checkpoint, record
from autoswitch.broker.storage.store import MessageStore
from autoswitch.controller.state.sm_snapshot import decode_snapshot, encode_snapshot
from autoswitch.controller.state.sm_state import ControllerState
from autoswitch.epochfile import file as epochfile
from autoswitch.epochfile.cache import EpochCache

from autoswitch.base.crcfile import seal, sealed_body
from autoswitch.base.errors import FormatTooNew
from tests.unit.test_store_helpers import SMALL, fill, open_store
from tests.unit.test_store_recovery import last_segment


def _newer_record(rec: bytes) -> bytes:
    """The same record as a later version would write it: version byte + 1, CRC recomputed."""
    b = bytearray(rec)
    b[9] = record.VERSION + 1
    struct.pack_into(">I", b, 0, zlib.crc32(bytes(b[4:])))
    return bytes(b)


def test_a_newer_record_at_the_tail_is_refused_not_cut(tmp_path):
    s = open_store(tmp_path)
    fill(s, 20)
    s.flush()
    s.abandon()
    seg = last_segment(tmp_path)
    before = seg.read_bytes()
    end = len(before.rstrip(b"\0"))
    rec = record.encode_message(b"t", b"from-a-newer-release", b"x" * 32, 0, 1, 1)
    seg.write_bytes(before[:end] + _newer_record(rec) + before[end + len(rec):])
    written = seg.read_bytes()
    with pytest.raises(FormatTooNew) as e:
        MessageStore(tmp_path, SMALL)
    assert e.value.details["found"] == record.VERSION + 1 and "commit log" in e.value.message
    assert seg.read_bytes() == written, "recovery changed the file it refused"


def test_a_damaged_newer_looking_record_is_still_a_torn_tail(tmp_path):
    """The version byte alone proves nothing: without a matching CRC it is damage (cut as before)."""
    rec = record.encode_message(b"t", b"m", b"x" * 32, 0, 1, 1)
    bad = bytearray(_newer_record(rec))
    bad[-1] ^= 0xFF
    assert record.check_record(bytes(bad), 0, len(bad)) == "bad magic/version"
    assert record.newer_version(record.check_record(_newer_record(rec), 0, len(rec))) == record.VERSION + 1


def _bump_version(sealed: bytes, at: int, version: int) -> bytes:
    body = bytearray(sealed_body(sealed))
    struct.pack_into(">H", body, at, version)
    return seal(bytes(body))


def test_newer_epochfile_checkpoint_and_controller_snapshot_are_refused():
    cache = EpochCache()
    cache.append(1, 0)
    with pytest.raises(FormatTooNew) as e:
        epochfile.decode(_bump_version(epochfile.encode(cache), 4, epochfile.VERSION + 1), "epochs")
    assert "EpochFile epochs" in e.value.message
    with pytest.raises(FormatTooNew):
        checkpoint.decode(_bump_version(checkpoint.encode(checkpoint.Checkpoint()), 4, checkpoint.VERSION + 1),
                          "checkpoint")
    snap = bytearray(encode_snapshot(ControllerState(), 3))
    struct.pack_into(">H", snap, 4, 2)
    with pytest.raises(FormatTooNew):
        decode_snapshot(bytes(snap))
