"""Side by side with RocketMQ 5 in one run: acknowledged produce, one message per request and
batched (issue 63).

    python -m bench.peer_rocketmq [--rounds 2] [--seconds 10] [--size 256] [--no-netns]

Both systems as deployed: three controllers (RocketMQ's DLedger controller embedded in its three
name servers; ours, one embedded in the name server and two standalone), one broker group of three
replicas, every acknowledgement waiting for the whole SyncStateSet (RocketMQ
``allAckInSyncStateSet = true``; ours ``--ack-mode all``) and fsynced before it is sent (RocketMQ
``SYNC_FLUSH``, which fsyncs the master; ours the product's default ``flush = "sync"``, which
fsyncs every replica that counts). 256-byte bodies, sync sends, one client process whose
producers share one client object, as applications use them (RocketMQ: threads sharing one
``DefaultMQProducer``; ours: asyncio tasks sharing one ``RoutedProducer`` found through the name
server, with the SDK's defaults). Loads: 4 x 1 message per request, 16 x 1, 4 x batches of 100;
ours also 16 x 1 with every call its own gRPC ``Produce`` (``coalesce=False``: what a client
in another language that sends one request per message does).

Blocks alternate the systems (``--rounds``), each started afresh in its own network namespace
(loopback only) when this runs as root, so both see the same machine. Each load has an untimed
warm-up and a timed part; CPU is read from /proc for every server process across the timed part
and reported by the load generator for itself. Progress on stderr; the last line is JSON with both
rates, p50/p99 per request, CPU microseconds per acknowledged message per process kind, and the
ratios ours/theirs (``ratio_default_4x1``, ``ratio_default_16x1``, ``ratio_grpc_16x1``,
``ratio_batched_4x100``), each from the best round of each system.
Needs RocketMQ 5 (ROCKETMQ_HOME, or the fixture beside the checkout) and a JDK.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.produce import proc_cpu_s

TOPIC = "PeerBench"
# (name, producers, messages per request, coalesce) - ours; RocketMQ runs the same without the last
LOADS = (("4x1", 4, 1), ("16x1", 16, 1), ("4x100", 4, 100))
GRPC_LOAD = ("grpc_16x1", 16, 1)
# ours over the fetch port's PRODUCE frames (the opt-in path), coalesced as the default path is
PORT_LOADS = (("port_4x1", 4, 1), ("port_16x1", 16, 1))


def _p(msg: str) -> None:
    print(f"[bench-peer-rocketmq {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# ------------------------------------------------------------------ the load generators


def _timed_load(cmd: list[str], servers: dict[str, list[int]], limit_s: float, err: Path) -> dict:
    """Run a load generator that prints START when its timed part begins and RESULT ... at the
    end; CPU seconds of each server kind across the timed part. Its stderr goes to ``err``."""
    with open(err, "ab") as ef:
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=ef, stdin=subprocess.DEVNULL, text=True,
                             start_new_session=True)
    cpu0: dict[str, float] = {}
    result: list[str] = []
    deadline = time.monotonic() + limit_s
    try:
        assert p.stdout is not None
        for line in p.stdout:
            if line.startswith("START"):
                cpu0 = {k: sum(_cpu(pid) for pid in pids) for k, pids in servers.items()}
            elif line.startswith("RESULT"):
                cpu1 = {k: sum(_cpu(pid) for pid in pids) for k, pids in servers.items()}
                result = line.split()[1:]
                return {"fields": result, "server_cpu_s": {k: cpu1[k] - cpu0.get(k, cpu1[k]) for k in cpu1}}
            if time.monotonic() > deadline:
                break
        tail = err.read_text(errors="replace")[-2000:] if err.exists() else ""
        raise RuntimeError(f"load generator ended without a result: {cmd[:4]}; its stderr ends: {tail}")
    finally:
        if p.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(p.pid, 9)
        p.wait(30)


def _cpu(pid: int) -> float:
    try:
        return proc_cpu_s(pid)
    except OSError:
        return 0.0


def _run_load(who: str, name: str, cmd: list[str], servers: dict[str, list[int]], args: argparse.Namespace,
              tmp: Path) -> dict:
    """One load of one system, timed, summarised and said on stderr."""
    res = _summary(name, _timed_load(cmd, servers, args.seconds + args.warmup + 120, tmp / "load.err"))
    _p(f"{who} {name}: {res}")
    return res


def _summary(name: str, res: dict) -> dict:
    acked, failed, elapsed_ms, p50, p99, client_cpu_ms = res["fields"][:6]
    n = max(1, int(float(acked)))
    per = {k: round(v / n * 1e6, 1) for k, v in res["server_cpu_s"].items()}
    per["client"] = round(float(client_cpu_ms) / 1000 / n * 1e6, 1)
    per["total"] = round(sum(per.values()), 1)
    elapsed = max(float(elapsed_ms) / 1000, 1e-3)
    return {"load": name, "acked": int(float(acked)), "failed": int(float(failed)),
            "msgs_s": round(int(float(acked)) / elapsed, 1), "p50_ms": round(float(p50), 2),
            "p99_ms": round(float(p99), 2), "cpu_us_per_msg": per}


async def _our_load(namesrv: str, group: str, producers: int, batch: int, size: int, warmup_s: float,
                    seconds: float, max_messages: int, coalesce: bool, inflight: int, via: str) -> None:
    """Ours: ``producers`` tasks share one RoutedProducer (prints START, then RESULT like RmqTool);
    ``inflight`` > 0 overrides the SDK's requests out per connection (to measure the choice)."""
    from autoswitch.broker.client import route
    from autoswitch.broker.client.route import RetryPolicy, RoutedProducer

    if inflight:
        route.COALESCE_MAX_INFLIGHT = inflight

    make = RoutedProducer
    if via == "port":
        from autoswitch.broker.client.routed_fetch import RoutedPortProducer as make
    p = make(namesrv, group, policy=RetryPolicy(retry_deadline_s=30, rpc_timeout_s=10), coalesce=coalesce)
    body = [b"x" * size] * batch
    lat: list[float] = []
    acked = failed = 0
    timed = asyncio.Event()
    end = [0.0]

    async def one() -> None:
        nonlocal acked, failed
        while True:
            now = time.monotonic()
            if timed.is_set() and (now >= end[0] or acked >= max_messages):
                return
            t0 = time.perf_counter()
            try:
                r = await p.produce(TOPIC, body)
                ok = len(r)
            except Exception:  # noqa: BLE001 - counted as failed, as the Java side does
                ok = 0
            if timed.is_set():
                acked += ok
                failed += batch - ok
                lat.append(time.perf_counter() - t0)

    try:
        tasks = [asyncio.ensure_future(one()) for _ in range(producers)]
        await asyncio.sleep(warmup_s)
        print("START", flush=True)
        cpu0 = time.process_time()
        t_start = time.monotonic()
        end[0] = t_start + seconds
        timed.set()
        await asyncio.gather(*tasks)
        elapsed = time.monotonic() - t_start
        cpu = time.process_time() - cpu0
    finally:
        await p.close()
    lat.sort()

    def pct(q: float) -> float:
        return lat[min(len(lat) - 1, int(q * len(lat)))] * 1000 if lat else 0.0

    print(f"RESULT {acked} {failed} {int(elapsed * 1000)} {pct(0.5):.3f} {pct(0.99):.3f} {int(cpu * 1000)}", flush=True)


