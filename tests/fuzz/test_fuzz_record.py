"""Fuzz the commit-log record reader and the store checkpoint parser.

Arbitrary bytes give a typed error or a valid result, never another exception;
the vectorised walker always agrees with the reference walker; a store fed
arbitrary replicated bytes either refuses them whole or stays consistent.
Seeds in tests/fuzz/corpus/record/ are replayed.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest
from autoswitch.broker.storage import checkpoint as ckpt
from autoswitch.broker.storage import record as rec
from autoswitch.broker.storage.store import MessageStore, StoreConfig
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from autoswitch.base.errors import AutoswitchError, CorruptionError

CORPUS = Path(__file__).parent / "corpus" / "record"
SEG = 4096


def check_reader(data: bytes, seg_end: int | None = None) -> None:
    """The oracle: both walkers agree; every prefix they accept parses; the rest raises typed."""
    n = len(data)
    seg_end = n if seg_end is None else seg_end
    a = rec.walk(data, 0, n, seg_end, 1000, collect=True)
    b = rec.walk_fast(data, 0, n, seg_end, 1000, collect=True)
    assert a[0] == b[0] and (a[1] is None) == (b[1] is None)
    if a[1] is None:
        assert rec.topics_equal(a[2], b[2])
    pos = 0
    while pos < a[0]:
        info, body = rec.parse_record(data, pos, n, pos)
        assert info.size >= rec.HEADER_SIZE
        pos += info.size
    assert pos == a[0]
    if a[0] < n:
        try:
            rec.parse_record(data, a[0], n, a[0])
        except CorruptionError:
            pass
    try:
        ckpt.decode(data)
    except CorruptionError:
        pass


def valid_records(draw_ints: list[tuple[int, int, int]]) -> bytes:
    qs: dict[bytes, int] = {}
    out = []
    for topic_i, body_len, flag in draw_ints:
        t = [b"a", b"bb", b"t\x00", "\u00e9".encode()][topic_i]
        q = qs.get(t, 0)
        qs[t] = q + 1
        out.append(rec.encode_message(t, b"m%d" % flag, bytes([flag]) * body_len, q, flag, 1 + flag % 3))
    return b"".join(out)


record_lists = st.lists(st.tuples(st.integers(0, 3), st.integers(0, 300), st.integers(0, 255)), max_size=30)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=600))
def test_arbitrary_bytes(data):
    check_reader(data)


@settings(max_examples=200, deadline=None)
@given(record_lists, st.integers(0, 10_000), st.integers(0, 255), st.sampled_from(["flip", "cut", "zero", "append"]))
def test_mutated_valid_records(recs, where, byte, how):
    data = valid_records(recs)
    check_reader(data)
    assert rec.walk_fast(data, 0, len(data), len(data), 0)[1] is None
    if not data:
        return
    i = where % len(data)
    if how == "flip":
        mutated = data[:i] + bytes([data[i] ^ (byte or 1)]) + data[i + 1 :]
    elif how == "cut":
        mutated = data[:i]
    elif how == "zero":
        mutated = data[:i] + bytes(min(64, len(data) - i)) + data[i + 64 :]
    else:
        mutated = data + bytes([byte]) * (where % 50)
    check_reader(mutated)
    end = rec.walk(mutated, 0, len(mutated), len(mutated), 0)[0]
    if how in ("flip", "zero"):
        assert end <= i or mutated[:end] == data[:end]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.one_of(st.binary(max_size=400), record_lists.map(valid_records)), st.integers(0, 3))
def test_store_append_raw_arbitrary(data, epoch):
    d = Path(tempfile.mkdtemp(prefix="fuzz-store-"))
    try:
        s = MessageStore(d, StoreConfig(segment_bytes=SEG, max_message_bytes=1000, index_entries_per_file=4))
        data = data[:SEG]
        before = s.max_offset
        try:
            s.append_raw(0, data, max(epoch, 1), 0)
        except AutoswitchError:
            assert s.max_offset == before
        s.flush()
        scanned = [(r.topic, r.queue_offset, r.phy_offset) for r in s.scan()]
        indexed = [(t, m.queue_offset, m.phy_offset) for t in s.topics() for m in s.read_messages(t, 0, 1000)]
        assert sorted(scanned) == sorted(indexed)
        s.close()
        s = MessageStore(d, StoreConfig(segment_bytes=SEG, max_message_bytes=1000, index_entries_per_file=4))
        assert [(r.topic, r.queue_offset, r.phy_offset) for r in s.scan()] == scanned
        s.close()
    finally:
        shutil.rmtree(d)


@pytest.mark.parametrize("path", sorted(CORPUS.glob("*.bin")), ids=lambda p: p.name)
def test_corpus_replay(path):
    data = path.read_bytes()
    check_reader(data)
    check_reader(data, seg_end=len(data) + 100)
