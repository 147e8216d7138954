"""A real failover fed to the durability audit (docs/pipeline.md): kill -9 the master under
continuous acked produce, let the old master rejoin, stop the group, export every replica's log
index (`autoswitch pipeline export-log`) and the controller events
(`autoswitch admin export-controller-events`), and run `autoswitch pipeline audit` on them with
the producer's ack log: zero acknowledged messages may be lost."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.integration.failover_harness import GROUP, FailoverCluster, read_ack_log, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.slow, pytest.mark.timeout(600)]


def _cli(*args: str, timeout: float = 500) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "autoswitch", *args], capture_output=True, text=True,
                          timeout=timeout)


# The Spark audit takes ~30-40 s on a quiet 2-core machine; the whole default suite stays well
# inside its budget with it (issue 6: the failover test's exports must pass the audit).
@pytest.mark.slow
def test_failover_exports_pass_the_audit(procs, tmp_path):
    c = FailoverCluster(procs, tmp_path)
    c.start_all()
    m1_id, e1 = c.wait_master(timeout=30)
    c.wait_sync_state_set({1, 2, 3})
    m1 = c.master_name()
    ack_log = tmp_path / "acks.jsonl"
    prod = c.producer("producer", ack_log, duration_s=5)
    wait_until(lambda: len(read_ack_log(ack_log)) >= 50, 20, "acks before the kill")
    c.broker_proc[m1].kill9()
    c.wait_master(timeout=20, not_id=m1_id, min_epoch=e1 + 1)
    prod.popen.wait(40)
    assert prod.popen.returncode == 0, prod.log_text()[-3000:]
    c.start_broker(m1)
    c.wait_sync_state_set({1, 2, 3})
    ids = {n: c.status(n)["broker_id"] for n in ("b1", "b2", "b3")}
    master_hi = c.status(c.master_name())["max_offset"]
    wait_until(lambda: all(c.status(n)["max_offset"] == master_hi for n in ids), 20, "replicas caught up")

    events = tmp_path / "exports" / "events.jsonl"
    events.parent.mkdir()
    r = _cli("admin", "export-controller-events", "--controller", c.controllers, "--out", str(events), "--json")
    assert r.returncode == 0, r.stderr[-2000:]
    for n in ("b1", "b2", "b3"):
        c.broker_proc[n].stop()
    logs = tmp_path / "exports" / "logs"
    logs.mkdir()
    for n, bid in ids.items():
        r = _cli("pipeline", "export-log", "--data-dir", str(tmp_path / f"broker-{n}"), "--group", GROUP,
                 "--broker-id", str(bid), "--out", str(logs / f"{n}.index.jsonl"), "--json")
        assert r.returncode == 0, r.stderr[-2000:]
    import shutil

    keep = os.environ.get("AUTOSWITCH_KEEP_EXPORTS")  # debugging: keep a copy of the inputs
    if keep:
        shutil.copytree(tmp_path / "exports", keep, dirs_exist_ok=True)
        shutil.copy(ack_log, keep)
    out = tmp_path / "audit"
    r = _cli("pipeline", "audit", "--acks", str(ack_log), "--logs", str(logs), "--events", str(events),
             "--out", str(out), "--shuffle-partitions", "4", "--json")
    assert r.returncode == 0, (r.stdout[-2000:], r.stderr[-3000:])
    verdict = json.loads((out / "verdict.json").read_text())
    assert verdict["counts"]["lost"] == 0, verdict
    assert verdict["counts"]["divergence"] == 0, verdict
    assert verdict["acked_rows"] == len(read_ack_log(ack_log)) > 50, verdict
