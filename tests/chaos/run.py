"""``make chaos``: real controller processes in network namespaces under faults.

    python -m tests.chaos.run [--seconds 40] [--seed 1]

Three controllers, each in its own namespace on a bridge; clients in the root namespace reach
them through delaying TCP proxies (tc netem is not available). While 4 clients race on
GetNextBrokerId/ApplyBrokerId, a bounded fault schedule hits the Raft leader and the others:
kill -9 (and restart), SIGSTOP/SIGCONT, nftables partitions of the leader and of a follower.
Afterwards: the client history must be linearizable (tests/sim/lincheck.py) and every node's
events.jsonl must agree index by index with at most one master per (group, MasterEpoch).
Exit 1 on a violation. Where it cannot run (not root, no nft) it says so and exits 0.
Everything it creates (namespaces, veths, bridge, processes) is removed at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from tests.sim.lincheck import BrokerIdModel, Op, check, dump_jsonl

from . import netns as nsmod
from .proxy import DelayProxy

ROOT = Path(__file__).resolve().parent.parent.parent
NAMES = ["n1", "n2", "n3"]
PORT = 7101
TOML = """
[controller]
# a private network namespace made by this test: plaintext is asked for, not an accident
allow_insecure = true
heartbeat_timeout_ms = 3000
scan_interval_ms = 500
propose_timeout_s = 2.0
read_timeout_s = 1.5
# the state hash check runs often enough to compare many times under the faults (no false alarm)
state_check_interval_s = 2.0

