"""Acceptance (issue 32, part 2): a master whose disk hangs gives its role up.

A real cluster (3 controllers, name server, 3 brokers in controller mode, ack mode all) whose
brokers keep their data on slowfs (tests/grayfail/slowfs.c: a FUSE pass-through that hangs
writes and fsyncs on command; reads go on). The heartbeat timeout is 5 s, so without the
watchdog the producers would wait at least that long. Under continuous acked produce the
master's disk hangs: the master's watchdog ends it like a crash (exit 75, `disk_stall_self_fence`)
once an append has been stuck `disk_stall_timeout_ms`; the controllers fail over at once (the
crash-fast path) to a slave that was keeping up; writes are acknowledged again while the old
disk still hangs; exactly one new MasterEpoch; nothing acked lost once the disk is back and the
old master rejoins. The largest gap between acks is printed (bench-grayfailure measures it).
"""

from __future__ import annotations

import contextlib
import time

import pytest

from tests.grayfail.slowfs import Unavailable, broker_disks
from tests.integration.failover_harness import (
    FailoverCluster,
    consume_routed,
    read_ack_log,
    wait_until,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

NAMES = ("b1", "b2", "b3")


def test_a_master_whose_disk_hangs_gives_its_role_up(procs, tmp_path):
    with contextlib.ExitStack() as stack:
        try:
            disks = broker_disks(stack, tmp_path, NAMES)
        except Unavailable as e:
            pytest.skip(f"slowfs cannot run here: {e}")
        c = FailoverCluster(procs, tmp_path, heartbeat_timeout_ms=5000)
        # The cool-down after becoming master is unit-tested; here the first master may move at once.
        cfg = tmp_path / "broker.toml"
        cfg.write_text("disk_stall_cooldown_s = 0\n")
        for n in NAMES:
            c.broker_extra_args[n] = ["--config", str(cfg)]
        c.start_all()
        m1, e1 = c.wait_master(timeout=30)
        c.wait_sync_state_set({1, 2, 3}, timeout=30)
        old = c.master_name()
        ack_log = tmp_path / "acks.jsonl"
        prod = c.producer("producer", ack_log, duration_s=15, interval_ms=5)
        wait_until(lambda: len(read_ack_log(ack_log)) >= 200, 30, "200 acks before the disk hangs")
        disks[old].set("hang")
        t_hang = time.time()
        m2, e2 = c.wait_master(timeout=30, not_id=m1, min_epoch=e1 + 1)
        assert e2 == e1 + 1
        assert "disk_stall_self_fence" in c.broker_proc[old].log_text()
        # the crash-fast path (its sessions ended), not the 5 s heartbeat timeout
        elected = [x for x in c.ctl_proc["n1"].log_text().splitlines()
                   if '"kind":"ElectMaster"' in x and f'"epoch":{e2}' in x]
        assert elected and '"reason":"controller:crash' in elected[-1], elected
        wait_until(lambda: [a for a in read_ack_log(ack_log) if a["epoch"] == e2 and a["ack_ts_ms"] > t_hang * 1000],
                   30, "acks on the new master while the old disk still hangs")
        prod.popen.wait(60)
        assert prod.popen.returncode == 0, prod.log_text()[-2000:]
        # its writing thread was stuck in the disk (no signal ends that): it exits once the disk is back
        disks[old].set("ok")
        code = wait_until(lambda: c.broker_proc[old].popen.poll(), 30, "the old master's exit")
        assert code == 75, f"exit code {code}"
        acks = read_ack_log(ack_log)
        ts = sorted(a["ack_ts_ms"] / 1000 for a in acks)
        gap = max((b - a for a, b in zip(ts, ts[1:], strict=False) if b > t_hang), default=0.0)
        print(f"largest ack gap after the hang: {gap:.3f} s; epochs {sorted({a['epoch'] for a in acks})}")
        assert {a["epoch"] for a in acks} == {e1, e2}, "more than one move for one incident"
        c.start_broker(old)          # its disk is back: it restarts (uncleanly) and rejoins
        c.wait_sync_state_set({1, 2, 3}, timeout=60)
        consumed = {m["msg_id"] for m in consume_routed(c.namesrv)}
        lost = [a["msg_id"] for a in acks if a["msg_id"] not in consumed]
        assert not lost, f"{len(lost)} acked messages lost, e.g. {lost[:5]}"
        assert c.replica_info().replica_info.master_epoch == e2
