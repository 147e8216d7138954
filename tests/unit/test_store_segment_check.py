"""A middle segment emptied or cut is found at start, and a read of one cut under a running store
answers LOG_CORRUPT (issue 29, item 9: it was not noticed at start and reads then crashed with
struct.error). Real files."""

from __future__ import annotations

import os

import pytest
from autoswitch.broker.storage.store import LogCorrupt

from tests.unit.test_store_helpers import fill, open_store


def _segments(root):
    return sorted((root / "commitlog").iterdir())


@pytest.mark.parametrize("keep", [0, 100, 4095])
def test_a_cut_middle_segment_refuses_to_open(tmp_path, keep):
    s = open_store(tmp_path)
    fill(s, 120)
    s.close()
    segs = _segments(tmp_path)
    assert len(segs) >= 4
    victim = segs[1]
    os.truncate(victim, keep)
    with pytest.raises(LogCorrupt) as e:
        open_store(tmp_path)
    assert e.value.code == "LOG_CORRUPT" and victim.name in str(e.value)


def test_reading_a_segment_cut_under_a_running_store_is_log_corrupt(tmp_path):
    s = open_store(tmp_path)
    fill(s, 120)
    victim = _segments(tmp_path)[1]
    base = int(victim.name)
    os.truncate(victim, 0)
    try:
        with pytest.raises(LogCorrupt) as e:
            s.read_raw(base, 1000)
        assert e.value.code == "LOG_CORRUPT"
        with pytest.raises(LogCorrupt):
            list(s.read_messages("a", 0, 10_000))
    finally:
        s.close()
