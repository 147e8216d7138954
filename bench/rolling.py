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
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.producing_cluster import GROUP, pct, producing_cluster

MAX_RESTARTS = 50


def _p(msg: str) -> None:
    print(f"[bench-rolling {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def largest_gap_ms(ack_times: list[float], t0: float, t1: float) -> float | None:
    """The largest pause between consecutive acks that overlaps [t0, t1] (monotonic seconds)."""
    gaps = gaps_ms(ack_times, t0, t1, 1)
    return gaps[0][1] if gaps else None


def gaps_ms(ack_times: list[float], t0: float, t1: float, top: int) -> list[tuple[float, float]]:
    """The ``top`` largest pauses overlapping [t0, t1] as (start ms after t0, length ms), largest first.

    Where a pause starts says what caused it: at the SIGTERM it is the handover, near the end the
    restarted broker's return (its start's CPU, the SyncStateSet expansion)."""
    gaps = [(b - a, a) for a, b in zip(ack_times, ack_times[1:], strict=False) if b >= t0 and a <= t1]
    gaps.sort(reverse=True)
    return [(round((a - t0) * 1000, 1), round(g * 1000, 1)) for g, a in gaps[:top]]


async def bench_setup(restarts: int, max_s: float, data_dir: Path, handover: bool, tls: bool = False) -> dict:
    from autoswitch.app.demo_traffic import wait_full_sync_state_set

    extra = () if handover else ("--no-handover-on-shutdown",)
    what = "handover" if handover else "no handover"
    samples: list[dict] = []
    t_end = time.monotonic() + max_s
    async with producing_cluster(data_dir, max_s=max_s + 120, tls=tls, broker_extra=extra) as run:
        acks = run.producer.acks
        for i in range(restarts):
            if time.monotonic() > t_end:
                _p(f"{what}: time budget used up after {i} restarts")
                break
            await run.settle(_p, what)
            before = await run.client.get_replica_info(GROUP)
            victim = run.cluster.child_by_addr(before.master_address)
            assert victim is not None, before
            t0 = time.monotonic()
            # Stopping blocks (it waits for the process): off the event loop, the producer keeps going.
            rc, forced = await asyncio.to_thread(victim.stop, 30.0)
            t_stopped = time.monotonic()
            run.restart(victim)
            members = await wait_full_sync_state_set(run.client, GROUP, 3, 60)
            t1 = time.monotonic()
            # The gap that spans t1 ends with the next ack: wait for it (bounded).
            t_next = t1 + 30
            while (not acks or acks[-1].t <= t1) and time.monotonic() < t_next:
                await asyncio.sleep(0.01)
            after = await run.client.get_replica_info(GROUP)
            top = gaps_ms([a.t for a in acks], t0, t1, 3)
            gap = top[0][1] if top else None
            samples.append({"round": i + 1, "gap_ms": gap, "top_gaps_at_ms": top, "stop_ms": round((t_stopped - t0) * 1000, 1),
                            "back_in_sync_ms": round((t1 - t0) * 1000, 1), "rc": rc, "forced": forced,
                            "epoch": [before.master_epoch, after.master_epoch], "rejoined": len(members) == 3})
            _p(f"{what}: restart {i + 1}/{restarts}: largest ack gap {gap} ms (stop {samples[-1]['stop_ms']} ms, "
               f"epoch {before.master_epoch}->{after.master_epoch}; largest gaps (start ms after SIGTERM, ms): {top})")
        acked, lost = await run.finish(_p, what)
    gaps = [s["gap_ms"] for s in samples if s["gap_ms"] is not None]
    return {"gap_ms_p50": pct(gaps, 0.5), "gap_ms_p99": pct(gaps, 0.99),
            "gap_ms_max": max(gaps) if gaps else None, "lost_acked": lost, "acked": acked,
            "restarts": len(samples), "forced_stops": sum(1 for s in samples if s["forced"]), "samples": samples}


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
