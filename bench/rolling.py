"""`make bench-rolling`: restart the master (SIGTERM, restart, wait in sync) under continuous produce.

The same playground cluster as bench-failover (3 controllers, one embedded in the name server; one
group x 3 replicas; "fast" profile) and the same routed producer writing one message at a time.
Each round: wait for a full SyncStateSet, SIGTERM the master, restart it (same data dir and port),
wait until it is back in the SyncStateSet. The figure per round is the largest pause between two
consecutive acks from the SIGTERM until the broker is back: what a producer feels.

Two setups in the same run: with graceful handover (the default: the master hands over to an
in-sync slave before it stops) and without (``--no-handover-on-shutdown``: the master just stops
and the controller fails over after its heartbeat timeout, which is what a restart cost before).
Every acked msg_id must be served by the final master.

Progress on stderr; the last stdout line is JSON:
{"gap_ms_p50", "gap_ms_p99", "lost_acked", "restarts", "no_handover": {...}, ...}
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
from typing import Any

from bench.failover import _free_block, _pct

MAX_RESTARTS = 50


def _p(msg: str) -> None:
    print(f"[bench-rolling {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def largest_gap_ms(ack_times: list[float], t0: float, t1: float) -> float | None:
    """The largest pause between consecutive acks that overlaps [t0, t1] (monotonic seconds)."""
    gaps = [b - a for a, b in zip(ack_times, ack_times[1:], strict=False) if b >= t0 and a <= t1]
    return round(max(gaps) * 1000, 1) if gaps else None


async def bench_setup(restarts: int, max_s: float, data_dir: Path, handover: bool, tls: bool = False) -> dict:
    from autoswitch.controller.client import ControllerClient

    from autoswitch.app.playground import (
        Cluster,
        DemoProducer,
        Layout,
        load_ack_log,
        lost_acked,
        wait_full_sync_state_set,
    )

    base = _free_block(30)
    extra = [] if handover else ["--no-handover-on-shutdown"]
    layout = Layout(data_dir, base_port=base, groups=1, replicas=3, cluster="bench", profile="fast",
                    broker_extra=extra, secure=tls)
    cluster = Cluster(layout)
    cluster.prepare_dir(keep=False)
    client = ControllerClient(layout.controller_addrs(), deadline_s=2.0, max_attempts=4, rpc_timeout_s=1.0,
                              tls=cluster.tls)
    group, topic = "g0", "bench"
    ack_path = data_dir / "acks.jsonl"
    what = "handover" if handover else "no handover"
    samples: list[dict] = []
    t_end = time.monotonic() + max_s
    stop = asyncio.Event()
    producer = None
    prod_task = None
    try:
        cluster.start_controllers()
        await cluster.wait_ports(list(cluster.children.values()), 60)
        await cluster.wait_leader(client, 60)
        cluster.start_brokers()
        await cluster.wait_masters(client, 60)
        producer = DemoProducer(layout.namesrv, group, topic, ack_path, tls=cluster.tls)
        prod_task = asyncio.ensure_future(producer.run(stop, max_messages=10_000_000, max_s=max_s + 120))
        for i in range(restarts):
            if time.monotonic() > t_end:
                _p(f"{what}: time budget used up after {i} restarts")
                break
            if len(await wait_full_sync_state_set(client, group, 3, 30)) < 3:
                _p(f"{what}: SyncStateSet did not reach 3 members within 30 s; restarting anyway")
            n0 = len(producer.acks)
            t_wait = time.monotonic() + 10
            while len(producer.acks) < n0 + 20 and time.monotonic() < t_wait:
                await asyncio.sleep(0.02)
            before = await client.get_replica_info(group)
            victim = cluster.child_by_addr(before.master_address)
            assert victim is not None, before
            t0 = time.monotonic()
            # Stopping blocks (it waits for the process): off the event loop, the producer keeps going.
            rc, forced = await asyncio.to_thread(victim.stop, 30.0)
            t_stopped = time.monotonic()
            g, r = victim.name.split("-")[1:3]
            cluster.start_broker(int(g[1:]), int(r[1:]))
            members = await wait_full_sync_state_set(client, group, 3, 60)
            t1 = time.monotonic()
            # The gap that spans t1 ends with the next ack: wait for it (bounded).
            t_next = t1 + 30
            while (not producer.acks or producer.acks[-1].t <= t1) and time.monotonic() < t_next:
                await asyncio.sleep(0.01)
            after = await client.get_replica_info(group)
            gap = largest_gap_ms([a.t for a in producer.acks], t0, t1)
            samples.append({"round": i + 1, "gap_ms": gap, "stop_ms": round((t_stopped - t0) * 1000, 1),
                            "back_in_sync_ms": round((t1 - t0) * 1000, 1), "rc": rc, "forced": forced,
                            "epoch": [before.master_epoch, after.master_epoch], "rejoined": len(members) == 3})
            _p(f"{what}: restart {i + 1}/{restarts}: largest ack gap {gap} ms (stop {samples[-1]['stop_ms']} ms, "
               f"epoch {before.master_epoch}->{after.master_epoch})")
        stop.set()
        with contextlib.suppress(BaseException):
            await asyncio.wait_for(prod_task, 10)
        await producer.close()
        producer = None
        acked = {a["msg_id"] for a in load_ack_log(ack_path)}
        final = await client.get_replica_info(group)
        missing = (await lost_acked(final.master_address, topic, acked, wait_s=15, tls=cluster.tls)
                   if final.master_address else acked)
        gaps = [s["gap_ms"] for s in samples if s["gap_ms"] is not None]
        return {"gap_ms_p50": _pct(gaps, 0.5), "gap_ms_p99": _pct(gaps, 0.99),
                "gap_ms_max": max(gaps) if gaps else None, "lost_acked": len(missing), "acked": len(acked),
                "restarts": len(samples), "forced_stops": sum(1 for s in samples if s["forced"]), "samples": samples}
    finally:
        stop.set()
        if prod_task is not None and not prod_task.done():
            prod_task.cancel()
            with contextlib.suppress(BaseException):
                await prod_task
        if producer is not None:
            await producer.close()
        await client.close()
        cluster.stop_all()
        cluster.release_dir()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.rolling", description=__doc__.splitlines()[0])
    ap.add_argument("--restarts", type=int, default=9, help="master restarts per setup")
    ap.add_argument("--baseline-restarts", type=int, default=3, help="restarts without handover (0: skip)")
    ap.add_argument("--max-seconds", type=float, default=300.0, help="per setup")
    ap.add_argument("--tls", action="store_true", help="every process on mutual TLS with authorization")
    ap.add_argument("--data-dir", type=Path, default=None, help="keep the clusters' files here (default: a temp dir)")
    args = ap.parse_args(argv)
    if not (1 <= args.restarts <= MAX_RESTARTS and 0 <= args.baseline_restarts <= MAX_RESTARTS):
        ap.error(f"--restarts in [1, {MAX_RESTARTS}], --baseline-restarts in [0, {MAX_RESTARTS}]")
    result: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="bench-rolling-") as tmp:
        root = args.data_dir or Path(tmp)
        ours = asyncio.run(bench_setup(args.restarts, args.max_seconds, root / "handover", True, args.tls))
        result.update(ours)
        if args.baseline_restarts:
            base = asyncio.run(bench_setup(args.baseline_restarts, args.max_seconds, root / "plain", False, args.tls))
            result["no_handover"] = {k: base[k] for k in ("gap_ms_p50", "gap_ms_p99", "lost_acked", "restarts")}
    result["target_gap_ms_p99"] = 100
    print(json.dumps(result, separators=(",", ":")))
    return 0 if result.get("lost_acked") == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
