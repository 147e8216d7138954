"""Pipelined replication appends: prepare_raw (checks) / RawWrite.write (bytes) / commit_raw."""

from __future__ import annotations

import threading

import pytest
from autoswitch.broker.store import BadBatch, LogCorrupt, MessageStore, OffsetMismatch, StoreError

from tests.unit.test_store_helpers import SMALL, fill, index_view, open_store, replicate, scan_view, snapshot


def _batches(m: MessageStore, max_bytes: int = 1500) -> list[tuple[int, bytes, int, int]]:
    out, pos = [], m.min_offset
    while pos < m.max_offset:
        e = m.epochs.find_by_offset(pos, m.max_offset)
        limit = m.epochs.end_offset(e.epoch, m.max_offset)
        data = m.read_raw(pos, max_bytes, limit)
        out.append((pos, data, e.epoch, e.start_offset))
        pos += len(data)
    return out


def test_pipelined_equals_append_raw(tmp_path):
    m = open_store(tmp_path / "m")
    fill(m, 60)
    ref = MessageStore(tmp_path / "ref", SMALL)
    replicate(m, ref)
    sl = MessageStore(tmp_path / "s", SMALL)
    pending = []
    for off, data, ep, es in _batches(m):
        if pending and sl.epochs.last() is not None and sl.epochs.last().epoch != ep:
            for w in pending:
                sl.commit_raw(w)
            pending = []
        w = sl.prepare_raw(off, memoryview(bytearray(data)), ep, es)  # the caller's buffer may change
        t = threading.Thread(target=w.write)
        t.start()
        t.join()
        pending.append(w)
        assert sl.max_offset == pending[0].offset   # nothing is part of the log before commit
        if len(pending) == 2:
            sl.commit_raw(pending.pop(0))
    for w in pending:
        sl.commit_raw(w)
    assert sl.max_offset == m.max_offset == ref.max_offset
    assert index_view(sl) == index_view(ref) == scan_view(sl)
    sl.close()
    ref.close()
    ss, sr = snapshot(tmp_path / "s"), snapshot(tmp_path / "ref")
    for k in sr:
        if k.startswith(("commitlog", "index", "epochfile")):
            assert ss[k] == sr[k], k


def test_corrupt_next_batch_rejected_while_previous_pending(tmp_path):
    m = open_store(tmp_path / "m")
    fill(m, 30)
    b = _batches(m)
    sl = MessageStore(tmp_path / "s", SMALL)
    w = sl.prepare_raw(*b[0])
    off, data, ep, es = b[1]
    bad = bytearray(data)
    bad[-1] ^= 1
    with pytest.raises(LogCorrupt):
        sl.prepare_raw(off, bytes(bad), ep, es)
    with pytest.raises(OffsetMismatch):
        sl.prepare_raw(off + 1, data, ep, es)
    with pytest.raises(StoreError):
        sl.commit_raw(w)          # its write has not run
    w.write()
    assert sl.commit_raw(w) == off
    assert sl.pending_end == off


def test_new_epoch_refused_while_pending(tmp_path):
    m = open_store(tmp_path / "m")
    fill(m, 10)
    b = _batches(m)
    sl = MessageStore(tmp_path / "s", SMALL)
    sl.prepare_raw(*b[0])
    off, data, _ep, _es = b[1]
    with pytest.raises(BadBatch):
        sl.prepare_raw(off, data, 2, off)
    with pytest.raises(StoreError):
        sl.truncate(0)


def test_abort_cuts_uncommitted_bytes_and_recovery_agrees(tmp_path):
    m = open_store(tmp_path / "m")
    fill(m, 30)
    b = _batches(m)
    sl = MessageStore(tmp_path / "s", SMALL)
    w0 = sl.prepare_raw(*b[0])
    w0.write()
    sl.commit_raw(w0)
    committed = sl.max_offset
    w1 = sl.prepare_raw(*b[1])
    w1.write()                     # written, never committed (never acked)
    sl.abort_raw()
    assert sl.max_offset == sl.pending_end == committed
    sl.close()
    again = MessageStore(tmp_path / "s", SMALL)
    assert again.max_offset == committed
    assert index_view(again) == scan_view(again)
    # the same batch can be appended again after the abort
    assert again.append_raw(*b[1]) == committed + len(b[1][1])