# ------------------------------------------------------------------ one system, started afresh


def _block_rocketmq(tmp: Path, args: argparse.Namespace) -> dict:
    from bench.rocketmq import Run

    run = Run("rocketmq", tmp, 3, time.monotonic() + 1800)
    try:
        run.start()
        _p("rocketmq: waiting for a master and three brokers in sync")
        run._wait("three brokers in sync", lambda: len(run.in_sync()) == 3, 300, 0.5)
        servers = {"broker": [run.rmq.procs[b].pid for b in ("b1", "b2", "b3")],
                   "namesrv_controller": [p.pid for n, p in run.rmq.procs.items() if n.startswith("ns")]}
        # the topic is created by the first sends (autoCreateTopicEnable) and copied to the slaves
        run.rmq.run_client("produce", run.ns, TOPIC, "warm", "50", "60", "1", timeout=120)
        out = {}
        for name, k, batch in LOADS:
            cmd = ["java", "-Xmx256m", f"-Duser.home={tmp / 'client'}", "-cp", run.rmq.classpath(), "RmqTool", "load",
                   run.ns, TOPIC, str(k), str(batch), str(args.size), str(int(args.warmup)), str(int(args.seconds)),
                   str(args.max_messages)]
            out[name] = _run_load("rocketmq", name, cmd, servers, args, tmp)
        return out
    finally:
        run.stop()


