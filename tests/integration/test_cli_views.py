"""Issue 33 item 3, the cluster views, against real processes: `cluster-list --brokers` (mqadmin
clusterList: one row per broker) and `--under-replicated`, `endpoint-health` and `member-list`
(etcdctl), `ckquorum` (Sentinel), each as the operator runs them (the CLI, --json)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.integration.failover_harness import FailoverCluster, wait_until

pytestmark = pytest.mark.integration


def cli(*argv: str) -> tuple[int, dict]:
    r = subprocess.run([sys.executable, "-m", "autoswitch", "admin", *argv, "--json"], capture_output=True, text=True,
                       timeout=120)
    lines = r.stdout.strip().splitlines()
    assert lines, r.stderr[-2000:]
    return r.returncode, json.loads(lines[-1])


def test_cluster_views_follow_a_dead_slave_and_a_lost_quorum(procs, tmp_path):
    c = FailoverCluster(procs, tmp_path)
    c.start_all()
    m, epoch = c.wait_master(timeout=60)
    c.wait_sync_state_set({1, 2, 3}, timeout=60)
    ctl = ["--controller", c.controllers]

    rc, out = cli("cluster-list", "--brokers", *ctl)
    rows = out["result"]["brokers"]
    assert rc == 0 and sorted(r["broker_id"] for r in rows) == [1, 2, 3], out
    assert [r["broker_id"] for r in rows if r["role"] == "master"] == [m]
    assert all(r["alive"] and r["in_sync"] and r["master_epoch"] == epoch for r in rows), rows
    rc, out = cli("cluster-list", "--under-replicated", *ctl)
    assert rc == 0 and out["result"]["groups"] == [], out
    # issue 64 item 9: one group's view, and a group the controllers do not know
    rc, out = cli("cluster-list", "--group", "g1", *ctl)
    assert rc == 0 and [g["group"] for g in out["result"]["groups"]] == ["g1"], out
    rc, out = cli("cluster-list", "--group", "nope", *ctl)
    assert rc != 0 and out["error"]["code"] == "NOT_FOUND" and "'nope'" in out["error"]["message"], out

    # a slave dies: once it has left the SyncStateSet the group is under-replicated
    slave = next(n for n in ("b1", "b2", "b3") if n != c.name_of_id(m))
    c.broker_proc[slave].kill9()
    wait_until(lambda: cli("cluster-list", "--under-replicated", *ctl)[1]["result"]["groups"], 120,
               "the group shows as under-replicated")
    rc, out = cli("cluster-list", "--under-replicated", *ctl)
    (g,) = out["result"]["groups"]
    assert len(g["sync_state_set"]) == 2 and len(g["replicas"]) == 3, g

    rc, out = cli("member-list", *ctl)
    members = out["result"]["members"]
    assert rc == 0 and sorted(x["node_id"] for x in members) == ["n1", "n2", "n3"], out
    assert sum(x["leader"] for x in members) == 1 and all(x["role"] == "voter" for x in members)
    rc, out = cli("endpoint-health", *ctl)
    assert rc == 0 and [e["healthy"] for e in out["result"]["endpoints"]] == [True] * 3, out
    rc, out = cli("ckquorum", *ctl)
    assert rc == 0 and out["result"]["status"].startswith("OK 3 of 3 voters answer"), out

    # two controllers die: no quorum, said with the count (exit 1); the survivor is unhealthy
    for nid in ("n2", "n3"):
        c.ctl_proc[nid].kill9()
    wait_until(lambda: cli("ckquorum", *ctl)[0] == 1, 120, "ckquorum fails")
    rc, out = cli("ckquorum", *ctl)
    assert out["error"]["code"] == "CONTROLLER_QUORUM_UNAVAILABLE", out
    assert out["error"]["message"].startswith("1 of 3 voters answer, 2 needed"), out
    wait_until(lambda: cli("endpoint-health", *ctl)[0] == 1, 120, "no healthy endpoint")
    rc, out = cli("endpoint-health", *ctl)
    assert [e["healthy"] for e in out["error"]["endpoints"]] == [False] * 3, out
