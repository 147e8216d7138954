"""`autoswitch dump-log` (kafka-dump-log) over a real store's files: every record across
segments in order, filters, the place where damaged records stop, and nothing written."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.unit.test_store_helpers import fill, open_store, snapshot


def run(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "autoswitch", "dump-log", *argv], capture_output=True, text=True,
                          timeout=120)


def test_dump_log_prints_every_record_across_segments_and_stops_at_damage(tmp_path):
    s = open_store(tmp_path / "b")
    fill(s, 40)                              # several 4 KiB segments, with padding at their ends
    s.flush()
    scanned = [(r.phy_offset, r.topic, r.queue_offset, r.msg_id) for r in s.scan()]
    s.close()
    before = snapshot(tmp_path / "b")

    r = run(str(tmp_path / "b"), "--json", "--count", "1000")
    assert r.returncode == 0, r.stderr
    lines = [json.loads(ln) for ln in r.stdout.splitlines()]
    rows, env = lines[:-1], lines[-1]
    assert [(x["phy_offset"], x["topic"], x["queue_offset"], x["msg_id"]) for x in rows] == scanned
    assert env["ok"] and env["result"]["segments"] > 2 and env["result"]["stops"] == []
    only_a = [json.loads(ln) for ln in run(str(tmp_path / "b"), "--json", "--topic", "a").stdout.splitlines()[:-1]]
    assert only_a and {x["topic"] for x in only_a} == {"a"}
    later = [json.loads(ln) for ln in run(str(tmp_path / "b"), "--json", "--from", str(scanned[10][0]),
                                           "--count", "3").stdout.splitlines()[:-1]]
    assert [x["phy_offset"] for x in later] == [p for p, *_ in scanned[10:13]]
    assert snapshot(tmp_path / "b") == before                      # read-only

    # one flipped byte in a record's body: the segment's records stop there, said with the offset
    victim = scanned[5][0]
    seg = sorted((tmp_path / "b" / "commitlog").iterdir())[0]
    data = bytearray(seg.read_bytes())
    data[victim + 60] ^= 0xFF
    seg.write_bytes(bytes(data))
    r = run(str(tmp_path / "b"), "--json")
    env = json.loads(r.stdout.splitlines()[-1])
    assert env["result"]["stops"] and env["result"]["stops"][0]["offset"] == victim, env
    assert "RECORDS_STOP" in r.stderr
    shown = [json.loads(ln)["phy_offset"] for ln in r.stdout.splitlines()[:-1]]
    assert victim not in shown and scanned[4][0] in shown


def test_dump_log_of_a_directory_without_a_log_is_not_found(tmp_path):
    r = run(str(tmp_path))
    assert r.returncode == 1 and "NOT_FOUND" in r.stderr


def test_dump_log_says_when_there_is_nothing_to_show(tmp_path):
    """Issue 64 item 9: `dump-log --quarantine` of a log nothing was ever cut from printed nothing."""
    s = open_store(tmp_path / "b")
    fill(s, 3)
    s.flush()
    s.close()
    r = run(str(tmp_path / "b"), "--quarantine")
    assert r.returncode == 0 and "no quarantined tails" in r.stdout, (r.stdout, r.stderr)
    r = run(str(tmp_path / "b"), "--topic", "no-such-topic")
    assert r.returncode == 0 and "no records" in r.stdout and "no-such-topic" in r.stdout, r.stdout
