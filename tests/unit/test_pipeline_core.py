"""Pure parts of the pipeline: master choice, percentiles, the generator's plan and ids, the report."""

from __future__ import annotations

import json

import numpy as np
import pytest
from autoswitch.pipeline.analyze import distribution, percentile
from autoswitch.pipeline.generate import generate, msg_ids
from autoswitch.pipeline.masters import Replica, choose_masters
from autoswitch.pipeline.report import LegendEntry, bars_svg, histogram_svg, render_html, timeline_svg

pytestmark = pytest.mark.pipeline


def test_master_from_events_wins_over_epochfile():
    reps = [Replica("g", 1, 500, 400, last_epoch=3), Replica("g", 2, 900, 400, last_epoch=2)]
    assert choose_masters(reps, {"g": 2})["g"].broker_id == 2
    assert choose_masters(reps, {"g": 2})["g"].source == "events"


def test_master_from_epochfile_highest_epoch_then_offset_then_id():
    reps = [Replica("g", 1, 500, 400, last_epoch=3), Replica("g", 2, 900, 400, last_epoch=2),
            Replica("g", 3, 600, 400, last_epoch=3)]
    c = choose_masters(reps)["g"]
    assert (c.broker_id, c.source) == (3, "epochfile")
    tie = [Replica("h", 2, 600, 1, last_epoch=3), Replica("h", 1, 600, 1, last_epoch=3)]
    assert choose_masters(tie)["h"].broker_id == 1


def test_no_master_event_falls_back_to_epochfile():
    reps = [Replica("g", 1, 500, 400, last_epoch=4), Replica("g", 2, 900, 400, last_epoch=2)]
    c = choose_masters(reps, {"g": None})["g"]
    assert (c.broker_id, c.source) == (1, "epochfile")


def test_duplicate_replica_rows_are_refused():
    with pytest.raises(AssertionError):
        choose_masters([Replica("g", 1, 1, 1), Replica("g", 1, 2, 2)])


def test_nearest_rank_percentile():
    v = [5000, 10000, 50000]
    assert percentile(v, 50) == 10000 and percentile(v, 90) == 50000 and percentile(v, 1) == 5000
    assert percentile([], 50) is None
    d = distribution([3, 1, 2, 4])
    assert (d["n"], d["min"], d["p50"], d["max"], d["mean"]) == (4, 1, 2, 4, 2.5)


def test_msg_ids_unique_hex_and_seeded():
    idx = np.arange(0, 200_000, dtype=np.uint64)
    a = msg_ids(idx, 1).to_pylist()
    assert len(set(a)) == len(a)
    assert all(len(x) == 32 and int(x, 16) >= 0 for x in a[:100])
    assert msg_ids(idx[:10], 2).to_pylist() != a[:10]


def test_generator_is_deterministic_and_plants_what_the_manifest_says(tmp_path):
    kw = dict(groups=4, messages=3000, seed=11, plant_losses=3, plant_divergences=2, plant_duplicates=2,
              chunk_rows=700)
    m1 = generate(tmp_path / "a", **kw)
    m2 = generate(tmp_path / "b", **kw)
    strip = lambda m: {k: v for k, v in m.items() if k != "seconds"}  # noqa: E731
    assert strip(m1) == strip(m2)
    assert m1["acked_rows"] == 3000 - 2   # the first attempt of each retried message is not acked
    import pyarrow.parquet as pq

    idx = pq.read_table(tmp_path / "a" / "logs" / "index").to_pandas()
    acks = pq.read_table(tmp_path / "a" / "acks").to_pandas()
    assert len(acks) == m1["acked_rows"] and len(idx) == m1["index_rows"]
    for loss in m1["planted"]["losses"]:
        assert loss["msg_id"] in set(acks.msg_id)
        assert loss["msg_id"] not in set(idx.msg_id)
    for d in m1["planted"]["duplicates"]:
        rows = idx[(idx.msg_id == d["msg_id"]) & (idx.group == d["group"])]
        assert sorted(set(rows.phy_offset)) == sorted(d["offsets"])
    for d in m1["planted"]["divergences"]:
        rows = idx[(idx.group == d["group"]) & (idx.phy_offset == d["phy_offset"])]
        assert rows.crc.nunique() == 2 and len(rows) == 3
    # offsets are contiguous per replica, and every replica ends at its max_offset
    reps = [json.loads(x) for x in (tmp_path / "a" / "logs" / "replica" / "replica.jsonl").read_text().splitlines()]
    for r in reps:
        rows = idx[(idx.group == r["group"]) & (idx.broker_id == r["broker_id"])].sort_values("phy_offset")
        ends = (rows.phy_offset + rows["size"]).to_numpy()
        assert (rows.phy_offset.to_numpy()[1:] == ends[:-1]).all()
        assert ends[-1] == r["max_offset"] >= r["confirm_offset"]
    ev = [json.loads(x) for x in (tmp_path / "a" / "events" / "events.jsonl").read_text().splitlines()]
    assert [e["index"] for e in ev] == list(range(1, len(ev) + 1))
    assert all(a["ts_ms"] <= b["ts_ms"] for a, b in zip(ev, ev[1:], strict=False))


