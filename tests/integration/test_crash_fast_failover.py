"""Issue 13 part 3, crash-fast failover, with real processes: the controllers' heartbeat timeout
is 60 s, so any failover the test sees before that came from the closed session streams of a
killed master, never from the timeout. A group in ack mode ``quorum`` must not take that path.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys

import grpc
import pytest
from autoswitch.controller.client import ControllerClient

from autoswitch.proto import controller_pb2 as pb
from tests.integration.failover_harness import (
    GROUP,
    FailoverCluster,
    consume_routed,
    read_ack_log,
    wait_until,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

LONG_TIMEOUT_MS = 60_000


def _events(c: FailoverCluster) -> list[dict]:
    async def run() -> list[dict]:
        async with ControllerClient(list(c.ctl_addrs.values())) as cl:
            r = await cl.call("ExportEvents", pb.ExportEventsRequest(from_line=0, max_lines=10_000), leader=True)
            return [json.loads(line) for line in r.lines]
    return asyncio.run(run())


def _opinions(c: FailoverCluster, broker_id: int) -> list[pb.LivenessOpinion]:
    async def run() -> list[pb.LivenessOpinion]:
        async with ControllerClient(list(c.ctl_addrs.values())) as cl:
            out = []
            for addr in c.ctl_addrs.values():
                r = await cl.call_node(addr, "QueryLiveness", pb.QueryLivenessRequest(
                    brokers=[pb.BrokerKey(broker_name=GROUP, broker_id=broker_id)]))
                out.extend(r.opinions)
            return out
    return asyncio.run(run())


def _sessions_closed(c: FailoverCluster, broker_id: int) -> int:
    """Controller processes that logged the end of ``broker_id``'s session."""
    n = 0
    for p in c.ctl_proc.values():
        for line in p.log_text().splitlines():
            if '"broker_session_closed"' in line and f'"brokerId": {broker_id},' in line.replace('":', '": '):
                n += 1
                break
    return n


def test_kill9_master_fails_over_on_closed_sessions(procs, tmp_path):
    c = FailoverCluster(procs, tmp_path, heartbeat_timeout_ms=LONG_TIMEOUT_MS)
    c.start_all()
    m1_id, e1 = c.wait_master(timeout=60)
    c.wait_sync_state_set({1, 2, 3}, timeout=60)
    wait_until(lambda: all(c.status(n).get("replicas", {}).get("controllerSessions") == 3 for n in ("b1", "b2", "b3")),
               30, "every broker holds a session with every controller")
    ack_log = tmp_path / "acks.jsonl"
    prod = c.producer("producer", ack_log, duration_s=5)
    wait_until(lambda: len(read_ack_log(ack_log)) >= 30, 30, "30 acks before the kill")
    c.broker_proc[c.master_name()].kill9()
    # Far below the 60 s timeout: only the crash evidence can explain an election now.
    m2_id, e2 = c.wait_master(timeout=30, not_id=m1_id, min_epoch=e1 + 1)
    elections = [e for e in _events(c) if e.get("event") == "ElectMaster" and e.get("master_epoch") == e2]
    assert elections and "crash:" in elections[0]["reason"], elections
    assert not elections[0]["unclean"]
    prod.popen.wait(60)
    assert prod.popen.returncode == 0, prod.log_text()[-3000:]
    acks = read_ack_log(ack_log)
    consumed = {m["msg_id"] for m in consume_routed(c.namesrv)}
    assert not [a["msg_id"] for a in acks if a["msg_id"] not in consumed], "acked messages lost"
    assert {a["broker_id"] for a in acks if a["epoch"] >= e2} <= {m2_id}


def test_quorum_ack_mode_keeps_the_timeout_path(procs, tmp_path):
    """Acks from a quorum do not need the new master's, so a deposed master could still acknowledge
    after a crash-fast election: a closed session must not count as a crash for such a group."""
    c = FailoverCluster(procs, tmp_path, heartbeat_timeout_ms=LONG_TIMEOUT_MS, ack_mode="quorum")
    c.start_all()
    m1_id, e1 = c.wait_master(timeout=60)
    c.wait_sync_state_set({1, 2, 3}, timeout=60)
    wait_until(lambda: c.status(c.master_name()).get("replicas", {}).get("controllerSessions") == 3, 30,
               "the master holds a session with every controller")
    c.broker_proc[c.master_name()].kill9()
    wait_until(lambda: _sessions_closed(c, m1_id) == 3, 30, "every controller saw the master's session end")
    ops = _opinions(c, m1_id)
    assert len(ops) == 3 and all(o.alive and not o.crashed for o in ops), ops
    info = c.replica_info().replica_info
    assert (info.master_broker_id, info.master_epoch) == (m1_id, e1), "no failover before the timeout"


