"""Controller leader failover: SIGKILL the Raft leader N times; time until a survivor commits a write.

Ours: 3 `python -m autoswitch controller` processes with our default Raft timings. Each round:
find the leader, SIGKILL it, then loop a write (ApplyBrokerId, idempotent on retry) against the
two survivors with short RPC timeouts until it commits; the time from the kill to the commit is
one sample. The killed node is restarted and allowed to catch up before the next round.
etcd (3 members, heartbeat 100 ms, election timeout 1000 ms) is measured the same way in the same
run (PUT through the v3 HTTP/JSON gateway; leader found with /v3/maintenance/status).

Prints progress on stderr and one JSON line: {"p50_s", "p99_s", "etcd_p50_s", "etcd_p99_s", ...}

    python -m bench.election [--rounds 20] [--etcd-rounds 20]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
import tempfile
import time
from pathlib import Path

from bench.controller import HOST, Controllers, Etcd, HttpConn, etcd_put, log, pct, wait_etcd_ready
from tests.procs import wait_port

ROUND_LIMIT_S = 30.0


async def ours_leader(addrs: dict[str, str], timeout: float = 20.0) -> str:
    from autoswitch.controller.client import ControllerClient

    from bench.controller import leader_of

    async with ControllerClient(list(addrs.values())) as c:
        return await leader_of(c, addrs, timeout)


async def ours_commit_after_kill(survivors: list[str], round_no: int) -> float:
    """Seconds from now until ApplyBrokerId(round_no) commits via one of ``survivors``."""
    from autoswitch.controller.client import ControllerClient
    from autoswitch.controller.codes import ControllerRpcError

    t0 = time.perf_counter()
    async with ControllerClient(survivors, rpc_timeout_s=0.3, backoff_s=0.01, max_backoff_s=0.05,
                                deadline_s=1.0, max_attempts=50) as c:
        while time.perf_counter() - t0 < ROUND_LIMIT_S:
            try:
                await c.apply_broker_id("bench", "election", round_no, f"round-{round_no}")
                return time.perf_counter() - t0
            except ControllerRpcError:
                await asyncio.sleep(0.01)
    raise TimeoutError("no commit after the leader kill")


async def run_ours(root: Path, rounds: int) -> list[float]:
    ctl = Controllers(root)
    samples: list[float] = []
    try:
        ctl.start_all()
        await ours_leader(ctl.addrs)
        # one committed write first, so every round measures failover and not cluster start
        await ours_commit_after_kill(list(ctl.addrs.values()), 1)
        for r in range(rounds):
            leader = await ours_leader(ctl.addrs)
            survivors = [a for n, a in ctl.addrs.items() if n != leader]
            ctl.kill9(leader)
            dt = await ours_commit_after_kill(survivors, r + 2)
            samples.append(dt)
            log("election", f"ours round {r + 1}/{rounds}: killed {leader}, commit after {dt:.3f}s")
            ctl.start(leader)
            await asyncio.sleep(1.0)   # let it catch up and the cluster settle
    finally:
        ctl.stop_all()
    return samples


async def etcd_leader(etcd: Etcd) -> str:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        for name, port in etcd.client_ports.items():
            if etcd.procs[name].poll() is not None:
                continue
            conn = HttpConn(HOST, port)
            try:
                st = await conn.post("/v3/maintenance/status", {}, timeout=0.5)
                if str(st.get("header", {}).get("member_id")) == str(st.get("leader")):
                    return name
            except Exception:  # noqa: BLE001
                pass
            finally:
                conn.close()
        await asyncio.sleep(0.05)
    raise TimeoutError("no etcd leader")


async def etcd_commit_after_kill(ports: list[int], round_no: int) -> float:
    t0 = time.perf_counter()
    conns = [HttpConn(HOST, p) for p in ports]
    try:
        i = 0
        while time.perf_counter() - t0 < ROUND_LIMIT_S:
            conn = conns[i % len(conns)]
            i += 1
            try:
                await asyncio.wait_for(etcd_put(conn, b"election", str(round_no).encode()), 0.3)
                return time.perf_counter() - t0
            except Exception:  # noqa: BLE001
                conn.close()
                await asyncio.sleep(0.01)
    finally:
        for c in conns:
            c.close()
    raise TimeoutError("etcd: no commit after the leader kill")


async def run_etcd(root: Path, rounds: int) -> list[float]:
    etcd = Etcd(root, heartbeat_ms=100, election_ms=1000)
    samples: list[float] = []
    try:
        etcd.start_all()
        await wait_etcd_ready(list(etcd.client_ports.values()))
        for r in range(rounds):
            leader = await etcd_leader(etcd)
            survivors = [p for n, p in etcd.client_ports.items() if n != leader]
            etcd.kill9(leader)
            dt = await etcd_commit_after_kill(survivors, r)
            samples.append(dt)
            log("election", f"etcd round {r + 1}/{rounds}: killed {leader}, commit after {dt:.3f}s")
            etcd.start(leader)
            wait_port(etcd.client_ports[leader], timeout=30.0, proc=etcd.procs[leader])
            await asyncio.sleep(1.5)
    finally:
        etcd.stop_all()
    return samples


async def run(args) -> dict:
    with tempfile.TemporaryDirectory(prefix="bench-election-") as tmp:
        root = Path(tmp)
        (root / "ours").mkdir()
        (root / "etcd").mkdir()
        ours = await run_ours(root / "ours", args.rounds)
        etcd: list[float] = []
        with contextlib.suppress(Exception) if args.etcd_optional else contextlib.nullcontext():
            etcd = await run_etcd(root / "etcd", args.etcd_rounds)
    return {
        "p50_s": round(pct(ours, 50), 3), "p99_s": round(pct(ours, 99), 3), "max_s": round(max(ours), 3),
        "etcd_p50_s": round(pct(etcd, 50), 3) if etcd else None,
        "etcd_p99_s": round(pct(etcd, 99), 3) if etcd else None,
        "rounds": len(ours), "etcd_rounds": len(etcd),
        "samples_s": [round(x, 3) for x in ours], "etcd_samples_s": [round(x, 3) for x in etcd],
    }


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--etcd-rounds", type=int, default=20)
    ap.add_argument("--etcd-optional", action="store_true", help="report ours even if etcd cannot run")
    args = ap.parse_args()
    print(json.dumps(asyncio.run(run(args))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
