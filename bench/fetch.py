"""`make bench-fetch`: reading stored messages over the fetch port vs the gRPC Consume.

One broker (a real process on 127.0.0.1, ended by PID) is loaded with ``--messages`` messages of
256 bytes; then a consumer in this process reads them all from offset 0, 1,000 per call, once
over the gRPC ``Consume`` (stored-record runs, the cheapest gRPC form) and once over the fetch
port (docs/fetch-protocol.md), ``--rounds`` times alternating. Both decode and CRC-check every
message. Measured per message: the broker's CPU (``/proc/<pid>/stat``), the consumer's CPU, and
the read rate. The last stdout line is JSON; targets: the fetch port's broker CPU per message at
most half of gRPC's (``broker_cpu_ratio_fetch_vs_grpc <= 0.5``) and a read rate at least gRPC's.

    python -m bench.fetch [--messages 300000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path

from bench.produce import Cluster, CpuMeter, _load


async def _via_grpc(addr: str, total: int) -> int:
    from autoswitch.broker.client.client import ConsumerClient, consumed_messages

    c = ConsumerClient(addr, timeout_s=30)
    q = n = 0
    try:
        for _ in range(total):                  # bounded: at least one message per call
            if n >= total:
                break
            r = await c.consume("bench", q, 1000, record_runs=True)
            n += sum(1 for _ in consumed_messages(r))
            q = r.next_queue_offset
    finally:
        await c.close()
    return n


async def _via_fetch(addr: str, total: int) -> int:
    from autoswitch.broker.client.fetch_client import FetchClient, fetched_messages

    q = n = 0
    async with FetchClient(addr) as f:
        for _ in range(total):
            if n >= total:
                break
            r = await f.fetch("bench", q, 1000)
            n += sum(1 for _ in fetched_messages(r))
            q = r.next_queue_offset
    return n


def _p(msg: str) -> None:
    print(f"[bench-fetch {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.fetch")
    ap.add_argument("--messages", type=int, default=300_000)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args(argv)
    if not 1_000 <= args.messages <= 5_000_000 or not 1 <= args.rounds <= 50:
        print("bad arguments (messages 1000..5000000, rounds 1..50)", file=sys.stderr)
        return 2
    runs: dict[str, list[dict]] = {"grpc": [], "fetch": []}
    with tempfile.TemporaryDirectory(prefix="bench-fetch-") as tmp:
        cl = Cluster(Path(tmp), 1, "async")
        try:
            cl.start()
            _p(f"loading {args.messages} messages")
            asyncio.run(_load(cl.master_addr, args.messages, 4, 100, 256, 300))
            pid = cl.procs[0].pid
            for i in range(args.rounds):
                for name, fn, addr in (("grpc", _via_grpc, cl.master_addr),
                                       ("fetch", _via_fetch, cl.fetch_addr[cl.master_addr])):
                    meter, t0 = CpuMeter({"broker": pid}), time.perf_counter()
                    n = asyncio.run(fn(addr, args.messages))
                    t1, spent = time.perf_counter(), meter.spent()
                    runs[name].append({"msgs_s": n / (t1 - t0), "broker_us": spent["broker"] / n * 1e6,
                                       "consumer_us": spent["client"] / n * 1e6})
                    _p(f"round {i + 1}/{args.rounds} {name}: {n} msgs, {runs[name][-1]}")
        finally:
            cl.stop()

    def med(name: str, key: str) -> float:
        xs = sorted(r[key] for r in runs[name])
        return round(xs[len(xs) // 2], 3)

    out = {k: {"msgs_s": round(med(k, "msgs_s")), "broker_cpu_us_per_msg": med(k, "broker_us"),
               "consumer_cpu_us_per_msg": med(k, "consumer_us")} for k in runs}
    # The process CPU clock ticks in whole scheduler quanta (10 ms here), so a small run can read
    # zero CPU for the gRPC side: then there is no ratio to report, and the run says so instead of
    # dividing by zero.
    grpc_cpu = out["grpc"]["broker_cpu_us_per_msg"]
    out["broker_cpu_ratio_fetch_vs_grpc"] = (round(out["fetch"]["broker_cpu_us_per_msg"] / grpc_cpu, 3)
                                             if grpc_cpu > 0 else None)
    out["rate_ratio_fetch_vs_grpc"] = round(out["fetch"]["msgs_s"] / out["grpc"]["msgs_s"], 3)
    out["messages"], out["rounds"] = args.messages, args.rounds
    cpu_ratio = out["broker_cpu_ratio_fetch_vs_grpc"]
    if cpu_ratio is None:
        out["note"] = "too few messages for the CPU clock to measure the gRPC side; run more"
    out["met"] = cpu_ratio is not None and cpu_ratio <= 0.5 and out["rate_ratio_fetch_vs_grpc"] >= 1.0
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