def test_alerts_on_the_stream_and_to_the_script(procs, tmp_path):
    """Issue 15 item 4: the leader's notification script and the WatchAlerts stream report the crash
    and the election (Sentinel's +sdown/+switch-master)."""
    out = tmp_path / "alerts.txt"
    notify = tmp_path / "notify.sh"
    notify.write_text(f'#!/bin/sh\nprintf "%s %s\\n" "$1" "$2" >> {out}\n')
    notify.chmod(0o755)
    c = FailoverCluster(procs, tmp_path, heartbeat_timeout_ms=LONG_TIMEOUT_MS,
                        controller_toml=f'notification_script = "{notify}"\n')
    c.start_all()
    m1, e1 = c.wait_master(timeout=60)
    c.wait_sync_state_set({1, 2, 3}, timeout=60)
    wait_until(lambda: c.status(c.master_name()).get("replicas", {}).get("controllerSessions") == 3, 30,
               "the master holds a session with every controller")

    victim = c.broker_proc[c.master_name()]

    async def watch_and_kill() -> list[tuple[str, str]]:
        async with ControllerClient(list(c.ctl_addrs.values())) as cl:
            streams = [cl.stub(a).WatchAlerts(pb.WatchAlertsRequest()) for a in c.ctl_addrs.values()]
            for s in streams:
                first = await s.read()
                assert first.header.code == 0 and not first.kind
            victim.kill9()
            got: list[tuple[str, str]] = []

            async def drain(s):       # read(), not async for: a call takes one style only
                while True:
                    ev = await s.read()
                    if ev is grpc.aio.EOF:
                        return
                    got.append((ev.kind, json.loads(ev.json)["detail"].get("epoch")))
            tasks = [asyncio.ensure_future(drain(s)) for s in streams]
            for _ in range(300):
                if {k for k, _ in got} >= {"master_crashed", "master_elected"}:
                    break
                await asyncio.sleep(0.1)
            for t in tasks:
                t.cancel()
            for s in streams:
                s.cancel()
            return got
    got = asyncio.run(watch_and_kill())
    assert ("master_crashed", e1) in got and ("master_elected", e1 + 1) in got, got
    assert len([k for k, _ in got if k == "master_elected"]) == 1, "only the leader alerts"
    wait_until(lambda: out.exists() and {"master_crashed g1", "master_elected g1"} <= set(out.read_text().splitlines()),
               30, "the script ran for both alerts")


def test_audit_straight_from_the_cluster(procs, tmp_path):
    """Issue 15 item 8: after a failover, one command audits it from the brokers' data directories
    and the live controllers' event history (no export-log per replica by hand)."""
    c = FailoverCluster(procs, tmp_path, heartbeat_timeout_ms=LONG_TIMEOUT_MS)
    c.start_all()
    m1, e1 = c.wait_master(timeout=60)
    c.wait_sync_state_set({1, 2, 3}, timeout=60)
    ack_log = tmp_path / "acks.jsonl"
    prod = c.producer("producer", ack_log, duration_s=3)
    wait_until(lambda: len(read_ack_log(ack_log)) >= 30, 30, "30 acks before the kill")
    c.broker_proc[c.master_name()].kill9()
    c.wait_master(timeout=30, not_id=m1, min_epoch=e1 + 1)
    prod.popen.wait(60)
    dirs = [a for n in ("b1", "b2", "b3") for a in ("--broker-data", str(tmp_path / f"broker-{n}"))]
    r = subprocess.run([sys.executable, "-m", "autoswitch", "pipeline", "audit", "--acks", str(ack_log), *dirs,
                        "--controller", ",".join(c.ctl_addrs.values()), "--out", str(tmp_path / "audit"), "--json"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    verdict = json.loads(r.stdout.strip().splitlines()[-1])["result"]
    assert verdict["verdict"] == "CLEAN" and verdict["counts"]["lost"] == 0
    assert verdict["acked_rows"] >= len(read_ack_log(ack_log))
    assert (tmp_path / "audit" / "inputs" / "events.jsonl").stat().st_size > 0
