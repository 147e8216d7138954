"""Issue 58, item 8, with real processes: a replica whose log went backwards is never clean.

A two-replica group with durable acknowledgements (flush = "sync") and min_in_sync_replicas = 2.
A backup of the running slave is taken, the group acknowledges more, then the slave is killed:
the master's set falls below the minimum, so the slave becomes an eligible replica (it held every
acknowledged message, and nothing more can be acknowledged). The backup is restored in place
(same host, same path: its abort marker says "durable run, continue it") and started while the
master is frozen. Before the fix it came back clean and, eligible, was elected when the master
was declared dead: every message acknowledged after the backup was lost (8,832 of 13,541 in the
review's run). Now every controller remembers the most each replica stated it held durably, the
restored log is below it, and the replica is no clean candidate until it is past that point
again: nobody is elected, and when the master returns it is, with nothing lost.
"""

from __future__ import annotations

import os
import shutil
import signal

import pytest

from tests.integration.failover_harness import FailoverCluster, consume_routed, read_ack_log, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]


def test_a_backup_restored_in_place_is_never_a_clean_candidate(procs, tmp_path):
    c = FailoverCluster(procs, tmp_path, n_brokers=2, heartbeat_timeout_ms=2000,
                        controller_toml="min_in_sync_replicas = 2\n")
    for n in ("b1", "b2"):
        c.broker_extra_args[n] = ["--flush", "sync", "--min-in-sync-replicas", "2"]
    c.start_all(("b1", "b2"))
    master_id, epoch = c.wait_master(timeout=30)
    c.wait_sync_state_set({1, 2}, timeout=30)
    master = c.name_of_id(master_id)
    slave = "b2" if master == "b1" else "b1"

    acks = tmp_path / "acks.jsonl"
    p = c.producer("before", acks, duration_s=60, count=150, interval_ms=1)
    wait_until(lambda: not p.alive(), 90, "150 messages sent")
    backup = tmp_path / "backup"
    shutil.copytree(tmp_path / f"broker-{slave}", backup)          # of the running slave
    p = c.producer("after", acks, duration_s=60, count=300, interval_ms=1)
    wait_until(lambda: not p.alive(), 90, "300 more messages sent")
    acked = [a["msg_id"] for a in read_ack_log(acks)]
    assert len(acked) >= 400, len(acked)

    c.broker_proc[slave].kill9()
    wait_until(lambda: (v := c.replica_info()) and set(v.replica_info.eligible_replicas) == {3 - master_id}, 30,
               "the killed slave is an eligible replica (the set fell below the minimum)")
    shutil.rmtree(tmp_path / f"broker-{slave}")
    shutil.copytree(backup, tmp_path / f"broker-{slave}")
    os.kill(c.broker_proc[master].pid, signal.SIGSTOP)      # the master cannot feed it back
    try:
        c.start_broker(slave)
        # the controllers hear the restored slave, and find the master dead
        wait_until(lambda: any("replica_log_regressed" in c.ctl_proc[n].log_text() for n in c.ctl_ids), 60,
                   "the controllers saw the restored log below its durable mark")
        g = wait_until(lambda: (v := c.replica_info()) and v.replica_info.master_epoch > epoch and v, 60,
                       "the frozen master deposed")
        # nobody elected: before the fix the restored slave was, without what was acked since
        assert not g.replica_info.master_broker_id, g
    finally:
        os.kill(c.broker_proc[master].pid, signal.SIGCONT)
    m2, _ = c.wait_master(timeout=60)
    assert m2 == master_id
    consumed = {m["msg_id"] for m in consume_routed(c.namesrv)}
    lost = [a for a in acked if a not in consumed]
    assert not lost, f"{len(lost)} acknowledged messages lost, e.g. {lost[:5]}"
