"""The convergence property on real stores: after any history of master changes
(zero-message epochs, the same master re-elected) and crashes (unsynced tails lost),
a slave that runs consistent point + truncate + transfer ends with commit log,
consume indexes and EpochFile byte-identical to its master's."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from autoswitch.broker.storage.store import MessageStore
from autoswitch.epochfile import NoConsistentPoint, entries_to_record, find_consistent_point
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.unit.test_store_helpers import SMALL, index_view, msg, snapshot

N = 3


def lose_tail(root: Path, synced: int) -> None:
    """Everything at/after ``synced`` never reached the disk (may tear a record)."""
    for p in (root / "commitlog").iterdir():
        base = int(p.name)
        if base >= synced:
            p.write_bytes(b"")
        elif base + SMALL.segment_bytes > synced:
            p.write_bytes(p.read_bytes()[: synced - base])


def sync_slave(slave: MessageStore, master: MessageStore, budget: int, batch: int) -> None:
    m_entries = master.epochs.entries()
    try:
        p = find_consistent_point(slave.epochs, slave.max_offset, m_entries, master.max_offset)
        slave.truncate(p.offset, p.epoch)
    except NoConsistentPoint:
        slave.reset(master.min_offset)
    while True:
        pos = slave.max_offset
        if pos < master.max_offset:
            e = master.epochs.find_by_offset(pos, master.max_offset)
            limit = master.epochs.end_offset(e.epoch, master.max_offset)
        else:
            e, limit = master.epochs.last(), pos
        recs = entries_to_record(slave.epochs, m_entries, e.epoch)
        if pos >= limit or budget <= 0:
            for r in recs:  # heartbeat: record the epochs, no bytes
                slave.append_epoch(r.epoch, r.start_offset)
            return
        for r in recs[:-1]:  # zero-message epochs learnt in the handshake
            slave.append_epoch(r.epoch, r.start_offset)
        data = master.read_raw(pos, batch, limit)
        assert data
        slave.append_raw(pos, data, e.epoch, e.start_offset)  # records epoch e itself when new
        budget -= len(data)


actions = st.lists(
    st.one_of(
        st.tuples(st.just("write"), st.integers(0, 6), st.integers(1, 700)),
        st.tuples(st.just("elect"), st.integers(0, N - 1)),
        st.tuples(st.just("replicate"), st.integers(0, N - 1), st.integers(0, 6000), st.integers(200, 3000)),
        st.tuples(st.just("flush"), st.integers(0, N - 1)),
        st.tuples(st.just("crash"), st.integers(0, N - 1), st.floats(0, 1)),
    ),
    max_size=14,
)


@settings(max_examples=20, deadline=None)
@given(actions)
def test_real_store_slave_converges(history):
    root = Path(tempfile.mkdtemp(prefix="store-prop-"))
    stores = [MessageStore(root / str(i), SMALL) for i in range(N)]
    try:
        master: int | None = None
        epoch = 0
        k = 0

        def elect(i: int) -> None:
            nonlocal epoch, master
            epoch += 1
            master = i
            stores[i].append_epoch(epoch, stores[i].max_offset)

        for act in history:
            kind = act[0]
            if kind == "write" and master is not None and act[1]:
                stores[master].append_messages([msg("ab"[j % 2], k + j, act[2]) for j in range(act[1])])
                k += act[1]
            elif kind == "elect":
                elect(act[1])
            elif kind == "replicate" and master is not None and act[1] != master:
                sync_slave(stores[act[1]], stores[master], act[2], act[3])
            elif kind == "flush":
                stores[act[1]].flush()
            elif kind == "crash":
                i = act[1]
                # the disk kept the synced part plus some random share of the unsynced tail
                synced = stores[i]._cp.log_synced
                kept = synced + int((stores[i].max_offset - synced) * act[2])
                stores[i].abandon()
                lose_tail(root / str(i), kept)
                stores[i] = MessageStore(root / str(i), SMALL)
                if i == master:
                    master = None
        if master is None:
            elect(0)
        m = stores[master]
        for i, s in enumerate(stores):
            if i != master:
                sync_slave(s, m, 1 << 30, 2500)
        for s in stores:
            s.flush()
        want = {k: v for k, v in snapshot(root / str(master)).items() if not k.startswith("checkpoint")}
        for i, s in enumerate(stores):
            assert s.max_offset == m.max_offset and s.epochs.entries() == m.epochs.entries()
            assert index_view(s) == index_view(m)
            got = {k: v for k, v in snapshot(root / str(i)).items() if not k.startswith("checkpoint")}
            assert got == want, i
    finally:
        for s in stores:
            s.abandon()
        shutil.rmtree(root)
