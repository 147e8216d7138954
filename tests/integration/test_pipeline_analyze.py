"""analyze's figures equal hand-computed ones on a small hand-written history, and its HTML
report renders in headless Chromium (screenshot not blank, script ran, no console errors)."""

from __future__ import annotations

import json
import shutil
import subprocess
import zlib
from pathlib import Path

import pytest
from autoswitch.pipeline import inputs
from autoswitch.pipeline.analyze import AnalyzeConfig, run_analyze

from tests.pipeline_fixtures import NoProgress, spark  # noqa: F401

pytestmark = pytest.mark.spark

# (index, ts_ms, group, event, master, master_epoch, sync_state_set, unclean)
EVENTS = [
    (1, 1_000, "g1", "RegisterBroker", None, 0, [], False),
    (2, 2_000, "g1", "ElectMaster", 1, 1, [1], False),
    (3, 2_100, "g1", "AlterSyncStateSet", 1, 1, [1, 2, 3], False),
    (4, 10_000, "g1", "AlterSyncStateSet", 1, 1, [1, 2], False),       # 3 removed
    (5, 20_000, "g1", "AlterSyncStateSet", 1, 1, [1, 2, 3], False),
    (6, 30_000, "g1", "AlterSyncStateSet", 1, 1, [1, 2], False),       # 3 removed
    (7, 40_000, "g1", "AlterSyncStateSet", 1, 1, [1, 2, 3], False),
    (8, 50_000, "g1", "AlterSyncStateSet", 1, 1, [1, 2], False),       # 3 removed: 3 in 40 s -> flapping
    (9, 60_000, "g1", "AlterSyncStateSet", 1, 1, [1, 2, 3], False),
    (10, 100_000, "g1", "ElectMaster", 2, 2, [2], False),              # failover 1 -> 2, no NoMaster
    (11, 100_500, "g1", "AlterSyncStateSet", 2, 2, [2, 3], False),
    (12, 200_000, "g1", "NoMaster", None, 3, [3], False),
    (13, 205_000, "g1", "ElectMaster", 3, 4, [3], True),               # failover 2 -> 3, unclean
    (14, 1_500, "g2", "ElectMaster", 1, 1, [1], False),
    (15, 1_600, "g2", "AlterSyncStateSet", 1, 1, [1, 2], False),
    (16, 700_000, "g2", "AlterSyncStateSet", 1, 1, [1], False),        # 2 removed once
    (17, 800_000, "g2", "ElectMaster", 1, 2, [1], False),              # same master, new epoch
    (18, 900_000, "g2", "NoMaster", None, 3, [], False),
    (19, 950_000, "g2", "ElectMaster", 1, 4, [1], False),              # failover after NoMaster
]
# (group, epoch, ack_ts_ms)
ACKS = [("g1", 1, 5_000), ("g1", 1, 90_000), ("g1", 2, 101_000), ("g1", 2, 150_000), ("g1", 4, 206_000),
        ("g1", 4, 207_000), ("g2", 1, 3_000), ("g2", 2, 850_000), ("g2", 4, 960_000)]


# the decision record one election carried (controller/state/explain.py); the others have none
SAID = "zone lost: za (none of its replicas alive); broker 3 elected (unclean)"
DECISIONS = {13: json.dumps({"group": "g1", "request": "ElectMaster", "outcome": "elected", "master": 3,
                             "summary": SAID, "zones_lost": ["za"]})}


def _write(tmp: Path) -> tuple[Path, Path]:
    ev = tmp / "events.jsonl"
    ev.write_text("".join(json.dumps({
        "ts_ms": ts, "index": i, "group": g, "event": e, "master_broker_id": m, "master_epoch": me,
        "sync_state_set": sss, "sync_state_set_epoch": i, "reason": "", "unclean": u,
        **({"decision": DECISIONS[i]} if i in DECISIONS else {})}) + "\n"
        for i, ts, g, e, m, me, sss, u in EVENTS))
    ak = tmp / "acks.jsonl"
    ak.write_text("".join(json.dumps({
        "msg_id": f"m{n}", "group": g, "broker_id": 1, "topic": "t", "queue_offset": n, "phy_offset": n * 100,
        "epoch": e, "ack_ts_ms": ts}) + "\n" for n, (g, e, ts) in enumerate(ACKS)))
    return ev, ak


@pytest.fixture(scope="module")
def analyzed(spark, tmp_path_factory):  # noqa: F811
    tmp = tmp_path_factory.mktemp("analyze")
    ev, ak = _write(tmp)
    events = inputs.read(spark, inputs.find_sources(ev, "events"))
    acks = inputs.read(spark, inputs.find_sources(ak, "acks"))
    summary = run_analyze(spark, events, acks, tmp / "out", AnalyzeConfig(), NoProgress(spark))
    return tmp / "out", summary


