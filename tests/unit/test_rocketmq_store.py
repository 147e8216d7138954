"""A RocketMQ 5 broker's store read for the durability audit (pipeline/rocketmq_store.py).

tests/unit/data/rocketmq-store is a real one cut short: the first 30 records of a RocketMQ 5.2.0
broker's CommitLog (written by `make bench-rocketmq`), with a brokerIdentity, an epoch file (two
epochs, the second starting at the 21st record) and a checkpoint whose confirmPhyOffset is the
26th record's offset, in RocketMQ's own formats."""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path

import pytest
from autoswitch.pipeline import rocketmq_store as rs
from autoswitch.pipeline.errors import InputNotFound, MalformedInput

STORE = Path(__file__).parent / "data" / "rocketmq-store"


def test_records_epochs_and_offsets_of_a_real_store():
    recs = list(rs.records(STORE))
    assert len(recs) == 30 and recs[0].phy_offset == 0
    assert all(a.phy_offset + a.size == b.phy_offset for a, b in zip(recs, recs[1:], strict=False))
    assert [r.keys for r in recs[:3]] == ["autoswitch0", "autoswitch1", "autoswitch2"]
    assert all(r.topic == "BenchFailover" and len(r.msg_id) == 56 for r in recs)
    assert len({r.msg_id for r in recs}) == 30
    assert rs.identity(STORE) == ("C1", "broker-a", 2)
    assert rs.epochs(STORE) == [(1, 0), (2, recs[20].phy_offset)]
    assert rs.confirm_offset(STORE) == recs[25].phy_offset


def test_export_in_the_pipelines_row_formats(tmp_path):
    got = rs.export(STORE, tmp_path / "b2.index.jsonl")
    assert got["records"] == 30 and got["epoch_entries"] == 2
    rows = [json.loads(x) for x in (tmp_path / "b2.index.jsonl").read_text().splitlines()]
    assert {r["group"] for r in rows} == {"broker-a"} and {r["broker_id"] for r in rows} == {2}
    assert [r["epoch"] for r in rows] == [1] * 20 + [2] * 10
    replica = json.loads((tmp_path / "b2.replica.jsonl").read_text())
    assert replica["max_offset"] == rows[-1]["phy_offset"] + rows[-1]["size"]
    assert replica["confirm_offset"] == rows[25]["phy_offset"]
    from autoswitch.pipeline import schemas
    from autoswitch.pipeline.inputs import _check_row  # noqa: PLC2701 - the readers' own row check

    for r in rows:
        _check_row(r, schemas.LOG_INDEX, "index")
    _check_row(replica, schemas.REPLICA, "replica")


def test_a_torn_or_foreign_file_is_a_typed_error(tmp_path):
    store = tmp_path / "store"
    shutil.copytree(STORE, store)
    log = store / "commitlog" / "00000000000000000000"
    data = bytearray(log.read_bytes())
    struct.pack_into(">i", data, 253 + 4, 12345)             # the second record's magic
    log.write_bytes(bytes(data))
    with pytest.raises(MalformedInput, match="no RocketMQ record at offset 253"):
        list(rs.records(store))
    (store / "epochFileCheckpoint").write_text("3\n1\n1-0\n")
    with pytest.raises(MalformedInput, match="says 3 entries"):
        rs.epochs(store)
    (store / "brokerIdentity").write_text("nonsense")
    with pytest.raises(MalformedInput):
        rs.identity(store)
    with pytest.raises(InputNotFound):
        list(rs.records(tmp_path / "nowhere"))


def test_a_batch_records_own_id_is_its_first():
    # what a 5.2.0 broker stores for a message of a batch: its properties, then the batch's
    props = ("KEYS\x01batch0\x02UNIQ_KEY\x01AAAA0000\x02WAIT\x01true\x02MSG_REGION\x01DefaultRegion\x02"
             "UNIQ_KEY\x01AAAA0014\x02CLUSTER\x01C1\x02")
    assert rs._properties(props)["UNIQ_KEY"] == "AAAA0000"     # noqa: SLF001 - the parser's own rule
