"""Controller at scale: N groups x 3 replicas registered, 1 s heartbeats to every controller.

For each size: a fresh 3-node controller cluster; register N groups (3 ApplyBrokerId + 3
RegisterBroker + a designated ElectMaster each, 64 in flight); then W load processes
(`python -m bench.scale --worker ...`) each send the heartbeats of their share of the 3N
replicas, once per second per replica, to EVERY controller, for D seconds. Reported per size:
heartbeats/s actually answered (sum over the 3 controllers; unary calls as a broker process
sends them, and BrokerHeartbeatBatch calls of 1,000 as a process hosting many brokers would), leader RSS, snapshot size on the
leader, and restart time (SIGKILL all 3, start all 3, until the leader answers a linearizable
GetReplicaInfo). The liveness timeout is raised to 600 s for this bench so slow registration
does not trigger failovers that would distort the figures.

Prints progress on stderr and one JSON line: {"sizes": [{"groups", "heartbeats_s",
"leader_rss_mb", "snapshot_mb", "restart_s", ...}, ...]}

    python -m bench.scale [--sizes 1000,10000] [--seconds 10] [--workers 2]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.controller import Controllers, leader_of, log

TOML = """
[controller]
heartbeat_timeout_ms = 600000
scan_interval_ms = 5000
propose_timeout_s = 10.0
read_timeout_s = 10.0
"""
MAX_IN_FLIGHT = 64
BATCH = 1000   # heartbeats per BrokerHeartbeatBatch call


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024.0
    return float("nan")


def snapshot_mb(data_dir: Path) -> float:
    snaps = list((data_dir / "raft").rglob("*.snap"))
    return max((p.stat().st_size for p in snaps), default=0) / (1 << 20)


def hb_request(g: str, bid: int, epoch: int = 1):
    """A replica's heartbeat as a broker sends it: ``epoch`` is the group's MasterEpoch it has seen,
    0 before the group's first election (stating 1 then made the controllers refuse the designated
    election as "state older than the brokers'": the bench broke for a week, issue 63)."""
    from autoswitch.proto import controller_pb2 as pb

    return pb.BrokerHeartbeatRequest(cluster_name="scale", broker_name=g, broker_id=bid,
                                     broker_address=f"10.0.{bid}.1:10911", epoch=epoch, max_offset=1000 * bid,
                                     confirm_offset=1000, clean_shutdown=True)


async def register_all(spec: str, n: int) -> float:
    from autoswitch.controller.client import ControllerClient
    from autoswitch.controller.codes import ControllerRpcError

    sem = asyncio.Semaphore(MAX_IN_FLIGHT)
    t0 = time.monotonic()
    done = 0
    retries = 0

    async with ControllerClient(spec, deadline_s=60) as c:
        async def one(i: int) -> None:
            nonlocal done, retries
            g = f"sg{i:05d}"
            async with sem:
                for bid in (1, 2, 3):
                    await c.apply_broker_id("scale", g, bid, f"{g}-{bid}")
                    await c.register_broker("scale", g, bid, f"10.0.{bid}.1:10911")
                for attempt in range(5):
                    # Under this load a heartbeat or a peer liveness query can time out, and the
                    # leader then (correctly) refuses to treat the broker as alive: retry, bounded.
                    for bid in (1, 2, 3):
                        await c.heartbeat_all(hb_request(g, bid, epoch=0))
                    try:
                        await c.elect_master("scale", g, 1, designate=True)
                        break
                    except ControllerRpcError:
                        if attempt == 4:
                            raise
                        retries += 1
                        await asyncio.sleep(0.2)
                done += 1
                if done % 1000 == 0:
                    log("scale", f"registered {done}/{n} groups ({time.monotonic() - t0:.0f}s)")

        await asyncio.gather(*(one(i) for i in range(n)))
    if retries:
        log("scale", f"{retries} elections retried (heartbeat or liveness query timed out under load)")
    return time.monotonic() - t0


async def worker(spec: str, first: int, count: int, seconds: float, mode: str) -> dict:
    """Heartbeats of groups [first, first+count), 3 replicas each, every second, to every controller.

    mode "unary": one BrokerHeartbeat call per replica and controller (what a broker process does);
    mode "batch": BrokerHeartbeatBatch calls of BATCH replicas (a process hosting many brokers).
    """
    import grpc

    from autoswitch.proto import controller_pb2 as pb
    from autoswitch.proto import controller_pb2_grpc as pbg

    addrs = spec.split(",")
    chans = [grpc.aio.insecure_channel(a, options=[("grpc.max_receive_message_length", 64 << 20)])
             for a in addrs]
    stubs = [pbg.ControllerServiceStub(ch) for ch in chans]
    reqs = [hb_request(f"sg{i:05d}", b) for i in range(first, first + count) for b in (1, 2, 3)]
    batches = [pb.BrokerHeartbeatBatchRequest(heartbeats=reqs[i:i + BATCH]) for i in range(0, len(reqs), BATCH)]
    ok = err = 0
    sem = asyncio.Semaphore(256)

    async def send(stub, req) -> None:
        nonlocal ok, err
        async with sem:
            try:
                r = await stub.BrokerHeartbeat(req, timeout=2.0)
                if r.header.code == 0:
                    ok += 1
                else:
                    err += 1
            except grpc.aio.AioRpcError:
                err += 1

    async def send_batch(stub, batch) -> None:
        nonlocal ok, err
        try:
            r = await stub.BrokerHeartbeatBatch(batch, timeout=5.0)
            n_ok = sum(1 for x in r.replies if x.header.code == 0)
            ok += n_ok
            err += len(batch.heartbeats) - n_ok
        except grpc.aio.AioRpcError:
            err += len(batch.heartbeats)

    t0 = time.monotonic()
    rounds = 0
    while time.monotonic() - t0 < seconds:
        start = time.monotonic()
        if mode == "batch":
            await asyncio.gather(*(send_batch(s, b) for b in batches for s in stubs))
        else:
            await asyncio.gather(*(send(s, r) for r in reqs for s in stubs))
        rounds += 1
        lag = time.monotonic() - start
        if lag < 1.0:
            await asyncio.sleep(1.0 - lag)   # 1 s heartbeat interval (when we keep up)
    elapsed = time.monotonic() - t0
    for ch in chans:
        await ch.close()
    return {"ok": ok, "err": err, "elapsed": elapsed, "rounds": rounds}


async def load(ctl: Controllers, n: int, seconds: float, workers: int, mode: str) -> dict:
    share = (n + workers - 1) // workers
    procs = []
    for w in range(workers):
        first = w * share
        cnt = max(0, min(share, n - first))
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "bench.scale", "--worker", ctl.spec, str(first), str(cnt), str(seconds), mode],
            stdout=subprocess.PIPE, text=True))
    results = []
    for p in procs:
        out, _ = p.communicate(timeout=seconds * 6 + 120)
        results.append(json.loads(out.strip().splitlines()[-1]))
    elapsed = max(r["elapsed"] for r in results)
    return {"heartbeats_s": round(sum(r["ok"] for r in results) / elapsed, 1),
            "errors": sum(r["err"] for r in results)}


async def measure(root: Path, n: int, seconds: float, workers: int) -> dict:
    ctl = Controllers(root, toml=TOML)
    try:
        ctl.start_all()
        from autoswitch.controller.client import ControllerClient

        async with ControllerClient(ctl.spec) as c:
            await leader_of(c, ctl.addrs)
        reg_s = await register_all(ctl.spec, n)
        log("scale", f"{n} groups registered in {reg_s:.1f}s; heartbeat load {seconds}s x {workers} workers")
        unary = await load(ctl, n, seconds, workers, "unary")
        log("scale", f"unary heartbeats: {unary}")
        batch = await load(ctl, n, seconds, workers, "batch")
        log("scale", f"batched heartbeats: {batch}")
        async with ControllerClient(ctl.spec) as c:
            leader = await leader_of(c, ctl.addrs)
        rss = rss_mb(ctl.pid_of(leader))
        snap = snapshot_mb(ctl.root / f"data-{leader}")
        # restart: SIGKILL all, start all, until a linearizable read succeeds
        for nid in ctl.ids:
            ctl.kill9(nid)
        t0 = time.monotonic()
        ctl.start_all()
        async with ControllerClient(ctl.spec, deadline_s=120) as c:
            info = await c.get_replica_info(f"sg{n - 1:05d}")
        restart_s = time.monotonic() - t0
        assert info.master_broker_id == 1
        snap_after = snapshot_mb(ctl.root / f"data-{leader}")
        return {"groups": n, "heartbeats_s": batch["heartbeats_s"], "heartbeats_unary_s": unary["heartbeats_s"],
                "heartbeats_wanted_s": n * 3 * 3, "heartbeat_errors": batch["errors"],
                "heartbeat_unary_errors": unary["errors"],
                "leader_rss_mb": round(rss, 1), "snapshot_mb": round(max(snap, snap_after), 2),
                "restart_s": round(restart_s, 2), "register_s": round(reg_s, 1)}
    finally:
        ctl.stop_all()


async def run(args) -> dict:
    out = []
    for n in [int(x) for x in args.sizes.split(",") if x]:
        with tempfile.TemporaryDirectory(prefix=f"bench-scale-{n}-") as tmp:
            r = await measure(Path(tmp), n, args.seconds, args.workers)
            log("scale", f"{r}")
            out.append(r)
    return {"sizes": out}


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        spec, first, cnt, secs = sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
        print(json.dumps(asyncio.run(worker(spec, first, cnt, secs, sys.argv[6]))))
        return 0
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="1000,10000")
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args()
    print(json.dumps(asyncio.run(run(args))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
