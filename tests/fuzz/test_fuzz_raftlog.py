"""Fuzz the Raft log reader: arbitrary bytes give valid contiguous entries or RaftStorageCorrupt,
never another exception; damage to a valid log gives a prefix (torn tail) or RaftStorageCorrupt,
never different entries. The committed corpus (tests/fuzz/corpus/raftlog/) is replayed."""

from __future__ import annotations

from pathlib import Path

import pytest
from autoswitch.controller.raft import codec
from autoswitch.controller.raft.errors import RaftStorageCorrupt
from autoswitch.controller.raft.messages import Entry, EntryKind, HardState
from hypothesis import given, settings
from hypothesis import strategies as st

CORPUS = Path(__file__).parent / "corpus" / "raftlog"


def read(buf: bytes) -> list[Entry] | None:
    """Entries, or None for a typed corruption error; anything else propagates and fails."""
    try:
        out = codec.read_log_bytes(buf)
    except RaftStorageCorrupt as exc:
        assert exc.path == "<bytes>" and exc.code == "RAFT_STORAGE_CORRUPT"
        return None
    for a, b in zip(out, out[1:], strict=False):
        assert b.index == a.index + 1 and b.term >= a.term
    return out


entry_lists = st.lists(st.tuples(st.integers(0, 3), st.binary(max_size=40), st.booleans()), min_size=1, max_size=6)


def build(frames_spec) -> tuple[bytes, list[list[Entry]]]:
    """One entry frame per spec item; a hard-state frame after each noop (as a new leader writes)."""
    frames, idx, term, out = [], 1, 1, b""
    for bump, data, noop in frames_spec:
        term += bump
        e = Entry(idx, term, b"" if noop else data, EntryKind.NOOP if noop else EntryKind.NORMAL)
        frames.append([e])
        out += codec.encode_frame([e])
        if noop:
            out += codec.encode_hard_state_frame(HardState(term, "n1", idx - 1))
        idx += 1
    return out, frames


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=600))
def test_arbitrary_bytes_give_entries_or_typed_error(buf):
    read(buf)


@settings(max_examples=100, deadline=None)
@given(st.binary(max_size=200), entry_lists)
def test_valid_log_with_garbage_prefix_or_suffix_is_typed(garbage, spec):
    good, _ = build(spec)
    read(garbage + good)
    read(good + garbage)


@settings(max_examples=120, deadline=None)
@given(entry_lists, st.data())
def test_truncated_valid_log_reads_as_a_prefix(spec, data):
    buf, frames = build(spec)
    cut = data.draw(st.integers(0, len(buf)))
    out = read(buf[:cut])
    flat = [e for f in frames for e in f]
    assert out is not None and out == flat[: len(out)]


@settings(max_examples=120, deadline=None)
@given(entry_lists, st.data())
def test_byte_flip_gives_prefix_or_typed_error_never_other_entries(spec, data):
    buf, frames = build(spec)
    pos = data.draw(st.integers(0, len(buf) - 1))
    bit = data.draw(st.integers(0, 7))
    bad = bytearray(buf)
    bad[pos] ^= 1 << bit
    out = read(bytes(bad))
    flat = [e for f in frames for e in f]
    if out is not None:
        # a flip in the last frame is a torn tail: a prefix (all entries if it hit a trailing hard state)
        assert out == flat[: len(out)]
        if len(out) == len(flat):
            scan = codec.scan_segment(buf, "<orig>", is_last=True)
            last_hs = max((off for off, _ in scan.hard_states), default=-1)
            assert last_hs > max(off for off, _ in scan.frames) and pos >= last_hs


EXPECTED = {
    "valid_two_frames.bin": [(1, 1), (2, 1), (3, 2)],
    "valid_overwrite.bin": [(1, 1), (2, 3)],
    "torn_half_frame.bin": [(1, 1), (2, 1)],
    "torn_zero_tail.bin": [(1, 1), (2, 1)],
    "corrupt_first_frame.bin": None,
    "empty.bin": [],
    "magic_only.bin": [],
    "valid_with_hardstate.bin": [(1, 1), (2, 1), (3, 2)],
    "torn_hardstate.bin": [(1, 1), (2, 1)],
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_corpus_replays_to_its_expected_outcome(name):
    out = read((CORPUS / name).read_bytes())
    want = EXPECTED[name]
    assert (None if out is None else [(e.index, e.term) for e in out]) == want


def test_every_corpus_file_is_covered():
    assert sorted(p.name for p in CORPUS.iterdir()) == sorted(EXPECTED)
