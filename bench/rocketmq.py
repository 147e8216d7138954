"""RocketMQ's own brokers under two controllers: RocketMQ's (DLedger, embedded in its name servers)
and autoswitch's (its remoting port), the same three RocketMQ 5 brokers of one group and the same
Java producer (sync sends, one message per request), rounds of ``kill -9`` of the master (issue 62).

    python -m bench.rocketmq [--rounds 3] [--blocks 1] [--controllers 3] [--max-s 900]

Per round and system: kill -> a controller names another master (and, beside it, kill -> the
killed JVM reaped: a floor both systems share, since its connections close only as it exits) (polled over the remoting
protocol, the same probe for both: 1005 for the leader, then 1006), kill -> the producer's first
SEND_OK after the kill (the old master is dead, so the new one sent it), and restart -> the killed
broker back in the SyncStateSet. Each system's block ends with a Java consumer reading the topic
back: ``lost`` = acknowledged and not read. Blocks alternate the systems (``--blocks``) so both
see the same machine. Progress on stderr; the last line is JSON: per system the p50/max of the
three times, acked and lost, and ``ratio_decide_p50`` (RocketMQ's decision time over ours).
Needs RocketMQ 5 (ROCKETMQ_HOME, or the fixture beside the checkout) and a JDK.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from autoswitch.controller.remoting import client as remoting
from autoswitch.controller.remoting import rocketmq_state
from autoswitch.controller.remoting.codec import RemotingError

from tests.integration.controller_harness import Cluster
from tests.integration.rocketmq_harness import RocketMQ, rocketmq_home
from tests.procs import HOST, ProcGroup, free_port

GROUP, TOPIC = "broker-a", "BenchFailover"
SHORT_TIMEOUTS = False      # --short-timeouts: the tests' 3 s heartbeat timeout (a stress, not a comparison)
BROKERS = ("b1", "b2", "b3")


def _p(msg: str) -> None:
    print(f"[bench-rocketmq {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def _pct(xs: list[float], q: float) -> float | None:
    if not xs:
        return None
    s = sorted(xs)
    return round(s[min(len(s) - 1, int(q * len(s)))], 3)


@contextlib.contextmanager
def _folder(system: str, keep: bool) -> Iterator[str]:
    tmp = tempfile.mkdtemp(prefix=f"bench-rocketmq-{system}-")
    try:
        yield tmp
    finally:
        if not keep:
            shutil.rmtree(tmp, ignore_errors=True)


class Deadline(Exception):
    pass


class Run:
    def __init__(self, system: str, tmp: Path, n_controllers: int, deadline: float) -> None:
        home, why = rocketmq_home()
        if home is None:
            raise SystemExit(f"bench-rocketmq: {why}")
        self.system, self.tmp, self.deadline = system, tmp, deadline
        self.rmq = RocketMQ(home, tmp / "rmq")
        self.procs = ProcGroup(tmp / "logs")
        self.n = n_controllers
        self.controllers: list[str] = []
        self.ns = ""
        self._conn: remoting.Connection | None = None

    def _wait(self, what: str, cond, limit_s: float, interval: float = 0.05) -> Any:
        end = min(time.monotonic() + limit_s, self.deadline)
        while time.monotonic() < end:
            try:
                v = cond()
            except (OSError, RemotingError):
                v = None
            if v:
                return v
            time.sleep(interval)
        raise Deadline(f"{self.system}: {what} not within {limit_s:.0f} s")

    def start(self, brokers: tuple[str, ...] = BROKERS) -> None:
        if self.system == "autoswitch":
            c = Cluster(self.procs, self.tmp, n=self.n, remoting=True)
            # the controllers' defaults (a 10 s heartbeat timeout, as RocketMQ's), not the tests' short one
            if not SHORT_TIMEOUTS:
                c.toml.write_text("")
            c.start_all()
            self.controllers = list(c.remoting_addrs.values())
            self.ns = self.rmq.namesrv()
        else:
            # RocketMQ's controller embedded in its name servers; brokers reach it on the DLedger
            # port, as RocketMQ's controller deployment docs configure it
            ids = [f"n{i}" for i in range(self.n)]
            dl = {i: free_port() for i in ids}
            peers = ";".join(f"{i}-{HOST}:{p}" for i, p in dl.items())
            names = []
            for i in ids:
                names.append(self.rmq.namesrv(f"ns-{i}", enableControllerInNamesrv="true",
                                              controllerDLegerGroup="bench", controllerDLegerPeers=peers,
                                              controllerDLegerSelfId=i,
                                              controllerStorePath=str(self.tmp / f"ctl-{i}")))
            self.ns = ";".join(names)
            self.controllers = [f"{HOST}:{p}" for p in dl.values()]
        for b in brokers:
            self.rmq.broker(b, self.ns, self.controllers)
        self.rmq.classpath()

    def state(self) -> dict | None:
        """The group as the controller leader says; the connection to it is kept between polls
        (both systems are probed alike) and found again when it fails or stops answering."""
        if self._conn is None:
            lead = remoting.leader(self.controllers)
            if lead is None:
                return None
            self._conn = remoting.Connection(lead, timeout=2.0)
        try:
            st = remoting.sync_state(self._conn, GROUP)
        except (OSError, RemotingError):
            st = None
        if st is None:
            self._conn.close()
            self._conn = None
        return st

    def in_sync(self) -> set[int]:
        st = self.state()
        return {r["brokerId"] for r in (st or {}).get("inSyncReplicas") or []}

    def master(self) -> tuple[int, int] | None:
        st = self.state()
        if not st or not st.get("masterBrokerId"):
            return None
        return int(st["masterBrokerId"]), int(st["masterEpoch"])

    def name_of(self, broker_id: int) -> str:
        st = self.state() or {}
        for r in (st.get("inSyncReplicas") or []) + (st.get("notInSyncReplicas") or []):
            if r["brokerId"] == broker_id:
                port = int(r["brokerAddress"].rsplit(":", 1)[1])
                return next(b for b in BROKERS if self.rmq.ports[b] == port)
        raise Deadline(f"{self.system}: broker {broker_id} has no address")

    def stop(self) -> None:
        self.rmq.stop_all()
        self.procs.stop_all()


def run_system(system: str, rounds: int, n_controllers: int, deadline: float, keep: bool = False) -> dict:
    out: dict[str, Any] = {"decide_s": [], "first_send_ok_s": [], "back_in_sync_s": [], "exit_s": [], "rounds": 0}
    with _folder(system, keep) as tmp:
        if keep:
            _p(f"{system}: files in {tmp}")
        run = Run(system, Path(tmp), n_controllers, deadline)
        lines: list[str] = []
        producer = None
        stop_file = Path(tmp) / "stop-producer"
        try:
            run.start()
            _p(f"{system}: waiting for a master and three brokers in sync")
            run._wait("three brokers in sync", lambda: len(run.in_sync()) == 3, 300, 0.5)
            producer = run.rmq.client("produce", run.ns, TOPIC, system, "10000000", "3600", "1", str(stop_file),
                                      timeout=3600)
            reader = threading.Thread(target=lambda: lines.extend(producer.stdout), daemon=True)
            reader.start()
            run._wait("the producer's first acks", lambda: sum(ln.startswith("ACK ") for ln in list(lines)) >= 50,
                      120, 0.2)
            # a failover before the slaves copied the topic's config would leave it unreadable
            # (RocketMQ's own behaviour with auto-created topics; not what is measured here)
            run._wait("the topic on every broker", lambda: all(run.rmq.has_topic(b, TOPIC) for b in BROKERS), 60, 0.5)
            for i in range(rounds):
                run._wait("three brokers in sync", lambda: len(run.in_sync()) == 3, 240, 0.2)
                old, epoch = run._wait("a master", run.master, 60)
                victim = run.name_of(old)
                acks_before = len(lines)
                t_kill = time.time()
                run.rmq.kill9(victim)
                gone = time.time() - t_kill      # SIGKILL -> the process reaped (its sockets closed)
                m = run._wait("another master", lambda old=old: (x := run.master()) and x[0] != old and x, 120, 0.002)
                decide = time.time() - t_kill

                def first_ack_after(start: int = acks_before, t0: float = t_kill) -> float | None:
                    # the first SEND_OK after the first failed send since the kill: an answer the
                    # old master sent just before it died arrives after the kill too
                    failed = False
                    for ln in list(lines[start:]):
                        parts = ln.split()
                        if parts[0] in ("FAIL", "NOTOK"):
                            failed = True
                        elif failed and parts[0] == "ACK" and len(parts) >= 3 and int(parts[2]) / 1000 > t0:
                            return int(parts[2]) / 1000 - t0
                    return None
                first = run._wait("a SEND_OK from the new master", first_ack_after, 180, 0.1)
                t_restart = time.time()
                run.rmq.broker(victim, run.ns, run.controllers)
                run._wait(f"broker {old} back in the SyncStateSet", lambda old=old: old in run.in_sync(), 240, 0.1)
                back = time.time() - t_restart
                out["decide_s"].append(decide)
                out["exit_s"].append(gone)
                out["first_send_ok_s"].append(first)
                out["back_in_sync_s"].append(back)
                out["rounds"] += 1
                _p(f"{system} round {i + 1}/{rounds}: master {old}@{epoch} killed; {m[0]}@{m[1]} named after "
                   f"{decide:.3f} s (reaped after {gone:.3f} s); first SEND_OK after {first:.3f} s; back in sync {back:.1f} s after restart")
        except Deadline as e:
            out["error"] = str(e)
            _p(str(e))
        finally:
            if producer is not None:
                stop_file.touch()
                try:
                    producer.wait(60)
                except Exception:  # noqa: BLE001 - it is killed below
                    producer.kill()
            acked = {ln.split()[1] for ln in lines if ln.startswith("ACK ")}
            out["acked"] = len(acked)
            if acked and "error" not in out:
                read = run.rmq.run_client("consume", run.ns, TOPIC, "180", timeout=240)
                got = {ln.split()[1] for ln in read if ln.startswith("MSG ")}
                out["lost"] = len(acked - got)
                out["read"] = len(got)
            run.stop()
    return out


def run_dr_schedule(system: str, n_controllers: int, deadline: float, keep: bool = False) -> dict:
    """apache/rocketmq #10812: after a disaster-recovery move, a broker's ``controllerAddr`` names
    only controllers that are not the leader. It heartbeats only to those, while 1005 sends its
    other requests to the leader. Does it get into the SyncStateSet (the leader must count a
    follower's heartbeats), and does the group fail over when its master is killed next?"""
    out: dict[str, Any] = {"schedule": "10812", "slave_joined_s": None, "failover_s": None}
    with _folder(f"{system}-10812", keep) as tmp:
        run = Run(system, Path(tmp), n_controllers, deadline)
        try:
            run.start(brokers=BROKERS[:2])
            run._wait("two brokers in sync", lambda: len(run.in_sync()) == 2, 300, 0.5)
            lead = run._wait("the controller leader", lambda: remoting.leader(run.controllers), 60)
            follower = next(a for a in run.controllers if a != lead)
            _p(f"{system} #10812: b3 knows only controller {follower} (the leader is {lead})")
            t0 = time.time()
            run.rmq.broker("b3", run.ns, [follower])
            try:
                run._wait("b3 in the SyncStateSet", lambda: len(run.in_sync()) == 3, 90, 0.2)
                out["slave_joined_s"] = round(time.time() - t0, 1)
            except Deadline:
                pass
            old, _epoch = run._wait("a master", run.master, 30)
            victim = run.name_of(old)
            t_kill = time.time()
            run.rmq.kill9(victim)
            try:
                run._wait("another master", lambda: (x := run.master()) and x[0] != old, 60, 0.01)
                out["failover_s"] = round(time.time() - t_kill, 3)
            except Deadline:
                pass
            _p(f"{system} #10812: b3 joined the SyncStateSet: {out['slave_joined_s']} s; "
               f"failover after the master's kill: {out['failover_s']} s")
        except Deadline as e:
            out["error"] = str(e)
            _p(str(e))
        finally:
            run.stop()
    return out


def run_same_master_schedule(system: str, n_controllers: int, deadline: float, keep: bool = False) -> dict:
    """apache/rocketmq #9689: a new MasterEpoch for a master that does not change stalls 5.2.0's
    replication (the master cannot find the epoch it transfers in). Two brokers; the slave stops
    (the set shrinks to the master), the master is killed with ``kill -9`` and restarted. Does the
    controller give the same master a new MasterEpoch, does the slave, started again, get back into
    the SyncStateSet, and does the group fail over to it when the master is killed next, with
    nothing acknowledged lost?"""
    out: dict[str, Any] = {"schedule": "9689", "same_master_new_epoch": None, "slave_rejoined_s": None,
                           "failover_s": None, "acked": 0, "lost": None}
    with _folder(f"{system}-9689", keep) as tmp:
        run = Run(system, Path(tmp), n_controllers, deadline)
        acked: set[str] = set()

        def produce(tag: str, n: int) -> None:
            lines = run.rmq.run_client("produce", run.ns, TOPIC, tag, str(n), "120", "1", timeout=180)
            acked.update(ln.split()[1] for ln in lines if ln.startswith("ACK "))

        try:
            run.start(brokers=BROKERS[:2])
            run._wait("two brokers in sync", lambda: len(run.in_sync()) == 2, 300, 0.5)
            produce("a", 100)
            run._wait("the topic on both brokers", lambda: all(run.rmq.has_topic(b, TOPIC) for b in BROKERS[:2]),
                      60, 0.5)
            master, epoch = run._wait("a master", run.master, 30)
            m_name = run.name_of(master)
            s_name = next(b for b in BROKERS[:2] if b != m_name)
            run.rmq.stop(s_name)
            run._wait("the set shrunk to the master", lambda: run.in_sync() == {master}, 120, 0.5)
            run.rmq.kill9(m_name)
            run.rmq.broker(m_name, run.ns, run.controllers)
            m_addr = f"{HOST}:{run.rmq.ports[m_name]}"

            def master_back() -> tuple[int, int] | None:
                # ready: the restarted broker is master in the controller's view and its own epoch
                # file ends with that MasterEpoch (it took the role)
                x = run.master()
                if not x or x[0] != master:
                    return None
                try:
                    return x if rocketmq_state.broker_epoch(m_addr, 2.0) == x[1] else None
                except rocketmq_state.RocketMQStateError:
                    return None
            back = run._wait("the master back", master_back, 180, 0.2)
            out["same_master_new_epoch"] = back[1] != epoch
            _p(f"{system} #9689: master {master}@{epoch} killed and restarted: master {back[0]}@{back[1]}")
            produce("b", 100)
            t0 = time.time()
            run.rmq.broker(s_name, run.ns, run.controllers)
            try:
                run._wait("the slave back in the SyncStateSet", lambda: len(run.in_sync()) == 2, 120, 0.2)
                out["slave_rejoined_s"] = round(time.time() - t0, 1)
            except Deadline:
                pass
            produce("c", 100)
            t_kill = time.time()
            run.rmq.kill9(m_name)
            try:
                run._wait("another master", lambda: (x := run.master()) and x[0] != master, 60, 0.01)
                out["failover_s"] = round(time.time() - t_kill, 3)
                produce("d", 50)
            except Deadline:
                pass
            out["acked"] = len(acked)
            read = run.rmq.run_client("consume", run.ns, TOPIC, "120", timeout=180)
            out["lost"] = len(acked - {ln.split()[1] for ln in read if ln.startswith("MSG ")})
            _p(f"{system} #9689: new epoch for the same master: {out['same_master_new_epoch']}; slave back in "
               f"sync after {out['slave_rejoined_s']} s; failover {out['failover_s']} s; acked {out['acked']}, "
               f"lost {out['lost']}")
        except Deadline as e:
            out["error"] = str(e)
            _p(str(e))
        finally:
            run.stop()
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.rocketmq")
    ap.add_argument("--rounds", type=int, default=3, help="kill -9 rounds per system and block")
    ap.add_argument("--blocks", type=int, default=1, help="alternations of the two systems")
    ap.add_argument("--controllers", type=int, default=3)
    ap.add_argument("--max-s", type=float, default=1800.0, help="the whole run's bound")
    ap.add_argument("--systems", default="rocketmq,autoswitch", help=argparse.SUPPRESS)
    ap.add_argument("--keep", action="store_true", help="keep each system's folder (logs) and print its path")
    ap.add_argument("--short-timeouts", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--schedule", choices=("kill", "10812", "9689"), default="kill",
                    help="10812: a broker that knows only a follower controller (apache/rocketmq #10812); "
                         "9689: the master killed and restarted while its slave is out (apache/rocketmq #9689)")
    args = ap.parse_args(argv)
    global SHORT_TIMEOUTS
    SHORT_TIMEOUTS = args.short_timeouts
    if not (1 <= args.rounds <= 50 and 1 <= args.blocks <= 10 and args.controllers in (1, 3, 5)):
        print("bad arguments (rounds 1..50, blocks 1..10, controllers 1, 3 or 5)", file=sys.stderr)
        return 2
    deadline = time.monotonic() + args.max_s
    if args.schedule in ("10812", "9689"):
        schedule = run_dr_schedule if args.schedule == "10812" else run_same_master_schedule
        res = {system: schedule(system, max(args.controllers, 3), deadline, args.keep)
               for system in ("rocketmq", "autoswitch") if system in args.systems.split(",")}
        print(json.dumps(res))
        return 0 if not any("error" in r for r in res.values()) else 1
    per: dict[str, dict[str, Any]] = {s: {"decide_s": [], "first_send_ok_s": [], "back_in_sync_s": [], "exit_s": [],
                                          "acked": 0,
                                          "lost": 0, "rounds": 0, "errors": []} for s in ("rocketmq", "autoswitch")}
    for b in range(args.blocks):
        order = ("rocketmq", "autoswitch") if b % 2 == 0 else ("autoswitch", "rocketmq")
        for system in [x for x in order if x in args.systems.split(",")]:
            _p(f"block {b + 1}/{args.blocks}: {system}")
            r = run_system(system, args.rounds, args.controllers, deadline, args.keep)
            acc = per[system]
            for k in ("decide_s", "first_send_ok_s", "back_in_sync_s", "exit_s"):
                acc[k] += r[k]
            acc["acked"] += r.get("acked", 0)
            acc["lost"] += r.get("lost", 0)
            acc["read"] = acc.get("read", 0) + r.get("read", 0)
            acc["rounds"] += r["rounds"]
            if "error" in r:
                acc["errors"].append(r["error"])
    result: dict[str, Any] = {}
    for s, acc in per.items():
        result[s] = {"rounds": acc["rounds"], "acked": acc["acked"], "lost": acc["lost"], "read": acc.get("read", 0),
                     "errors": acc["errors"],
                     **{f"{k[:-2]}_p50_s": _pct(acc[k], 0.5)
                        for k in ("decide_s", "first_send_ok_s", "back_in_sync_s", "exit_s")},
                     **{f"{k[:-2]}_max_s": _pct(acc[k], 1.0) for k in ("decide_s", "first_send_ok_s", "back_in_sync_s")}}
    a, r = result["autoswitch"], result["rocketmq"]
    result["ratio_decide_p50"] = (round(r["decide_p50_s"] / a["decide_p50_s"], 2)
                                  if a["decide_p50_s"] and r["decide_p50_s"] else None)
    result["controllers"], result["rounds_per_block"], result["blocks"] = args.controllers, args.rounds, args.blocks
    result["met"] = bool(result["ratio_decide_p50"] and result["ratio_decide_p50"] >= 5
                         and a["lost"] == 0 and r["rounds"] and a["rounds"]
                         and (a["first_send_ok_p50_s"] or 1e9) <= (r["first_send_ok_p50_s"] or 0)
                         and (a["back_in_sync_p50_s"] or 1e9) <= (r["back_in_sync_p50_s"] or 0))
    print(json.dumps(result))
    return 0 if not (a["errors"] or r["errors"]) else 1


if __name__ == "__main__":
    sys.exit(main())
