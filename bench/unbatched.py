"""One message per request (the way a RocketMQ application sends): acked produce with 3 replicas,
ack mode all, 256 B bodies, 1, 4 and 16 producers in turn against the same group
(``make bench-produce UNBATCHED=1``, issue 36).

Two ways to send, measured in the same run against the same group: the gRPC Produce and the
PRODUCE frame of the broker's fetch port (docs/fetch-protocol.md: the same request and answer
without gRPC's per-call HTTP/2 work). Prints progress on stderr and, last, one JSON line:
``unbatched_msgs_s_1``, ``_4``, ``_16`` (over the port), ``grpc_unbatched_msgs_s_*`` (over gRPC),
p50/p99 per request for each, and where the CPU went: CPU microseconds per acked message of the
master, of each slave and of this load generator (its client is part of every request's cost on a
2-core machine). Each producer count and way runs ``--rounds`` times, alternating, and keeps its
best round.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path

from autoswitch.base.event_loop import EVENT_LOOPS
from bench.produce import Cluster, CpuMeter, _log

PRODUCERS = (1, 4, 16)
VIAS = ("port", "grpc")
TARGET_16 = 5300.0          # RocketMQ 5.2's rate here (issue 36)
TARGET_SCALING = 3.0        # 16 producers vs 1


async def _load(addr: str, via: str, messages: int, producers: int, size: int, max_s: float) -> dict:
    """``producers`` senders, each with its own client, one message per request, until ``messages``
    are sent or ``max_s`` passed."""
    from autoswitch.broker.client.client import ProducerClient
    from autoswitch.broker.client.fetch_client import FetchClient

    share = messages // producers
    lat: list[float] = []
    acked = failed = 0
    deadline = time.monotonic() + max_s
    body = [b"x" * size]

    async def one() -> None:
        nonlocal acked, failed
        c = FetchClient(addr, timeout_s=30) if via == "port" else ProducerClient(addr, timeout_s=30)
        try:
            for _ in range(share):
                if time.monotonic() >= deadline:
                    break
                t = time.perf_counter()
                r = await c.produce("bench", body)
                lat.append((time.perf_counter() - t) * 1000)
                ok = len(r.acked())
                acked += ok
                failed += 1 - ok
        finally:
            await c.close()

    t0 = time.perf_counter()
    await asyncio.gather(*(one() for _ in range(producers)))
    elapsed = time.perf_counter() - t0
    lat.sort()

    def pct(p: float) -> float:
        return round(lat[min(len(lat) - 1, int(p * len(lat)))], 2) if lat else 0.0

    return {"acked": acked, "failed": failed, "elapsed_s": round(elapsed, 3),
            "acked_msgs_s": round(acked / elapsed, 1) if elapsed else 0.0, "p50_ms": pct(0.50), "p99_ms": pct(0.99)}


def _measure(cl: Cluster, via: str, producers: int, messages: int, size: int, max_s: float) -> dict:
    addr = cl.fetch_addr[cl.master_addr] if via == "port" else cl.master_addr
    meter = CpuMeter({str(i): p.pid for i, p in enumerate(cl.procs)})
    res = asyncio.run(_load(addr, via, messages, producers, size, max_s))
    by = meter.spent()
    spent = [by[str(i)] for i in range(len(cl.procs))] + [by["client"]]
    n = max(1, res["acked"])
    res["cpu_us_per_msg"] = {"master": round(spent[0] / n * 1e6, 1),
                             "slaves": [round(s / n * 1e6, 1) for s in spent[1:-1]],
                             "load": round(spent[-1] / n * 1e6, 1),
                             "total": round(sum(spent) / n * 1e6, 1)}
    return res


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.unbatched")
    ap.add_argument("--messages", type=int, default=40_000, help="per producer count and round (bounded by time too)")
    ap.add_argument("--size", type=int, default=256)
    ap.add_argument("--flush", choices=["async", "sync"], default="sync", help="sync: the product's default")
    ap.add_argument("--max-seconds", type=float, default=15.0, help="per producer count and round")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--event-loop", choices=EVENT_LOOPS, default=None,
                    help="the brokers' event loop (default: theirs, uvloop)")
    args = ap.parse_args(argv)
    assert 1 <= args.rounds <= 10 and 100 <= args.messages <= 10_000_000 and 1 <= args.max_seconds <= 600
    best: dict[tuple[str, int], dict] = {}
    with tempfile.TemporaryDirectory(prefix="bench-unbatched-") as tmp:
        cl = Cluster(Path(tmp), 3, args.flush, event_loop=args.event_loop)
        try:
            _log("starting 3 replicas (ack mode all)")
            cl.start()
            for via in VIAS:                                                  # warm-up
                _measure(cl, via, 4, 2000, args.size, 10)
            for r in range(args.rounds):
                for k in PRODUCERS:
                    for via in VIAS:
                        res = _measure(cl, via, k, args.messages, args.size, args.max_seconds)
                        _log(f"round {r + 1}, {k} producer(s) x 1 message over {via}: {res}")
                        if (via, k) not in best or res["acked_msgs_s"] > best[via, k]["acked_msgs_s"]:
                            best[via, k] = res
        finally:
            cl.stop()
    out: dict[str, object] = {}
    for via, prefix in (("port", ""), ("grpc", "grpc_")):
        for k in PRODUCERS:
            b = best[via, k]
            out[f"{prefix}unbatched_msgs_s_{k}"] = b["acked_msgs_s"]
            out[f"{prefix}p50_ms_{k}"] = b["p50_ms"]
            out[f"{prefix}p99_ms_{k}"] = b["p99_ms"]
            out[f"{prefix}cpu_us_per_msg_{k}"] = b["cpu_us_per_msg"]
        one = best[via, 1]["acked_msgs_s"]
        out[f"{prefix}scaling_16_vs_1"] = round(best[via, 16]["acked_msgs_s"] / one, 2) if one else 0.0
    out["failed"] = sum(b["failed"] for b in best.values())
    out["load"] = {"replicas": 3, "ack_mode": "all", "size": args.size, "flush": args.flush,
                   "messages": args.messages, "max_seconds": args.max_seconds, "rounds": args.rounds,
                   "event_loop": args.event_loop or "uvloop"}
    out["target_msgs_s_16"] = TARGET_16
    out["target_scaling_16_vs_1"] = TARGET_SCALING
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