def test_failover_timelines_equal_hand_computed(spark, analyzed):  # noqa: F811
    out, s = analyzed
    rows = sorted((r.asDict() for r in spark.read.parquet(str(out / "failovers")).collect()),
                  key=lambda r: r["elect_index"])
    got = [(r["group"], r["old_master"], r["new_master"], r["old_epoch"], r["new_epoch"], r["master_lost_ts_ms"],
            r["lost_evidence"], r["time_to_elect_ms"], r["last_ack_old_ts_ms"], r["first_ack_new_ts_ms"],
            r["write_unavailable_ms"], r["unclean"]) for r in rows]
    assert got == [
        ("g1", 1, 2, 1, 2, 90_000, "last_ack", 10_000, 90_000, 101_000, 11_000, False),
        ("g1", 2, 3, 2, 4, 200_000, "NoMaster", 5_000, 150_000, 206_000, 56_000, True),
        ("g2", 1, 1, 2, 4, 900_000, "NoMaster", 50_000, 850_000, 960_000, 110_000, False),
    ]
    assert [r["decision"] for r in rows] == [None, SAID, None]
    assert s["failovers"] == 3 and s["failovers_via_no_master"] == 2 and s["reelections_same_master"] == 1
    assert s["unclean_elections"] == 1
    assert s["time_to_elect_ms"] == {"n": 3, "min": 5_000, "p50": 10_000, "p90": 50_000, "p99": 50_000,
                                     "max": 50_000, "mean": round(65_000 / 3, 3)}
    assert s["write_unavailable_ms"]["p50"] == 56_000


def test_sss_churn_and_flapping_equal_hand_computed(spark, analyzed):  # noqa: F811
    out, s = analyzed
    churn = {r["group"]: (r["alter_events"], r["shrinks"], r["expands"], r["members_removed"], r["members_added"])
             for r in spark.read.parquet(str(out / "sss_churn")).collect()}
    assert churn == {"g1": (8, 3, 5, 3, 6), "g2": (2, 1, 1, 1, 1)}
    assert s["sss"] == {"alter_events": 10, "shrinks": 4, "expands": 6, "members_removed": 4, "members_added": 7}
    flap = {(r["group"], r["broker_id"]): (r["removals"], r["max_removals_in_window"], r["flapping"])
            for r in spark.read.parquet(str(out / "flapping")).collect()}
    assert flap == {("g1", 3): (3, 3, True), ("g2", 2): (1, 1, False)}
    assert s["flapping_brokers"] == [{"group": "g1", "broker_id": 3, "max_removals_in_window": 3}]
    unclean = [r.asDict() for r in spark.read.parquet(str(out / "unclean")).collect()]
    assert [(r["group"], r["index"], r["master_broker_id"]) for r in unclean] == [("g1", 13, 3)]


def _png_pixels_vary(png: bytes) -> bool:
    """Decode an 8-bit RGB/RGBA PNG (what Chromium writes) and tell whether pixels differ."""
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, width, height, ctype = 8, b"", 0, 0, 0
    while pos < len(png):
        n = int.from_bytes(png[pos:pos + 4], "big")
        kind, data = png[pos + 4:pos + 8], png[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            width, height, ctype = int.from_bytes(data[:4], "big"), int.from_bytes(data[4:8], "big"), data[9]
            assert data[8] == 8 and ctype in (2, 6)
        elif kind == b"IDAT":
            idat += data
        pos += 12 + n
    raw = zlib.decompress(idat)
    stride = width * (3 if ctype == 2 else 4) + 1
    distinct = {raw[i * stride + 1:(i + 1) * stride] for i in range(0, height, max(1, height // 50))}
    # lines differ (text, bars) and rows are not all one colour
    return len(distinct) > 5 and any(len(set(row[j:j + 3] for j in range(0, len(row), 3))) > 3 for row in distinct)


def test_report_renders_in_headless_chromium(analyzed, tmp_path):
    out, _ = analyzed
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    assert browser, "chromium is needed (Debian package `chromium`; .ci/run installs it)"
    page = (out / "report.html").resolve().as_uri()
    common = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
              "--disable-background-networking", "--disable-component-update", "--disable-sync",
              f"--user-data-dir={tmp_path / 'profile'}", "--enable-logging=stderr", "--v=0",
              "--window-size=1000,1600"]
    shot = tmp_path / "report.png"
    r = subprocess.run([*common, f"--screenshot={shot}", page], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert _png_pixels_vary(shot.read_bytes())
    d = subprocess.run([*common, "--dump-dom", page], capture_output=True, text=True, timeout=120)
    assert d.returncode == 0, d.stderr[-2000:]
    assert 'data-rendered="yes"' in d.stdout and 'data-charts="4"' in d.stdout
    assert d.stdout.count('class="chart"') == 4 and "<td>g1</td>" in d.stdout
    console = [ln for ln in (r.stderr + d.stderr).splitlines() if "CONSOLE" in ln or "Uncaught" in ln]
    assert not [ln for ln in console if "error" in ln.lower() or "Uncaught" in ln], console
