"""Consume as stored-record runs (broker/storage/record_runs.py, MessageStore.read_record_runs): the same
messages as read_messages, every record checked on both sides, corruption detected."""

from __future__ import annotations

import random

import numpy as np
import pytest
from autoswitch.broker.storage import record as rec
from autoswitch.broker.storage.consume_index import topic_dir_name
from autoswitch.broker.storage.record_runs import iter_run, plan_runs
from autoswitch.broker.storage.store import LogCorrupt

from tests.unit.test_store_helpers import fill, open_store

BIG = 1 << 30


def decoded(served):
    return [m for phy, run in served.runs for m in iter_run(run, phy)]


@pytest.mark.parametrize("seed", range(6))
def test_runs_serve_exactly_what_read_messages_serves(tmp_path, seed):
    rnd = random.Random(seed)
    s = open_store(tmp_path)
    fill(s, rnd.randint(20, 120), topics=("a", "b", "a", "a", "c")[: rnd.randint(1, 5)],
         size_of=lambda i: rnd.randint(1, 600), batch=rnd.randint(1, 7))
    if seed % 2:
        s.apply_retention(keep_bytes=6000, keep_seconds=None)
    for _ in range(40):
        t = rnd.choice(sorted(s.topics()))
        q = rnd.randint(0, s.max_queue_offset(t) + 2)
        count = rnd.randint(1, 50)
        max_phy = rnd.choice([None, rnd.randint(0, s.max_offset)])
        want = s.read_messages(t, q, count, max_phy=max_phy)
        served = s.read_record_runs(t, q, count, max_phy, BIG)
        assert decoded(served) == want
        assert served.count == len(want)
        assert served.next_q == (want[-1].queue_offset + 1 if want else max(q, s.min_queue_offset(t)))
        for phy, run in served.runs:  # one topic, consecutive queue offsets, no gap inside a run
            ms = list(iter_run(run, phy))
            assert {m.topic for m in ms} == {t}
            assert [m.queue_offset for m in ms] == list(range(ms[0].queue_offset, ms[0].queue_offset + len(ms)))
            assert phy // 4096 == (phy + len(run) - 1) // 4096
        # a byte budget serves a prefix, whole records, at least one
        budget = rnd.randint(1, 3000)
        part = decoded(s.read_record_runs(t, q, count, max_phy, budget))
        assert part == want[: len(part)]
        assert (len(part) == 1 or sum(m.size for m in part) <= budget) if want else part == []


def test_plan_runs_stops_at_confirm_offset_and_splits_at_gaps():
    phys = np.array([0, 10, 20, 50, 60], dtype=np.int64)
    sizes = np.array([10, 10, 10, 10, 10], dtype=np.int64)
    assert [(p.first, p.end, p.phy, p.nbytes) for p in plan_runs(phys, sizes, None, BIG)] == [
        (0, 3, 0, 30), (3, 5, 50, 20)]
    assert [(p.first, p.end) for p in plan_runs(phys, sizes, 55, BIG)] == [(0, 3)]
    assert plan_runs(phys, sizes, 9, BIG) == []
    assert [(p.first, p.end) for p in plan_runs(phys, sizes, None, 25)] == [(0, 2)]
    assert [(p.first, p.end) for p in plan_runs(phys, sizes, None, 1)] == [(0, 1)]  # progress


def test_corrupt_record_is_refused_by_the_broker(tmp_path):
    s = open_store(tmp_path)
    fill(s, 5)
    seg = tmp_path / "commitlog" / f"{0:020d}"
    raw = bytearray(seg.read_bytes())
    raw[100] ^= 0xFF  # inside the second record (topic b)
    seg.write_bytes(bytes(raw))
    with pytest.raises(LogCorrupt):
        s.read_record_runs("b", 0, 10, None, BIG)
    assert len(decoded(s.read_record_runs("a", 0, 1, None, BIG))) == 1


def test_index_entry_pointing_at_another_topic_is_refused(tmp_path):
    s = open_store(tmp_path)
    fill(s, 6, topics=("a", "b"), batch=6)
    b_first = s.read_messages("b", 0, 1)[0]
    index_file = sorted((tmp_path / "index" / topic_dir_name("a")).iterdir())[0]
    data = bytearray(index_file.read_bytes())
    data[0:12] = b_first.phy_offset.to_bytes(8, "big") + b_first.size.to_bytes(4, "big")
    index_file.write_bytes(bytes(data))  # read through pread: the live store sees it
    with pytest.raises(LogCorrupt):
        s.read_record_runs("a", 0, 10, None, BIG)
    with pytest.raises(LogCorrupt):
        s.read_messages("a", 0, 10)  # the same rule as the per-message path


def test_client_checks_every_record_of_a_run(tmp_path):
    s = open_store(tmp_path)
    fill(s, 9, topics=("a",))
    (phy, run), = s.read_record_runs("a", 0, 9, None, BIG).runs
    assert [m.msg_id for m in iter_run(run, phy)] == [f"id-a-{i}" for i in range(9)]
    bad = bytearray(run)
    bad[len(run) // 2] ^= 0x01
    with pytest.raises(LogCorrupt):
        list(iter_run(bytes(bad), phy))
    with pytest.raises(LogCorrupt):
        list(iter_run(run[:-1], phy))  # cut record
    with pytest.raises(LogCorrupt):
        list(iter_run(run + rec.encode_padding(64, 1), phy))  # padding never sits in a run
