"""Gray-failure benchmark (issue 32): the master's disk hangs under continuous acked produce.

    python -m bench.grayfailure [--rounds 5] [--hang-s 8] [--time-limit-s 900]

One cluster (3 controllers, name server, 3 brokers in controller mode, ack mode all, heartbeat
timeout 5 s), every broker's data directory on slowfs (tests/grayfail/slowfs.c: writes and
fsyncs hang on command, reads go on). Round after round the current master's disk hangs for
``--hang-s`` seconds while a producer writes one message every 5 ms; the largest gap between two
acks from the moment the disk hangs is the round's figure. First ``--rounds`` rounds with the
watchdog on (its default ``disk_stall_timeout_ms``), then, same cluster, every broker restarted
with it off (``disk_stall_timeout_ms = 0`` and ``loop_stall_timeout_ms = 0``) for as many rounds: the heartbeat timeout is then
what ends the incident. After each round the disk comes back and the old master rejoins.
Needs root and FUSE (the tests' slowfs); says why and exits 0 where it cannot run.

Then ``--slow-rounds`` rounds of a *slow* master (gray failover, docs/broker.md "A slow master"):
the current master's disk delays every write, fsync and create by ``--slow-delay-ms`` for
``--slow-s`` seconds; the broker health and the leader's gray failover run with their defaults
(5 slow windows, 5 s delay; the cool-down set to 0 so rounds may follow each other), the disk
watchdog off (slowfs delays each write op, so one fsync of many pages passes its 1 s and it
would end the incident by its crash-fast exit first). The round's
figure is the time from the slowdown to the first ack by a new master (None: nothing moved), and
the MasterEpochs it took. Without gray failover the slow master stays until its disk recovers.

Progress on stderr; the last line on stdout is JSON: gap_s_p50, gap_s_p99 (watchdog on),
gap_s_p99_without, handovers_per_incident, lost_acked, slow_move_s_p50, slow_move_s_p99,
slow_moves_per_incident, and the rounds.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.producing_cluster import pct

HEARTBEAT_TIMEOUT_MS = 5000
NAMES = ("b1", "b2", "b3")


def _p(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _largest_gap(acks: list[dict], since: float, until: float) -> float | None:
    ts = sorted(a["ack_ts_ms"] / 1000 for a in acks)
    before = [t for t in ts if t <= since]
    after = [t for t in ts if since < t <= until]
    if not after:
        return None
    points = ([before[-1]] if before else []) + after
    return max(b - a for a, b in zip(points, points[1:], strict=False)) if len(points) > 1 else after[0] - since


def _slow_round(c: Any, disks: dict, ack_log: Path, i: int, slow_s: float, delay_ms: int) -> dict[str, Any]:
    from tests.integration.failover_harness import read_ack_log

    m_id, e0 = c.wait_master(timeout=60)
    c.wait_sync_state_set({1, 2, 3}, timeout=90)
    old = c.master_name()
    t0 = time.time()
    disks[old].set(f"delay {delay_ms}")
    moved_at = None
    while time.time() - t0 < slow_s:
        later = [a["ack_ts_ms"] / 1000 for a in read_ack_log(ack_log)
                 if a["epoch"] > e0 and a["ack_ts_ms"] > t0 * 1000]
        if later:
            moved_at = min(later)
            break
        time.sleep(0.2)
    left = slow_s - (time.time() - t0)
    if left > 0:
        time.sleep(left)            # the disk stays slow for --slow-s: the incident's length
    disks[old].set("ok")
    # a single write or fsync past disk_stall_timeout_ms is a hang to the watchdog: then the
    # move was its crash-fast exit, not the gray failover (the round says which)
    exited = c.broker_proc[old].popen.poll()
    if exited is not None:
        c.start_broker(old)
    c.wait_sync_state_set({1, 2, 3}, timeout=90)
    e_after = c.replica_info().replica_info.master_epoch
    s = {"round": i + 1, "slow_move_s": None if moved_at is None else round(moved_at - t0, 3), "moves": e_after - e0,
         "by": "none" if e_after == e0 else "watchdog_exit" if exited is not None else "gray_failover"}
    _p(f"grayfailure: slow round {i + 1}: first ack on a new master after {s['slow_move_s']} s, "
       f"MasterEpoch {e0} -> {e_after} ({s['by']})")
    return s


def run(rounds: int, hang_s: float, deadline: float, work: Path, slow_rounds: int = 0, slow_s: float = 30.0,
        slow_delay_ms: int = 150) -> dict[str, Any]:
    from tests.grayfail.slowfs import broker_disks
    from tests.integration.failover_harness import FailoverCluster, consume_routed, read_ack_log, wait_until
    from tests.procs import ProcGroup

    procs = ProcGroup(work / "logs")
    samples: list[dict[str, Any]] = []
    with contextlib.ExitStack() as stack:
        stack.callback(procs.stop_all)
        disks = broker_disks(stack, work, NAMES)
        c = FailoverCluster(procs, work, heartbeat_timeout_ms=HEARTBEAT_TIMEOUT_MS,
                            controller_toml="gray_failover_cooldown_ms = 0\n")
        configs = {}
        for on in (True, False):
            cfg = work / f"broker-{'on' if on else 'off'}.toml"
            # the cool-down (60 s by default) would skip rounds that follow each other closely
            # off: the whole watchdog, its loop watch too (a hung disk stops the loop as well)
            cfg.write_text("disk_stall_cooldown_s = 0\n"
                           + ("" if on else "disk_stall_timeout_ms = 0\nloop_stall_timeout_ms = 0\n"))
            configs[on] = cfg
        for n in NAMES:
            c.broker_extra_args[n] = ["--config", str(configs[True])]
        c.start_all()
        c.wait_master(timeout=60)
        c.wait_sync_state_set({1, 2, 3}, timeout=60)
        ack_log = work / "acks.jsonl"
        prod = c.producer("producer", ack_log, duration_s=max(60.0, deadline - time.monotonic()), interval_ms=5)
        wait_until(lambda: len(read_ack_log(ack_log)) >= 200, 60, "200 acks")
        for i in range(2 * rounds):
            on = i < rounds
            if i == rounds:
                _p("grayfailure: restarting every broker with the watchdog off")
                for n in NAMES:
                    c.broker_extra_args[n] = ["--config", str(configs[False])]
                    c.broker_proc[n].stop(30)
                    c.start_broker(n)
                    c.wait_sync_state_set({1, 2, 3}, timeout=60)
            if time.monotonic() > deadline - 60:
                _p(f"grayfailure: time budget used up after {i} rounds")
                break
            m_id, e0 = c.wait_master(timeout=60)
            c.wait_sync_state_set({1, 2, 3}, timeout=60)
            old = c.master_name()
            t0 = time.time()
            disks[old].set("hang")
            m2, e2 = c.wait_master(timeout=60, not_id=m_id, min_epoch=e0 + 1)
            wait_until(lambda e=e2, t=t0: any(a["epoch"] >= e and a["ack_ts_ms"] > t * 1000
                                              for a in read_ack_log(ack_log)), 60, "acks on the new master")
            left = hang_s - (time.time() - t0)
            if left > 0:
                time.sleep(left)        # the disk stays hung for --hang-s: the incident's length
            disks[old].set("ok")
            if on:     # it exits (75) once its stuck write returns; restarted, it rejoins uncleanly
                wait_until(lambda o=old: c.broker_proc[o].popen.poll() is not None, 60, "the old master's exit")
                c.start_broker(old)
            # watchdog off: the old master lives on, learns it was deposed and becomes a slave
            c.wait_sync_state_set({1, 2, 3}, timeout=90)
            e_after = c.replica_info().replica_info.master_epoch
            gap = _largest_gap(read_ack_log(ack_log), t0, t0 + hang_s + 30)
            s = {"round": i + 1, "watchdog": on, "gap_s": None if gap is None else round(gap, 3),
                 "moves": e_after - e0}
            samples.append(s)
            _p(f"grayfailure: round {i + 1}/{2 * rounds} watchdog {'on' if on else 'off'}: largest ack gap "
               f"{s['gap_s']} s, MasterEpoch {e0} -> {e_after}")
        slow: list[dict[str, Any]] = []
        if slow_rounds:
            _p("grayfailure: restarting every broker for the slow rounds (the disk watchdog off)")
            slow_cfg = work / "broker-slow.toml"
            # slowfs delays every write op, so one fsync of many pages passes the watchdog's 1 s and
            # it would end the incident first (as it should, a hang to it): off, to measure the
            # gray failover alone
            slow_cfg.write_text("disk_stall_timeout_ms = 0\n")
            for n in NAMES:
                # the default lease (60 % of the heartbeat timeout), not the harness's 600 ms one
                # that lapses on every slow append and so fences the writes whose time is measured
                c.broker_extra_args[n] = ["--config", str(slow_cfg), "--master-lease-ms",
                                          str(HEARTBEAT_TIMEOUT_MS * 6 // 10)]
                c.broker_proc[n].stop(30)
                c.start_broker(n)
                c.wait_sync_state_set({1, 2, 3}, timeout=60)
        for i in range(slow_rounds):
            if time.monotonic() > deadline - slow_s - 60:
                _p(f"grayfailure: time budget used up after {i} slow rounds")
                break
            slow.append(_slow_round(c, disks, ack_log, i, slow_s, slow_delay_ms))
        prod.stop(30)
        acks = read_ack_log(ack_log)
        consumed = {m["msg_id"] for m in consume_routed(c.namesrv)}
        lost = sum(1 for a in acks if a["msg_id"] not in consumed)
    on_gaps = [s["gap_s"] for s in samples if s["watchdog"] and s["gap_s"] is not None]
    off_gaps = [s["gap_s"] for s in samples if not s["watchdog"] and s["gap_s"] is not None]
    on_moves = [s["moves"] for s in samples if s["watchdog"]]
    moves_s = [x["slow_move_s"] for x in slow if x["slow_move_s"] is not None]
    return {"gap_s_p50": pct(on_gaps, 0.5), "gap_s_p99": pct(on_gaps, 0.99),
            "gap_s_p50_without": pct(off_gaps, 0.5), "gap_s_p99_without": pct(off_gaps, 0.99),
            "handovers_per_incident": max(on_moves) if on_moves else None, "lost_acked": lost, "acked": len(acks),
            "rounds": len(samples), "hang_s": hang_s, "heartbeat_timeout_ms": HEARTBEAT_TIMEOUT_MS,
            "samples": samples,
            "slow_move_s_p50": pct(moves_s, 0.5), "slow_move_s_p99": pct(moves_s, 0.99),
            "slow_moves_per_incident": max((x["moves"] for x in slow), default=None),
            "slow_unmoved_rounds": sum(1 for x in slow if x["slow_move_s"] is None), "slow_rounds": slow,
            "slow_s": slow_s, "slow_delay_ms": slow_delay_ms}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5, help="rounds with the watchdog on, then as many off")
    ap.add_argument("--hang-s", type=float, default=8.0, help="how long the disk hangs each round")
    ap.add_argument("--slow-rounds", type=int, default=3, help="rounds of a slow (not hung) master disk")
    ap.add_argument("--slow-s", type=float, default=30.0, help="how long the disk stays slow each slow round")
    ap.add_argument("--slow-delay-ms", type=int, default=150,
                    help="delay of each write, fsync and create (one fsync must stay under disk_stall_timeout_ms)")
    ap.add_argument("--time-limit-s", type=float, default=1500.0)
    ap.add_argument("--workdir", default=None)
    a = ap.parse_args(argv)
    from tests.grayfail.slowfs import Unavailable, binary

    try:
        binary()
    except Unavailable as e:
        print(json.dumps({"ran": False, "reason": str(e)}))
        return 0
    deadline = time.monotonic() + a.time_limit_s
    with tempfile.TemporaryDirectory(prefix="bench-grayfailure-", dir=a.workdir) as tmp:
        out = run(a.rounds, a.hang_s, deadline, Path(tmp), a.slow_rounds, a.slow_s, a.slow_delay_ms)
    print(json.dumps(out))
    return 0 if out["lost_acked"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
