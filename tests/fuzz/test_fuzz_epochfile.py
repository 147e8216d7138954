"""Fuzz the EpochFile parser: arbitrary bytes give EpochFileCorrupt, FormatTooNew (a later
version whose CRC holds: refused by name, not as damage) or a valid cache (which re-encodes to
the same bytes); never another exception. Seeds in
tests/fuzz/corpus/epochfile/ are replayed."""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

import pytest
from autoswitch.epochfile import EpochFileCorrupt
from autoswitch.epochfile.file import decode, encode
from hypothesis import given, settings
from hypothesis import strategies as st

from autoswitch.base.errors import FormatTooNew

CORPUS = Path(__file__).parent / "corpus" / "epochfile"


def check_parser(data: bytes) -> None:
    try:
        cache = decode(data, "fuzz")
    except EpochFileCorrupt as e:
        assert "fuzz" in str(e)
        return
    except FormatTooNew as e:
        assert "fuzz" in str(e) and e.details["found"] > e.details["reads"]
        return
    assert encode(cache) == data
    entries = cache.entries()
    assert all(a.epoch < b.epoch and a.start_offset <= b.start_offset for a, b in zip(entries, entries[1:], strict=False))


def with_crc(body: bytes) -> bytes:
    return body + struct.pack(">I", zlib.crc32(body))


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=200))
def test_arbitrary_bytes(data):
    check_parser(data)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2**32 - 1), st.integers(0, 2**64 - 1)), max_size=12), st.integers(0, 3))
def test_arbitrary_entries_with_valid_crc(entries, version):
    body = struct.pack(">4sHHI", b"ASEP", version, 0, len(entries)) + b"".join(
        struct.pack(">IQ", e, s) for e, s in entries
    )
    check_parser(with_crc(body))


@pytest.mark.parametrize("path", sorted(CORPUS.glob("*.bin")), ids=lambda p: p.name)
def test_corpus_replay(path):
    check_parser(path.read_bytes())
