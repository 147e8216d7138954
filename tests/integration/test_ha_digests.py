"""Acceptance (issue 32, part 1): replicas prove online that they hold the same bytes.

A real cluster (3 controllers, name server, 3 brokers in controller mode) under continuous acked
produce. A slave's segment file is changed under it, with the process running and while it is
down: a flipped bit inside a record (its CRC no longer matches), and a whole record replaced by a
valid record of other content (its CRC matches). Each time: the slave finds it within the
verification rounds that follow (counted, not timed), the master quarantines it (out of the
SyncStateSet), the slave cuts the range and fetches it again, rejoins, and in the end every acked
message is readable and the three logs are byte-identical. The other slave never raises an alarm.
"""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import pytest

from tests.integration.failover_harness import (
    FailoverCluster,
    consume_routed,
    log_digest,
    read_ack_log,
    wait_until,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

HA_TOML = """
[ha]
digest_interval_s = 1.0
digest_range_bytes = 4096
"""
_HDR = struct.Struct(">II")


def _segments(data_dir: Path) -> list[Path]:
    found = [p for p in data_dir.rglob("*") if p.parent.name == "commitlog" and p.name.isdigit()]
    return sorted(found, key=lambda p: int(p.name))


def _records(seg: Path) -> list[tuple[int, int]]:
    """(position in the file, total length) of each whole record of a segment file."""
    raw = seg.read_bytes()
    out, p = [], 0
    while p + 40 <= len(raw):
        _crc, total = _HDR.unpack_from(raw, p)
        if total < 40 or p + total > len(raw):
            break
        out.append((p, total))
        p += total
    return out


def _pick(data_dir: Path, back: int) -> tuple[Path, int, int, int]:
    """A message record about ``back`` bytes below the log end: (file, position, length, base offset)."""
    seg = _segments(data_dir)[-1]
    recs = _records(seg)
    assert recs, f"no records in {seg}"
    end = recs[-1][0] + recs[-1][1]
    pos, total = next((p, t) for p, t in reversed(recs) if p <= end - back and seg.read_bytes()[p + 10] == 1)
    return seg, pos, total, int(seg.name)


def _flip_bit(seg: Path, pos: int, total: int) -> None:
    fd = os.open(seg, os.O_RDWR)
    try:
        b = os.pread(fd, 1, pos + total - 1)
        os.pwrite(fd, bytes([b[0] ^ 0x10]), pos + total - 1)
    finally:
        os.close(fd)


def _replace_record(seg: Path, pos: int, total: int) -> None:
    """The same header, another body, and a CRC that matches it: only a comparison finds it."""
    fd = os.open(seg, os.O_RDWR)
    try:
        rec = bytearray(os.pread(fd, total, pos))
        topic_len, id_len = rec[32], rec[33]
        body = 40 + topic_len + id_len
        rec[body:] = bytes(x ^ 0xFF for x in rec[body:])
        rec[0:4] = struct.pack(">I", zlib.crc32(bytes(rec[4:])))
        os.pwrite(fd, bytes(rec), pos)
    finally:
        os.close(fd)


def _slave_digests(c: FailoverCluster, name: str) -> dict:
    return c.status(name)["digests"].get("slave") or {}


def _master_digests(c: FailoverCluster) -> dict:
    return c.status(c.master_name())["digests"].get("master") or {}


def test_corrupted_slave_is_found_quarantined_and_repaired(procs, tmp_path):
    c = FailoverCluster(procs, tmp_path)
    toml = tmp_path / "broker-ha.toml"
    toml.write_text(HA_TOML)
    for n in ("b1", "b2", "b3"):
        c.broker_extra_args[n] = ["--config", str(toml)]
    c.start_all()
    master_id, _ = c.wait_master(timeout=30)
    c.wait_sync_state_set({1, 2, 3}, timeout=30)
    master = c.master_name()
    slaves = [n for n in ("b1", "b2", "b3") if n != master]
    victim, bystander = slaves

    ack_log = tmp_path / "acks.jsonl"
    prod = c.producer("producer", ack_log, duration_s=25, interval_ms=2)
    wait_until(lambda: len(read_ack_log(ack_log)) >= 600, 60, "600 acks before the first change")

    def one_change(change, kind: str, mismatches_before: int, down: bool = False) -> None:
        data_dir = tmp_path / f"broker-{victim}"
        quarantines0 = _master_digests(c).get("quarantines", 0)
        sss_epoch0 = c.replica_info().replica_info.sync_state_set_epoch
        if down:
            c.broker_proc[victim].kill9()
            seg, pos, total, base = _pick(data_dir, 20_000)
            change(seg, pos, total)
            c.start_broker(victim)
            rounds0 = repairs0 = 0
        else:
            rounds0 = _slave_digests(c, victim).get("rounds", 0)
            repairs0 = _slave_digests(c, victim).get("repairs", 0)
            seg, pos, total, base = _pick(data_dir, 20_000)
            change(seg, pos, total)
        offset = base + pos
        got = wait_until(lambda: (_slave_digests(c, victim).get("mismatches", 0) > mismatches_before
                                  and _slave_digests(c, victim)), 60, f"the {kind} found")
        bad = got["lastMismatch"]
        assert bad["start"] <= offset < bad["end"], (bad, offset)
        # found by the first round that read the range after it changed (the range may close
        # one round later when the change hit the open tail)
        assert bad["round"] <= rounds0 + 2, (bad, rounds0)
        if kind == "flipped bit":
            assert bad["reason"] == "corrupt_record", bad
        else:
            assert bad["reason"] == "digest_differs", bad
        # quarantined (the master counts it; the SyncStateSet shrank: its epoch moved), repaired
        # (cut, fetched again, verified) and back in the set. The round trip takes about a second,
        # too short to poll the shrunk set reliably: the counters and the set's epoch tell it.
        wait_until(lambda: _master_digests(c).get("quarantines", 0) > quarantines0, 30, "the master's quarantine")
        wait_until(lambda: _slave_digests(c, victim).get("repairs", 0) > repairs0, 30, "the slave's repair")
        g = c.wait_sync_state_set({1, 2, 3}, timeout=60)
        wait_until(lambda: not _master_digests(c).get("quarantined"), 30, "the quarantine ended")
        g = c.wait_sync_state_set({1, 2, 3}, timeout=60)
        assert g.replica_info.sync_state_set_epoch >= sss_epoch0 + 2, "no shrink and expansion of the set"

    one_change(_flip_bit, "flipped bit", 0)
    one_change(_replace_record, "replaced record", 1)
    one_change(_replace_record, "replaced record", 0, down=True)

    prod.popen.wait(120)
    assert prod.popen.returncode == 0, prod.log_text()[-3000:]
    acks = read_ack_log(ack_log)
    assert _slave_digests(c, bystander).get("mismatches", 0) == 0, "a false alarm on the untouched slave"
    assert _slave_digests(c, bystander).get("verified", 0) > 0
    consumed = {m["msg_id"] for m in consume_routed(c.namesrv)}
    lost = [a["msg_id"] for a in acks if a["msg_id"] not in consumed]
    assert not lost, f"{len(lost)} acked messages lost, e.g. {lost[:5]}"
    top = min(c.status(n)["max_offset"] for n in ("b1", "b2", "b3"))
    wait_until(lambda: len({log_digest(c.broker_addr(n), top) for n in ("b1", "b2", "b3")}) == 1, 30,
               "three identical logs")
    rc, out = _verify_group(c)
    assert rc == 0 and out["agree"] and out["ranges_compared"] > 0, out
    assert master_id


def _verify_group(c: FailoverCluster) -> tuple[int, dict]:
    r = subprocess.run([sys.executable, "-m", "autoswitch", "admin", "verify-group", "--controller", c.controllers,
                        "--group", "g1", "--range-mb", "0.01", "--json"], capture_output=True, text=True, timeout=120)
    env = json.loads(r.stdout)
    assert env["ok"], env
    return r.returncode, env["result"]


def test_verify_group_lists_where_replicas_differ(procs, tmp_path):
    """A slave that does not check digests online (``digests = false``) and holds a replaced
    record: `admin verify-group` names the range, and only that one; the others agree."""
    c = FailoverCluster(procs, tmp_path)
    off = tmp_path / "off.toml"
    off.write_text("[ha]\ndigests = false\n")
    c.start_all()
    c.wait_master(timeout=30)
    c.wait_sync_state_set({1, 2, 3}, timeout=30)
    ack_log = tmp_path / "acks.jsonl"
    prod = c.producer("producer", ack_log, duration_s=30, count=800, interval_ms=1)
    prod.popen.wait(60)
    assert prod.popen.returncode == 0, prod.log_text()[-2000:]
    top = c.status(c.master_name())["max_offset"]
    wait_until(lambda: all(c.status(n)["max_offset"] == top for n in ("b1", "b2", "b3")), 30, "replicas caught up")
    rc, out = _verify_group(c)
    assert rc == 0 and out["agree"] and out["bytes_alike"] == out["to"] - out["from"] > 0, out
    # hostile LogRanges calls: answered BAD_REQUEST, the broker keeps serving
    import asyncio

    from autoswitch.broker.client.client import AdminClient

    from autoswitch.proto import broker_pb2 as pb

    async def ranges(*args: int) -> int:
        cl = AdminClient(c.broker_addr("b1"), max_retries=0, timeout_s=10)
        try:
            return (await cl.log_ranges(*args)).status
        finally:
            await cl.close()

    assert asyncio.run(ranges(top + 1, -1, 4096)) == pb.BAD_REQUEST          # beyond the log
    assert asyncio.run(ranges(0, -1, 1)) == pb.BAD_REQUEST                   # absurd range size
    assert asyncio.run(ranges(0, -1, 1 << 40)) == pb.BAD_REQUEST
    assert asyncio.run(ranges(7, -1, 4096)) == pb.BAD_REQUEST                # not a record boundary
    assert asyncio.run(ranges(0, -1, 4096)) == pb.OK
    # change a slave that never checks: stop it, replace a record, start it with digests off
    victim = next(n for n in ("b1", "b2", "b3") if n != c.master_name())
    c.broker_proc[victim].kill9()
    seg, pos, total, base = _pick(tmp_path / f"broker-{victim}", 20_000)
    _replace_record(seg, pos, total)
    c.broker_extra_args[victim] = ["--config", str(off)]
    c.start_broker(victim)
    victim_id = wait_until(lambda: c.status(victim)["broker_id"], 30, "the restarted slave answers")
    wait_until(lambda: c.status(victim)["max_offset"] == top, 30, "the restarted slave holds the log")
    rc, out = _verify_group(c)
    assert rc == 3 and not out["agree"] and out["ranges_differing"] == 1, out
    bad = out["differing"][0]
    assert bad["start"] <= base + pos < bad["end"], (bad, base + pos)
    assert "no range" not in bad["replicas"][str(victim_id)]
    assert out["bytes_alike"] == out["to"] - out["from"] - (bad["end"] - bad["start"]), out
    assert out["verdict"] == "differ" and "differ" in out["summary"], out
    # issue 64 item 9: a replica down is named, with why, and the exit code says "not compared"
    # (it printed agree no and exited 0)
    c.broker_proc[victim].kill9()
    rc, out = _verify_group(c)
    assert rc == 4 and out["verdict"] == "incomplete" and not out["agree"], out
    (down,) = [r for r in out["replicas"] if "error" in r]
    assert f"not compared: replica {down['broker_id']} (" in out["summary"], out