def _block_ours(tmp: Path, args: argparse.Namespace) -> dict:
    from autoswitch.controller.client import ControllerClient

    from autoswitch.app.playground_cluster import Cluster, Layout
    from tests.procs import free_block, free_port

    async def up(cluster: Cluster, layout: Layout) -> None:
        from autoswitch.app.demo_traffic import wait_full_sync_state_set
        from bench.producing_cluster import start_cluster

        client = ControllerClient(layout.controller_addrs(), deadline_s=2.0, max_attempts=4, rpc_timeout_s=1.0)
        try:
            await start_cluster(cluster, client)
            if len(await wait_full_sync_state_set(client, "g0", 3, 60)) < 3:
                raise RuntimeError("ours: the SyncStateSet did not reach 3 members within 60 s")
        finally:
            await client.close()

    class WithFetchPorts(Cluster):
        """The playground's brokers, each also serving a fetch port (registered in its route)."""

        def broker_args(self, g: int, r: int) -> list[str]:
            return [*super().broker_args(g, r), "--fetch-listen", f"127.0.0.1:{fetch_ports[r]}"]

    fetch_ports = [free_port() for _ in range(3)]
    layout = Layout(tmp / "ours", base_port=free_block(30), groups=1, replicas=3, cluster="peer", profile="default",
                    broker_extra=["--ack-mode", "all", "--flush", args.flush], secure=False)
    cluster = WithFetchPorts(layout)
    cluster.prepare_dir(fresh=True, wipe=True)
    try:
        asyncio.run(up(cluster, layout))
        servers = {"broker": [c.pid for n, c in cluster.children.items() if n.startswith("broker")],
                   "namesrv_controller": [c.pid for n, c in cluster.children.items() if not n.startswith("broker")]}
        out = {}
        for name, k, batch, coalesce, via in ([(*x, True, "grpc") for x in LOADS] + [(*GRPC_LOAD, False, "grpc")]
                                              + [(*x, True, "port") for x in PORT_LOADS]):
            cmd = [sys.executable, "-m", "bench.peer_rocketmq", "load", "--namesrv", layout.namesrv,
                   "--producers", str(k), "--batch", str(batch), "--size", str(args.size), "--warmup",
                   str(args.warmup), "--seconds", str(args.seconds), "--max-messages", str(args.max_messages),
                   "--via", via]
            if not coalesce:
                cmd.append("--no-coalesce")
            elif args.inflight:
                cmd += ["--inflight", str(args.inflight)]
            out[name] = _run_load("ours", name, cmd, servers, args, tmp)
        return out
    finally:
        cluster.stop_all()
        cluster.release_dir()


# ------------------------------------------------------------------ orchestration


def _netns_prefix(name: str) -> list[str] | None:
    """A fresh loopback-only network namespace (root only); None when it cannot be made."""
    if os.geteuid() != 0 or shutil.which("ip") is None:
        return None
    r = subprocess.run(["ip", "netns", "add", name], capture_output=True)
    if r.returncode != 0:
        return None
    subprocess.run(["ip", "netns", "exec", name, "ip", "link", "set", "lo", "up"], check=True)
    return ["ip", "netns", "exec", name]