[raft]
snapshot_every = 64
compaction_keep = 16
"""
GROUPS = [f"ch{i}" for i in range(40)]
MAX_ID = 40
MAX_OPS_PER_CLIENT = 3000


class Node:
    def __init__(self, name: str, net: nsmod.Netns, spec: str, data: Path, toml: Path, logs: Path) -> None:
        self.name, self.net, self.spec, self.data, self.toml, self.logs = name, net, spec, data, toml, logs
        self.popen: subprocess.Popen | None = None
        self.gen = 0
        self.stopped = False

    @property
    def addr(self) -> str:
        return f"{self.net.ip[self.name]}:{PORT}"

    def start(self) -> None:
        self.gen += 1
        log = open(self.logs / f"{self.name}-{self.gen}.log", "ab")
        argv = [sys.executable, "-m", "autoswitch", "controller", "--node-id", self.name, "--peers", self.spec,
                "--data-dir", str(self.data), "--config", str(self.toml)]
        self.popen = subprocess.Popen(self.net.cmd(self.name, argv), cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                                      start_new_session=True, env=dict(os.environ, PYTHONUNBUFFERED="1"))
        log.close()
        self.stopped = False

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def signal(self, sig: int) -> None:
        if self.alive():
            os.kill(self.popen.pid, sig)

    def kill9(self) -> None:
        if self.alive():
            os.kill(self.popen.pid, signal.SIGKILL)
            self.popen.wait(10)

    def stop(self) -> None:
        if not self.alive():
            return
        os.kill(self.popen.pid, signal.SIGCONT)
        os.kill(self.popen.pid, signal.SIGTERM)
        try:
            self.popen.wait(10)
        except subprocess.TimeoutExpired:
            os.kill(self.popen.pid, signal.SIGKILL)
            self.popen.wait(10)


def wait_port(host: str, port: int, timeout: float = 20) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        with contextlib.closing(socket.socket()) as s:
            s.settimeout(0.3)
            if s.connect_ex((host, port)) == 0:
                return
        time.sleep(0.1)
    raise TimeoutError(f"{host}:{port} did not open")


async def find_leader(nodes: list[Node]) -> Node | None:
    from autoswitch.controller.client import ControllerClient
    from autoswitch.controller.codes import ControllerRpcError

    from autoswitch.proto import controller_pb2 as pb

    async with ControllerClient([n.addr for n in nodes]) as c:
        for n in nodes:
            if not n.alive() or n.stopped:
                continue
            try:
                m = await c.call_node(n.addr, "GetMetaData", pb.GetMetaDataRequest(), timeout_s=1.0)
            except ControllerRpcError:
                continue
            if m.is_leader:
                return n
    return None


async def client_loop(cid: int, spec: str, stop_at: float, history: list[Op]) -> None:
    from autoswitch.controller.client import ControllerClient
    from autoswitch.controller.codes import Code, ControllerRpcError

    rng = random.Random(cid)
    async with ControllerClient(spec, deadline_s=4, rpc_timeout_s=1.5) as c:
        for n in range(MAX_OPS_PER_CLIENT):
            if time.monotonic() >= stop_at:
                return
            g = rng.choice(GROUPS)
            t0 = time.monotonic()
            try:
                nxt = await c.get_next_broker_id("chaos", g)
                history.append(Op(cid, g, ("next",), nxt, t0, time.monotonic()))
            except ControllerRpcError:
                history.append(Op(cid, g, ("next",), None, t0, None))
                await asyncio.sleep(0.05)
                continue
            if nxt > MAX_ID:
                continue
            bid = nxt if rng.random() < 0.7 else max(1, nxt + rng.choice((-2, -1, 1)))
            code = f"c{cid}-{g}-{bid}" if rng.random() < 0.8 else f"c{cid}-{n}"
            t1 = time.monotonic()
            try:
                await c.apply_broker_id("chaos", g, bid, code)
                history.append(Op(cid, g, ("apply", bid, code), "ok", t1, time.monotonic()))
            except ControllerRpcError as e:
                if e.reply_code == int(Code.CONTROLLER_BROKER_ID_INVALID):
                    history.append(Op(cid, g, ("apply", bid, code), "invalid", t1, time.monotonic()))
                else:
                    history.append(Op(cid, g, ("apply", bid, code), None, t1, None))


async def faults(nodes: list[Node], net: nsmod.Netns, stop_at: float, rng: random.Random, log: list[str]) -> None:
    kinds = ["kill_leader", "stop_leader", "partition_leader", "partition_follower"]
    i = 0
    await asyncio.sleep(2.0)
    while time.monotonic() < stop_at - 6:
        kind = kinds[i % len(kinds)] if i < len(kinds) else rng.choice(kinds)
        i += 1
        leader = await find_leader(nodes)
        if leader is None:
            log.append(f"{time.monotonic():.1f} no leader; waiting")
            await asyncio.sleep(1.0)
            continue
        others = [n for n in nodes if n is not leader]
        log.append(f"{time.monotonic():.1f} {kind} (leader {leader.name})")
        if kind == "kill_leader":
            leader.kill9()
            await asyncio.sleep(2.0)
            leader.start()
        elif kind == "stop_leader":
            leader.signal(signal.SIGSTOP)
            leader.stopped = True
            await asyncio.sleep(3.0)
            leader.signal(signal.SIGCONT)
            leader.stopped = False
        elif kind == "partition_leader":
            net.isolate(leader.name, [n.name for n in others])
            for n in others:
                net.isolate(n.name, [leader.name])
            await asyncio.sleep(4.0)
            net.heal()
        else:
            f = rng.choice(others)
            net.isolate(f.name, [n.name for n in nodes if n is not f])
            await asyncio.sleep(3.0)
            net.heal()
        log.append(f"{time.monotonic():.1f} healed")
        await asyncio.sleep(rng.uniform(1.0, 2.5))


# Alarms of the divergence checks and of gray failover (issue 32). Nothing here corrupts a byte or
# slows a disk (kills, stops and partitions are the heartbeat's and the sessions' business), so
# each one is a false alarm.
ALARMS = ("digest_mismatch", "replica_quarantined", "state_hash_mismatch", "peer_state_hash_mismatch",
          "state_hash_undecided", "gray_failover_started", "cluster_degraded")


def false_alarms(logs: Path) -> tuple[list[str], int]:
    """(alarm lines found in the processes' logs, state hash comparisons that agreed)."""
    found, checks = [], 0
    for path in sorted(logs.glob("*.log")):
        for line in path.read_text(errors="replace").splitlines():
            if '"event":"state_hash_checked"' in line:
                checks += 1
            elif any(f'"event":"{a}"' in line for a in ALARMS):
                found.append(f"{path.name}: {line[:300]}")
    return found[:20], checks


def check_event_logs(nodes: list[Node]) -> list[str]:
    """Every node's applied-event history agrees index by index; one master per (group, epoch)."""
    problems = []
    by_index: dict[tuple[int, int], tuple[str, dict]] = {}
    master_at: dict[tuple[str, int], int] = {}
    for n in nodes:
        path = n.data / "events.jsonl"
        if not path.exists():
            continue
        seen_per_index: dict[int, int] = {}
        for line in path.read_text().splitlines():
            if not line.strip():
                continue
            rec = json.loads(line)
            idx = int(rec.get("index", 0))
            k = seen_per_index.get(idx, 0)
            seen_per_index[idx] = k + 1
            key = (idx, k)
            other = by_index.get(key)
            if other is None:
                by_index[key] = (n.name, rec)
            elif other[1] != rec:
                problems.append(f"index {idx}: {other[0]} applied {other[1]} but {n.name} applied {rec}")
            m, e = rec.get("master_broker_id"), rec.get("master_epoch")
            if m is not None and e is not None:
                prev = master_at.setdefault((rec.get("group", ""), e), m)
                if prev != m:
                    problems.append(f"group {rec.get('group')} epoch {e}: masters {prev} and {m}")
    return problems[:20]


async def scenario(a: argparse.Namespace, nodes: list[Node], net: nsmod.Netns, out: Path) -> dict:
    proxies = [DelayProxy((net.ip[n.name], PORT), a.delay_ms, a.jitter_ms, seed=i) for i, n in enumerate(nodes)]
    ports = [await p.start() for p in proxies]
    spec = ",".join(f"127.0.0.1:{p}" for p in ports)
    history: list[Op] = []
    fault_log: list[str] = []
    rng = random.Random(a.seed)
    t0 = time.monotonic()
    stop_at = t0 + a.seconds
    try:
        leader = None
        ready_by = time.monotonic() + 120     # readiness, bounded generously for a loaded machine
        while time.monotonic() < ready_by:
            leader = await find_leader(nodes)
            if leader is not None:
                break
            await asyncio.sleep(0.2)
        if leader is None:
            raise RuntimeError("no controller leader at start")
        tasks = [asyncio.create_task(client_loop(i, spec, stop_at, history)) for i in range(a.clients)]
        await faults(nodes, net, stop_at, rng, fault_log)
        await asyncio.gather(*tasks)
    finally:
        for p in proxies:
            await p.stop()
    dump_jsonl(history, out / "history.jsonl")
    r = check(history, BrokerIdModel())
    return {"ops": len(history), "claims": sum(o.output == "ok" for o in history),
            "unknown": sum(o.ret is None for o in history), "linearizable": r.ok, "lincheck": r.detail,
            "lincheck_unknown": r.unknown, "faults": fault_log, "seconds": round(time.monotonic() - t0, 1)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.chaos.run")
    ap.add_argument("--seconds", type=float, default=40.0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--delay-ms", type=float, default=2.0)
    ap.add_argument("--jitter-ms", type=float, default=15.0)
    ap.add_argument("--out", default=str(ROOT / "run-data" / "chaos"))
    ap.add_argument("--scenario", choices=("controllers", "brokers", "all"), default="all")
    a = ap.parse_args(argv)
    a.seconds = max(15.0, min(a.seconds, 600.0))
    reason = nsmod.can_run()
    if reason is not None:
        print(f"chaos: cannot run on this machine: {reason}. Nothing was run.", file=sys.stderr)
        print(json.dumps({"ran": False, "reason": reason}))
        return 0
    out = Path(a.out) / time.strftime("%Y%m%d-%H%M%S")
    (out / "logs").mkdir(parents=True, exist_ok=True)
    rc = 0
    if a.scenario in ("controllers", "all"):
        rc |= run_controllers(a, out / "controllers")
    if a.scenario in ("brokers", "all"):
        rc |= run_brokers(a, out / "brokers")
    return rc


def run_brokers(a: argparse.Namespace, out: Path) -> int:
    from . import brokers

    (out / "logs").mkdir(parents=True, exist_ok=True)
    try:
        summary = {"scenario": "brokers", "ran": True, "out": str(out), **brokers.run(out, a.seconds, a.seed)}
    except Exception as e:  # noqa: BLE001 - reported; brokers.run cleaned up already
        summary = {"scenario": "brokers", "ran": True, "out": str(out), "error": f"{type(e).__name__}: {e}"}
    summary["false_alarms"], summary["state_checks"] = false_alarms(out / "logs")
    bad = "error" in summary or bool(summary.get("problems")) or not summary.get("acked") \
        or bool(summary["false_alarms"])
    print(json.dumps(summary))
    print(f"chaos brokers: {summary.get('acked', 0)} acked, {summary.get('consumed', 0)} consumed, "
          f"{len(summary.get('faults', []))} faults, {'VIOLATION' if bad else 'ok'}; data in {out}", file=sys.stderr)
    return 1 if bad else 0


def run_controllers(a: argparse.Namespace, out: Path) -> int:
    (out / "logs").mkdir(parents=True, exist_ok=True)
    toml = out / "controller.toml"
    toml.write_text(TOML)
    net = nsmod.Netns(NAMES)
    spec = ",".join(f"{n}={net.ip[n]}:{PORT}" for n in NAMES)
    nodes = [Node(n, net, spec, out / f"data-{n}", toml, out / "logs") for n in NAMES]
    summary: dict = {"scenario": "controllers", "ran": True, "out": str(out)}
    try:
        net.up()
        for n in nodes:
            n.start()
        for n in nodes:
            wait_port(net.ip[n.name], PORT)
        summary.update(asyncio.run(scenario(a, nodes, net, out)))
        net.heal()
        time.sleep(3.0)          # let restarted/partitioned nodes catch up before comparing logs
    except Exception as e:  # noqa: BLE001 - reported, then everything is cleaned up
        summary["error"] = f"{type(e).__name__}: {e}"
    finally:
        for n in nodes:
            with contextlib.suppress(Exception):
                n.stop()
        net.down()
    summary["event_log_problems"] = check_event_logs(nodes)
    summary["false_alarms"], summary["state_checks"] = false_alarms(out / "logs")
    bad = (not summary.get("linearizable", False)) or bool(summary["event_log_problems"]) or "error" in summary \
        or bool(summary["false_alarms"])
    print(json.dumps(summary))
    print(f"chaos controllers: {summary.get('ops', 0)} ops, {len(summary.get('faults', []))} fault events, "
          f"{'VIOLATION' if bad else 'ok'}; data in {out}", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