def test_generator_refuses_impossible_plans(tmp_path):
    with pytest.raises(ValueError):
        generate(tmp_path, groups=5, messages=3, seed=0)
    with pytest.raises(ValueError):
        generate(tmp_path, groups=1, messages=40, seed=0, plant_losses=30)


def test_report_escapes_and_draws():
    svg = histogram_svg([1, 2, 2, 3], "t<x>", "ms")
    assert "t&lt;x&gt;" in svg and svg.count("<rect") == 20
    tl = timeline_svg([{"group": "g", "ts_ms": 0, "event": "ElectMaster", "master_broker_id": 1,
                        "master_epoch": 1, "unclean": False},
                       {"group": "g", "ts_ms": 50, "event": "NoMaster", "master_broker_id": None,
                        "master_epoch": 2, "unclean": False}], {"g": 100})
    lanes, legend = tl.split('<g class="legend"')
    assert lanes.count("<rect") == 1 and "NoMaster at" in lanes     # one tenure, one NoMaster tick
    # the colours explained: the one master's swatch, the NoMaster tick, the unclean mark
    assert legend.count("<rect") == 1 and ">master brokerId 1<" in legend
    assert ">NoMaster<" in legend and ">unclean election<" in legend
    bars = bars_svg([("a", 2), ("b", 1)], "t", colours=["#111111", "#222222"], legend=[LegendEntry("#111111", "one")])
    assert 'fill="#111111"' in bars and 'fill="#222222"' in bars and ">one<" in bars.split('class="legend"')[1]
    summary = {"groups": 1, "failovers": 0, "failovers_via_no_master": 0, "unclean_elections": 0,
               "sss": {"shrinks": 0, "expands": 0}, "flapping_brokers": [],
               "flap_rule": {"min_removals": 3, "window_ms": 600000},
               "time_to_elect_ms": distribution([]), "write_unavailable_ms": distribution([])}
    page = render_html(summary, [], [], [], [{"group": "<script>", "reason": "x"}], [], {})
    assert "<td>&lt;script&gt;</td>" in page and page.count('class="chart"') == 4


def test_pandas_peer_counts_the_planted_faults(tmp_path):
    from autoswitch.pipeline.audit_pandas import audit_pandas

    m = generate(tmp_path, groups=3, messages=2000, seed=3, plant_losses=4, plant_divergences=2, plant_duplicates=2)
    res = audit_pandas(tmp_path / "acks", tmp_path / "logs", tmp_path / "events")
    assert res["acked_rows"] == m["acked_rows"]
    assert res["counts"] == {"lost": 4, "moved": 0, "replica_missing": 12, "divergence": 2, "duplicates": 2}


def test_report_tables_show_wall_times_and_readable_headers():
    summary = {"groups": 1, "failovers": 1, "failovers_via_no_master": 0, "unclean_elections": 0,
               "sss": {"shrinks": 0, "expands": 0}, "flapping_brokers": [],
               "flap_rule": {"min_removals": 3, "window_ms": 600000},
               "time_to_elect_ms": distribution([12]), "write_unavailable_ms": distribution([40])}
    fo = {"group": "g1", "old_master": 1, "new_master": 2, "old_epoch": 1, "new_epoch": 2,
          "master_lost_ts_ms": 1764072000123, "elect_ts_ms": 1764072000135, "time_to_elect_ms": 12}
    page = render_html(summary, [fo], [], [], [], [], {})
    assert "<td>2025-11-25 12:00:00.123Z</td>" in page and "1764072000123" not in page
    assert "<th>master lost (UTC)</th>" in page and "<th>time to elect (ms)</th>" in page
    assert 'class="wide"' in page and "overflow-x: auto" in page
