"""export-log on a real MessageStore filled by the test: every record, the EpochFile and the
offsets come out in the formats the pipeline reads."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from autoswitch.broker.storage.record import Message
from autoswitch.broker.storage.store import MessageStore
from autoswitch.broker.storage.store_config import StoreConfig
from autoswitch.pipeline import inputs

pytestmark = pytest.mark.pipeline


def _fill(d: Path) -> list:
    cfg = StoreConfig(segment_bytes=8 * 1024 * 1024, flush_mode="sync")
    s = MessageStore(d, cfg)
    s.append_epoch(1, 0)
    s.append_messages([Message(f"t{i % 3}", bytes([i % 256]) * (100 + i), f"id-{i}", 1000 + i) for i in range(300)])
    s.append_epoch(3, s.max_offset)
    s.append_messages([Message("t0", b"x" * 50, f"id-b{i}", 5000 + i) for i in range(40)])
    s.confirm_offset = s.max_offset
    s.flush()
    recs = list(s.scan())
    s.close()
    return recs


def test_export_log_cli_writes_index_epochs_and_offsets(tmp_path):
    data = tmp_path / "store"
    recs = _fill(data)
    out = tmp_path / "exp" / "g1-b2.index.jsonl"
    r = subprocess.run([sys.executable, "-m", "autoswitch", "pipeline", "export-log", "--data-dir", str(data),
                        "--group", "g1", "--broker-id", "2", "--out", str(out), "--segment-bytes", str(8 * 1024 * 1024),
                        "--copy-first", "--json"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    res = json.loads(r.stdout)["result"]
    assert res["records"] == len(recs) == 340
    src = inputs.find_log_sources(tmp_path / "exp")
    rows = inputs.read_rows(src["index"])       # validates every field against the documented schema
    assert [(x["phy_offset"], x["size"], x["crc"], x["msg_id"], x["epoch"]) for x in rows] == \
        [(x.phy_offset, x.size, x.crc, x.msg_id, x.epoch) for x in recs]
    assert {x["group"] for x in rows} == {"g1"} and {x["broker_id"] for x in rows} == {2}
    assert [x["queue_offset"] for x in rows if x["topic"] == "t1"] == list(range(100))
    ends = [x["phy_offset"] + x["size"] for x in rows]
    assert ends[-1] == res["max_offset"]
    ep = inputs.read_rows(src["epochs"])
    assert [(e["epoch"], e["start_offset"]) for e in ep] == [(1, 0), (3, rows[300]["phy_offset"])]
    rep = inputs.read_rows(src["replica"])
    assert rep == [{"group": "g1", "broker_id": 2, "max_offset": res["max_offset"],
                    "confirm_offset": res["confirm_offset"], "min_offset": 0}]
    assert res["confirm_offset"] == res["max_offset"]


def test_export_log_of_a_missing_dir_is_a_typed_error(tmp_path):
    r = subprocess.run([sys.executable, "-m", "autoswitch", "pipeline", "export-log", "--data-dir",
                        str(tmp_path / "none"), "--group", "g", "--broker-id", "1", "--out",
                        str(tmp_path / "x.index.jsonl"), "--json"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 1
    assert json.loads(r.stdout)["error"]["code"] == "PIPELINE_INPUT_NOT_FOUND"
