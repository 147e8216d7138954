"""Issue 35 item 1 with real processes: maintenance mode (cordon and drain).

A broker put in maintenance hands its mastership to an in-sync replica by the graceful handover
under acked produce; the cordon is replicated controller state, so after the Raft leadership
moves to another controller the next failover still passes over the cordoned replica; nothing
acked is lost. A controller member put in maintenance hands its leadership over and is not
elected again while another voter can lead."""

from __future__ import annotations

import os
import re

import pytest

from tests.integration.controller_harness import admin
from tests.integration.failover_harness import FailoverCluster, consume_routed, read_ack_log, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]


def _leader(ctl: str) -> str | None:
    r = admin("get-controller-metadata", "--controller", ctl)
    leaders = {n["node_id"] for n in r.get("result", {}).get("nodes", []) if n.get("raft_role") == "leader"}
    return leaders.pop() if len(leaders) == 1 else None


def test_a_cordoned_master_drains_and_stays_passed_over_across_a_controller_leader_change(procs, tmp_path):
    c = FailoverCluster(procs, tmp_path)
    c.start_all()
    m1, e1 = c.wait_master(timeout=60)
    c.wait_sync_state_set({1, 2, 3}, timeout=60)
    ctl = ",".join(c.ctl_addrs.values())

    # a new cluster starts at the newest level every member runs: maintenance works out of the box
    # (issue 64, item 3; before, it was refused until `finalize-features --level 2`)
    assert admin("features", "--controller", ctl)["result"]["finalized"] >= 2

    ack_log = tmp_path / "acks.jsonl"
    prod = c.producer("producer", ack_log, duration_s=20, retry_deadline_s=60)
    wait_until(lambda: len(read_ack_log(ack_log)) >= 30, 30, "30 acks before the cordon")

    r = admin("maintenance", "on", "--controller", ctl, "--group", "g1", "--broker-id", str(m1), "--wait-s", "60",
              "--timeout-s", "90", timeout=120)
    assert r["ok"], r
    [row] = r["result"]["brokers"]
    assert row["drained"] and row["drain"].startswith("draining"), row
    m2, e2 = c.wait_master(timeout=30, not_id=m1, min_epoch=e1 + 1)
    listed = admin("cluster-list", "--controller", ctl)["result"]["groups"][0]
    assert listed["maintenance"] == [m1] and listed["master"] == m2, listed

    # the cordon outlives the controller leader: move it, then fail the new master
    old = wait_until(lambda: _leader(ctl), 30, "a controller leader")
    to = next(n for n in c.ctl_ids if n != old)
    assert admin("move-controller-leader", "--controller", ctl, "--to", to)["ok"]
    wait_until(lambda: _leader(ctl) == to, 30, f"{to} leading")
    c.wait_sync_state_set({1, 2, 3}, timeout=60)      # the cordoned one is back in sync: electable by data
    wait_until(lambda: len(read_ack_log(ack_log)) >= 60, 30, "acks after the drain")
    dry = admin("elect-master", "--controller", ctl, "--group", "g1", "--dry-run")
    assert dry["ok"] and dry["result"]["decision"]["outcome"] == "kept", dry      # the master is alive
    c.broker_proc[c.master_name()].kill9()
    m3, e3 = c.wait_master(timeout=60, not_id=m2, min_epoch=e2 + 1)
    assert m3 not in (m1, m2), f"the cordoned broker {m1} was elected"
    # the election explains itself: the cordoned replica was passed over for being in maintenance
    decisions = admin("explain", "--controller", ctl, "--group", "g1")["result"]["decisions"]
    won = next(d for d in decisions if d["outcome"] == "elected" and d["master_epoch"] == e3)
    why = {v["broker_id"]: v.get("ruled_out", "") for v in won["candidates"]}
    assert why[m1] == "in_maintenance" and why[m2] in ("dead_by_majority", "not_alive") and why[m3] == "", won

    prod.popen.wait(90)
    assert prod.popen.returncode == 0, prod.log_text()[-3000:]
    acks = read_ack_log(ack_log)
    consumed = {m["msg_id"] for m in consume_routed(c.namesrv)}
    assert acks and not [a["msg_id"] for a in acks if a["msg_id"] not in consumed], "acked messages lost"

    r = admin("maintenance", "off", "--controller", ctl, "--group", "g1", "--broker-id", str(m1))
    assert r["ok"] and r["result"]["brokers"][0]["replica_info"]["maintenance"] == [], r

    # issue 64 item 4, as a person reads it mid-incident: the one sentence first, named columns,
    # no protobuf paths, wall-clock times in ISO
    import subprocess
    import sys

    def human(*argv: str) -> str:
        out = subprocess.run([sys.executable, "-m", "autoswitch", "admin", *argv, "--controller", ctl],
                             capture_output=True, text=True, timeout=120, env={**os.environ, "COLUMNS": "200"})
        assert out.returncode == 0, out.stderr[-2000:]
        return out.stdout

    m4 = c.wait_master(timeout=30)[0]
    text = human("maintenance", "on", "--group", "g1", "--broker-id", str(m4), "--wait-s", "60", "--timeout-s", "90")
    first = text.splitlines()[0]
    assert first.startswith("draining") and f"from broker {m4}" in first, text
    assert "replica_info" not in text, text
    for argv in (("get-sync-state-set", "--group", "g1"), ("set-zone-preference", "--group", "g1", "--zones", "z1")):
        shown = human(*argv)
        assert "replica_info" not in shown and "master_epoch" in shown, shown
    shown = human("explain", "--group", "g1")
    assert re.search(r"20\d\d-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", shown), shown
    human("maintenance", "off", "--group", "g1", "--broker-id", str(m4))


