"""EpochFile persistence: round trip, crash-safe save, corruption refused."""

from __future__ import annotations

import struct
import zlib

import pytest
from autoswitch.epochfile import EpochCache, EpochEntry, EpochFile, EpochFileCorrupt
from autoswitch.epochfile.file import decode, encode

from autoswitch.base.errors import CorruptionError, FormatTooNew


def sample() -> EpochCache:
    return EpochCache([EpochEntry(1, 0), EpochEntry(2, 100), EpochEntry(3, 100), EpochEntry(7, 1 << 40)])


def test_missing_file_is_empty(tmp_path):
    assert EpochFile(tmp_path / "epoch").load() == EpochCache()


def test_round_trip_and_no_temp_left(tmp_path):
    f = EpochFile(tmp_path / "epoch")
    f.save(sample())
    assert f.load() == sample()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["epoch"]
    f.save(EpochCache())
    assert f.load() == EpochCache()


def test_stale_temp_file_is_ignored(tmp_path):
    # crash after writing the temp file but before rename: the old file wins
    f = EpochFile(tmp_path / "epoch")
    f.save(sample())
    (tmp_path / "epoch.tmp").write_bytes(b"half written")
    assert f.load() == sample()
    f.save(EpochCache([EpochEntry(9, 5)]))
    assert f.load().last() == EpochEntry(9, 5)


@pytest.mark.parametrize(
    "mutate",
    [
        lambda b: b[:-1],  # truncated
        lambda b: b[:5],
        lambda b: b"",
        lambda b: b"\0" * len(b),  # zero-filled
        lambda b: b[:12] + bytes([b[12] ^ 1]) + b[13:],  # bit flip in an entry
        lambda b: b"XXXX" + b[4:],  # bad magic
        lambda b: b + b"\0",  # trailing garbage
    ],
)
def test_corrupt_file_raises_naming_path(tmp_path, mutate):
    path = tmp_path / "epoch"
    EpochFile(path).save(sample())
    path.write_bytes(mutate(path.read_bytes()))
    with pytest.raises(EpochFileCorrupt) as ei:
        EpochFile(path).load()
    assert str(path) in str(ei.value)
    assert isinstance(ei.value, CorruptionError)


def _with_crc(body: bytes) -> bytes:
    return body + struct.pack(">I", zlib.crc32(body))


def test_valid_crc_but_rule_breaking_entries_refused():
    body = struct.pack(">4sHHI", b"ASEP", 1, 0, 2) + struct.pack(">IQ", 2, 0) + struct.pack(">IQ", 1, 5)
    with pytest.raises(EpochFileCorrupt, match="rules"):
        decode(_with_crc(body))


def test_unknown_version_refused():
    # a later version (its CRC holds) is refused by name, not as damage (docs/compatibility.md)
    with pytest.raises(FormatTooNew, match="format version 2"):
        decode(_with_crc(struct.pack(">4sHHI", b"ASEP", 2, 0, 0)))
    with pytest.raises(EpochFileCorrupt, match="version"):
        decode(_with_crc(struct.pack(">4sHHI", b"ASEP", 0, 0, 0)))


def test_encode_is_deterministic():
    assert encode(sample()) == encode(sample().copy())
    assert decode(encode(sample())) == sample()
