"""Acceptance (issue 32, part 2): a master that is alive but slow hands over; a master whose event
loop freezes gives its role up; both are seen before anything moves.

Real clusters (3 controllers, name server, 3 brokers in controller mode, ack mode all), under
continuous acked produce:

* slow disk: the master's data sits on slowfs (tests/grayfail/slowfs.c) and every write, fsync
  and create of it is delayed 400 ms (not hung: the disk-stall watchdog stays quiet). Its health
  monitor turns degraded; `admin cluster-list` shows it; the controllers' leader moves the role
  through the graceful handover to a healthy in-sync slave (`gray_failover_started`, the broker's
  `handover_requested` with the reason); exactly one new MasterEpoch; no move back to the slow
  replica; nothing acked lost.
* frozen loop: the master's event-loop thread is held in the kernel (tests/crash_run.py
  ``freeze:``) while its other threads run: the watchdog sees the loop stopped past
  `loop_stall_timeout_ms`, shuts every socket and exits 75; the controllers fail over by the
  crash-fast path; exactly one new MasterEpoch; nothing acked lost.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import time

import pytest

from tests.grayfail.slowfs import SlowFs, Unavailable, broker_disks
from tests.integration.failover_harness import (
    FailoverCluster,
    consume_routed,
    read_ack_log,
    wait_until,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

NAMES = ("b1", "b2", "b3")


def _cluster_list(c: FailoverCluster) -> dict[int, str]:
    """brokerId -> health word, as an operator reads it from `admin cluster-list --json`."""
    r = subprocess.run([sys.executable, "-m", "autoswitch", "admin", "cluster-list", "--controller",
                        ",".join(c.ctl_addrs.values()), "--json"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr[-2000:]
    groups = json.loads(r.stdout.strip().splitlines()[-1])["result"]["groups"]
    return {x["broker_id"]: x["health"] for g in groups for x in g["replicas"]}


def _lost(c: FailoverCluster, acks: list[dict]) -> list[str]:
    consumed = {m["msg_id"] for m in consume_routed(c.namesrv)}
    return [a["msg_id"] for a in acks if a["msg_id"] not in consumed]


def _slow_cluster(procs, tmp_path, stack: contextlib.ExitStack) -> tuple[FailoverCluster, dict[str, SlowFs]]:
    """Three brokers on slowfs, the leader's gray failover without a cool-down (it has just started;
    the cool-down is unit-tested) and a 2 s delay, the brokers' health after 3 slow windows; the
    default lease (60 % of the heartbeat timeout), not the harness's 600 ms one that lapses on every
    slow append and fences the writes whose time is measured. Started, with a full SyncStateSet."""
    try:
        disks = broker_disks(stack, tmp_path, NAMES)
    except Unavailable as e:
        pytest.skip(f"slowfs cannot run here: {e}")
    c = FailoverCluster(procs, tmp_path, heartbeat_timeout_ms=5000,
                        controller_toml="gray_failover_cooldown_ms = 0\ngray_failover_delay_ms = 2000\n")
    cfg = tmp_path / "broker.toml"
    cfg.write_text("health_degrade_windows = 3\n")
    for n in NAMES:
        c.broker_extra_args[n] = ["--config", str(cfg), "--master-lease-ms", "3000"]
    c.start_all()
    c.wait_master(timeout=30)
    c.wait_sync_state_set({1, 2, 3}, timeout=30)
    return c, disks


def test_a_master_on_a_slow_disk_hands_over_to_a_healthy_slave(procs, tmp_path):
    with contextlib.ExitStack() as stack:
        c, disks = _slow_cluster(procs, tmp_path, stack)
        m1, e1 = c.wait_master(timeout=30)
        old = c.master_name()
        assert set(_cluster_list(c).values()) == {"ok"}
        ack_log = tmp_path / "acks.jsonl"
        # a slow disk is seen over several health windows plus the leader's delay (~11 s on an idle
        # machine, longer with both cores busy): a producer that gives up on a message sooner has
        # nothing to do with what is tested here
        prod = c.producer("producer", ack_log, duration_s=40, interval_ms=5, retry_deadline_s=90)
        wait_until(lambda: len(read_ack_log(ack_log)) >= 200, 30, "200 acks before the disk slows down")
        disks[old].set("delay 400")
        t_slow = time.time()
        m2, e2 = c.wait_master(timeout=90, not_id=m1, min_epoch=e1 + 1)
        assert e2 == e1 + 1
        leader_logs = "".join(p.log_text() for p in c.ctl_proc.values())
        assert "gray_failover_started" in leader_logs and '"reasons":[' in leader_logs
        assert "handover_requested" in c.broker_proc[old].log_text()
        assert "gray_failover" in c.broker_proc[old].log_text()
        assert "disk_stall_self_fence" not in c.broker_proc[old].log_text()    # slow, not hung
        assert c.broker_proc[old].popen.poll() is None                           # it stays, as a slave
        # the operator sees the slow replica; the new master is a healthy one
        def slow_shown() -> dict[int, str] | None:
            h = _cluster_list(c)
            return h if h.get(m1, "").startswith("degraded") else None

        health = wait_until(slow_shown, 30, "cluster-list to show the slow replica degraded")
        assert health[m2] == "ok", health
        wait_until(lambda: [a for a in read_ack_log(ack_log) if a["epoch"] == e2], 30, "acks on the new master")
        prod.popen.wait(90)
        assert prod.popen.returncode == 0, prod.log_text()[-2000:]
        acks = read_ack_log(ack_log)
        # one move for the incident: no move back to the slow replica, no second move
        assert {a["epoch"] for a in acks} == {e1, e2}, "more than one move for one incident"
        assert c.replica_info().replica_info.master_epoch == e2
        ts = sorted(a["ack_ts_ms"] / 1000 for a in acks)
        gap = max((b - a for a, b in zip(ts, ts[1:], strict=False) if b > t_slow), default=0.0)
        print(f"slow disk: moved after {[a for a in acks if a['epoch'] == e2][0]['ack_ts_ms'] / 1000 - t_slow:.1f} s; "
              f"largest ack gap {gap:.3f} s")
        disks[old].set("ok")
        lost = _lost(c, acks)
        assert not lost, f"{len(lost)} acked messages lost, e.g. {lost[:5]}"


def test_a_master_whose_event_loop_freezes_gives_its_role_up(procs, tmp_path):
    c = FailoverCluster(procs, tmp_path, heartbeat_timeout_ms=5000)
    cfg = tmp_path / "broker.toml"
    # the disk watch far out of the way: with durable acks every group commit's fdatasync is
    # watched, and one slow under the full suite's load fenced the master before the freeze
    cfg.write_text("disk_stall_cooldown_s = 0\nloop_stall_timeout_ms = 1500\ndisk_stall_timeout_ms = 30000\n")
    freeze = {n: tmp_path / f"freeze-{n}" for n in NAMES}
    c.start_controllers()
    c.start_namesrv()
    for n in NAMES:
        c.broker_extra_args[n] = ["--config", str(cfg)]
        c.start_broker(n, crash_at=f"freeze:broker.loop_probe:{freeze[n]}")
    m1, e1 = c.wait_master(timeout=30)
    c.wait_sync_state_set({1, 2, 3}, timeout=30)
    old = c.master_name()
    ack_log = tmp_path / "acks.jsonl"
    prod = c.producer("producer", ack_log, duration_s=15, interval_ms=5)
    wait_until(lambda: len(read_ack_log(ack_log)) >= 200, 30, "200 acks before the loop freezes")
    freeze[old].write_text("frozen\n")
    t_freeze = time.time()
    code = wait_until(lambda: c.broker_proc[old].popen.poll(), 60, "the frozen master's exit")
    assert code == 75, f"exit code {code}"
    log = c.broker_proc[old].log_text()
    fenced = [x for x in log.splitlines() if "_self_fence" in x]
    assert "test_freeze_injected" in log, ("the master ended before the freeze", fenced)
    assert any('"event":"loop_stall_self_fence"' in x for x in fenced), fenced
    freeze[old].unlink()
    m2, e2 = c.wait_master(timeout=30, not_id=m1, min_epoch=e1 + 1)
    assert e2 == e1 + 1
    elected = [x for x in c.ctl_proc["n1"].log_text().splitlines()
               if '"kind":"ElectMaster"' in x and f'"epoch":{e2}' in x]
    assert elected and '"reason":"controller:crash' in elected[-1], elected
    wait_until(lambda: [a for a in read_ack_log(ack_log) if a["epoch"] == e2], 30, "acks on the new master")
    prod.popen.wait(60)
    assert prod.popen.returncode == 0, prod.log_text()[-2000:]
    acks = read_ack_log(ack_log)
    ts = sorted(a["ack_ts_ms"] / 1000 for a in acks)
    gap = max((b - a for a, b in zip(ts, ts[1:], strict=False) if b > t_freeze), default=0.0)
    print(f"frozen loop: largest ack gap {gap:.3f} s")
    assert {a["epoch"] for a in acks} == {e1, e2}
    c.start_broker(old)
    c.wait_sync_state_set({1, 2, 3}, timeout=60)
    lost = _lost(c, acks)
    assert not lost, f"{len(lost)} acked messages lost, e.g. {lost[:5]}"


def test_a_cluster_whose_every_disk_is_slow_moves_no_master(procs, tmp_path):
    """Shared slow storage: every replica turns degraded, so moving the master around would be a
    handover storm. The leader moves nothing, says why (`cluster_degraded` alert), and the health
    shows in cluster-list; nothing acked is lost."""
    with contextlib.ExitStack() as stack:
        c, disks = _slow_cluster(procs, tmp_path, stack)
        m1, e1 = c.wait_master(timeout=30)
        ack_log = tmp_path / "acks.jsonl"
        prod = c.producer("producer", ack_log, duration_s=30, interval_ms=5)
        wait_until(lambda: len(read_ack_log(ack_log)) >= 200, 30, "200 acks before the disks slow down")
        for n in NAMES:
            disks[n].set("delay 400")

        def leader_said_so() -> bool:
            return any("cluster_degraded" in p.log_text() for p in c.ctl_proc.values())

        wait_until(leader_said_so, 60, "the leader's cluster_degraded")
        # the health the leader acted on, in cluster-list (a slave's heartbeat may lag a moment
        # behind on a loaded machine: it shows as unknown until its next one)
        wait_until(lambda: sum(h.startswith("degraded") for h in _cluster_list(c).values()) >= 2, 60,
                   "two replicas shown degraded in cluster-list")
        prod.popen.wait(90)         # the disks stay slow for the rest of its 30 s
        logs = "".join(p.log_text() for p in c.ctl_proc.values())
        assert "gray_failover_started" not in logs
        for n in NAMES:
            disks[n].set("ok")
        assert c.replica_info().replica_info.master_epoch == e1, "a master moved on a uniformly slow cluster"
        acks = read_ack_log(ack_log)
        assert {a["epoch"] for a in acks} == {e1}
        lost = _lost(c, acks)
        assert not lost, f"{len(lost)} acked messages lost, e.g. {lost[:5]}"
