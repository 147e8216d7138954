"""A truncation copies the bytes it drops to quarantine/ first, whole records as they were
(broker/storage/quarantine.py), and `autoswitch dump-log DATA_DIR --quarantine` reads them back;
a cut larger than quarantine_max_bytes is not copied and says so."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace

from autoswitch.broker.storage import quarantine

from tests.unit.test_store_helpers import SMALL, fill, open_store


def test_a_cut_tail_is_quarantined_and_read_back(tmp_path):
    s = open_store(tmp_path)
    fill(s, 20)
    s.append_epoch(2, s.max_offset)
    res = fill(s, 10)
    cut, end = res[3].start_offset, s.max_offset
    dropped = {mid for r in res[3:] for _, _q, mid in r.records}
    s.truncate(cut, last_common_epoch=1)
    [f] = quarantine.files(tmp_path)
    assert (f.epoch, f.start, f.end) == (2, cut, end) and f.path.stat().st_size == end - cut
    s.close()
    out = subprocess.run([sys.executable, "-m", "autoswitch", "dump-log", str(tmp_path), "--quarantine", "--json"],
                         capture_output=True, text=True, timeout=60)
    rows = [json.loads(x) for x in out.stdout.splitlines()[:-1]]
    assert {r["msg_id"] for r in rows} == dropped and all(r["quarantine_file"] == f.path.name for r in rows)
    assert json.loads(out.stdout.splitlines()[-1])["result"]["stops"] == []


def test_a_cut_over_the_cap_is_not_copied(tmp_path):
    s = open_store(tmp_path, replace(SMALL, quarantine_max_bytes=10))
    fill(s, 10)
    res = fill(s, 10)
    s.truncate(res[0].start_offset)
    assert quarantine.files(tmp_path) == []
    s.truncate(s.max_offset)            # nothing dropped: nothing to copy
    assert quarantine.files(tmp_path) == []


def test_a_reset_quarantines_the_whole_log(tmp_path):
    s = open_store(tmp_path)
    res = fill(s, 12)
    start, end = s.min_offset, s.max_offset
    s.reset(end + 4096)
    [f] = quarantine.files(tmp_path)
    assert (f.epoch, f.start, f.end) == (1, start, end) and f.path.stat().st_size == end - start
    assert s.max_offset == s.min_offset == end + 4096
    s.close()
    out = subprocess.run([sys.executable, "-m", "autoswitch", "dump-log", str(tmp_path), "--quarantine", "--json"],
                         capture_output=True, text=True, timeout=60)
    assert {json.loads(x)["msg_id"] for x in out.stdout.splitlines()[:-1]} == {
        mid for r in res for _, _q, mid in r.records}