def _run_block(system: str, args: argparse.Namespace, n: int) -> tuple[dict, bool]:
    ns_name = f"asw-peer-{os.getpid()}-{n}"
    prefix = None if args.no_netns else _netns_prefix(ns_name)
    cmd = [*(prefix or []), sys.executable, "-m", "bench.peer_rocketmq", "block", "--system", system,
           "--seconds", str(args.seconds), "--warmup", str(args.warmup), "--size", str(args.size),
           "--max-messages", str(args.max_messages), "--inflight", str(args.inflight)]
    try:
        p = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, timeout=3600)
        lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
        if p.returncode != 0 or not lines:
            raise RuntimeError(f"{system} block failed (exit {p.returncode})")
        return json.loads(lines[-1]), prefix is not None
    finally:
        if prefix is not None:
            subprocess.run(["ip", "netns", "delete", ns_name], capture_output=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.peer_rocketmq")
    ap.add_argument("what", nargs="?", default="compare", choices=["compare", "block", "load"])
    ap.add_argument("--rounds", type=int, default=2, help="blocks per system, alternating")
    ap.add_argument("--seconds", type=float, default=10.0, help="timed part of each load")
    ap.add_argument("--warmup", type=float, default=3.0, help="untimed part before it")
    ap.add_argument("--size", type=int, default=256)
    ap.add_argument("--max-messages", type=int, default=2_000_000, help="ends a timed part early")
    ap.add_argument("--no-netns", action="store_true", help="run both systems in this network namespace")
    ap.add_argument("--flush", choices=["sync", "async"], default="sync",
                    help="ours: flush (the default, sync, fsyncs before an ack counts); RocketMQ runs SYNC_FLUSH")
    ap.add_argument("--system", choices=["rocketmq", "ours"])
    ap.add_argument("--namesrv", default="")
    ap.add_argument("--producers", type=int, default=4)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--no-coalesce", action="store_true")
    ap.add_argument("--via", choices=["grpc", "port"], default="grpc", help="ours: the gRPC Produce or the fetch port")
    ap.add_argument("--inflight", type=int, default=0, help="ours: requests out per connection (0: the SDK's)")
    args = ap.parse_args(argv)
    # ended by SIGTERM (a timeout, an operator): unwind, so every process this started is stopped
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    assert 1 <= args.rounds <= 10 and 1 <= args.seconds <= 600 and 0 <= args.warmup <= 60
    assert 16 <= args.size <= 1 << 20 and 1 <= args.producers <= 256 and 1 <= args.batch <= 1000
    if args.what == "load":
        asyncio.run(_our_load(args.namesrv, "g0", args.producers, args.batch, args.size, args.warmup, args.seconds,
                              args.max_messages, not args.no_coalesce, args.inflight, args.via))
        return 0
    if args.what == "block":
        with tempfile.TemporaryDirectory(prefix=f"bench-peer-{args.system}-") as tmp:
            out = (_block_rocketmq if args.system == "rocketmq" else _block_ours)(Path(tmp), args)
        print(json.dumps(out), flush=True)
        return 0
    from tests.integration.rocketmq_harness import rocketmq_home

    home, why = rocketmq_home()
    if home is None:
        print(f"bench-peer-rocketmq needs RocketMQ 5 and a JDK: {why} (set ROCKETMQ_HOME)", file=sys.stderr)
        return 2
    blocks: dict[str, list[dict]] = {"rocketmq": [], "ours": []}
    netns = True
    for r in range(args.rounds):
        order = ("rocketmq", "ours") if r % 2 == 0 else ("ours", "rocketmq")
        for system in order:
            _p(f"round {r + 1}/{args.rounds}: {system}")
            res, in_ns = _run_block(system, args, 2 * r + order.index(system))
            netns = netns and in_ns
            blocks[system].append(res)

    def best(system: str, load: str) -> dict:
        return max((b[load] for b in blocks[system]), key=lambda x: x["msgs_s"])

    out: dict[str, Any] = {"rocketmq": {}, "ours": {}}
    for name, *_ in LOADS:
        out["rocketmq"][name] = best("rocketmq", name)
        out["ours"][name] = best("ours", name)
    for name, *_ in (GRPC_LOAD, *PORT_LOADS):
        out["ours"][name] = best("ours", name)

    def ratio(ours: str, theirs: str) -> float:
        t = out["rocketmq"][theirs]["msgs_s"]
        return round(out["ours"][ours]["msgs_s"] / t, 2) if t else 0.0

    out["ratio_default_4x1"] = ratio("4x1", "4x1")
    out["ratio_default_16x1"] = ratio("16x1", "16x1")
    out["ratio_grpc_16x1"] = ratio("grpc_16x1", "16x1")
    out["ratio_batched_4x100"] = ratio("4x100", "4x100")
    out["rounds"] = {s: [{k: v["msgs_s"] for k, v in b.items()} for b in bl] for s, bl in blocks.items()}
    out["setup"] = {"replicas": 3, "ack": "whole SyncStateSet", "durability": "fsync (SYNC_FLUSH / flush sync)",
                    "size": args.size, "seconds": args.seconds, "warmup": args.warmup, "rounds": args.rounds,
                    "netns": netns}
    out["targets"] = {"ratio_default_4x1": 1.5, "ratio_default_16x1": 1.5, "ratio_batched_4x100": 1.2,
                      "ratio_grpc_16x1": 1.0}
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