def test_a_controller_in_maintenance_hands_leadership_over_and_is_not_elected(procs, tmp_path):
    c = FailoverCluster(procs, tmp_path)
    c.start_controllers()
    ctl = ",".join(c.ctl_addrs.values())
    first = wait_until(lambda: _leader(ctl), 30, "a controller leader")
    r = admin("maintenance", "on", "--controller", ctl, "--controller-node", first)
    assert r["ok"] and r["result"]["controllers_in_maintenance"] == [first], r
    second = wait_until(lambda: (lambda ld: ld if ld not in (None, first) else None)(_leader(ctl)), 30,
                        "leadership handed over")
    nodes = admin("get-controller-metadata", "--controller", ctl)["result"]["nodes"]
    assert {n["node_id"]: n["maintenance"] for n in nodes}[first] is True, nodes
    # the leader dies: the cordoned member votes but does not campaign, the third one leads
    c.ctl_proc[second].stop()
    third = next(n for n in c.ctl_ids if n not in (first, second))
    wait_until(lambda: _leader(",".join(c.ctl_addrs[n] for n in (first, third))) == third, 60, f"{third} leading")
    r = admin("move-controller-leader", "--controller", c.ctl_addrs[third], "--to", first)
    assert not r["ok"] and "in maintenance" in r["error"]["message"], r


def test_a_preferred_master_in_maintenance_is_not_moved_to_and_the_wait_explains_itself(procs, tmp_path):
    c = FailoverCluster(procs, tmp_path)
    c.start_all()
    m1, e1 = c.wait_master(timeout=60)
    c.wait_sync_state_set({1, 2, 3}, timeout=60)
    ctl = ",".join(c.ctl_addrs.values())
    preferred = min({1, 2, 3} - {m1})
    assert admin("set-preferred-master", "--controller", ctl, "-b", "g1", "-i", str(preferred))["ok"]
    assert admin("maintenance", "on", "--controller", ctl, "-b", "g1", "-i", str(preferred))["ok"]
    assert admin("update-controller-config", "--controller", ctl, "-k", "auto_rebalance_masters=true",
                 "-k", "rebalance_delay_ms=300", "-k", "rebalance_max_in_flight=2")["ok"]

    def pending() -> str | None:
        p = admin("explain", "--controller", ctl, "-b", "g1")["result"]["pending"] or ""
        return p if "in maintenance" in p else None

    said = wait_until(pending, 30, "the postponed move explained")
    assert said.startswith("move back to the preferred master waits"), said
    assert c.replica_info().replica_info.master_broker_id == m1
    assert admin("maintenance", "off", "--controller", ctl, "-b", "g1", "-i", str(preferred))["ok"]
    m2, _ = c.wait_master(timeout=60, not_id=m1, min_epoch=e1 + 1)
    assert m2 == preferred
