"""Crash-recovery time of the message store for a 100 MiB and a 1 GiB log.

    python -m bench.recovery [--sizes-mib 100,1024] [--build-timeout-s 240]
    python -m bench.recovery --micro      # store hot paths (append/read raw) in CPU time

For each size a child process builds the log with 1 KiB records (append_messages,
256 per batch), flushing every flush_interval_ms (500 ms) like the broker's async flusher, then writes
a few unflushed batches plus a torn record and dies with os._exit (no close, no
final checkpoint). The parent times MessageStore() on that directory: the real
recovery (checkpoint, verify the last synced segment, cut the torn tail, re-index
the tail). Peer in the same run: a full-log CRC scan, i.e. what recovery would cost
if it did not trust the checkpoint (RocketMQ's abnormal recovery without a usable
checkpoint). Progress on stderr, one JSON line on stdout. Temp data under /tmp,
deleted at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

MiB = 1024 * 1024
RECORD = 1024
BATCH = 256


def _eprint(*a) -> None:
    print(*a, file=sys.stderr, flush=True)


def build(path: Path, size: int, deadline_s: float) -> None:
    """Child: build, crash. Never returns."""
    from autoswitch.broker.storage import record as rec
    from autoswitch.broker.storage.store import Message, MessageStore, StoreConfig

    t0 = time.monotonic()
    s = MessageStore(path, StoreConfig())
    s.append_epoch(1, 0)
    topic = "bench"
    body = os.urandom(RECORD - rec.HEADER_SIZE - len(topic) - 32)
    n = 0
    interval = s.config.flush_interval_ms / 1000
    last_flush = time.monotonic()
    last_report = 0
    while s.max_offset < size and time.monotonic() - t0 < deadline_s:
        s.append_messages([Message(topic, body, f"{n + i:032x}", 1) for i in range(BATCH)])
        n += BATCH
        if time.monotonic() - last_flush >= interval:
            s.flush()
            last_flush = time.monotonic()
        if s.max_offset - last_report >= 128 * MiB:
            last_report = s.max_offset
            _eprint(f"  built {s.max_offset / MiB:.0f} MiB")
    # unflushed tail (whatever was written since the last interval flush) plus a torn record
    for _ in range(4):
        s.append_messages([Message(topic, body, f"{n + i:032x}", 1) for i in range(BATCH)])
        n += BATCH
    seg = s._log.segments[-1]
    torn = rec.encode_message(topic.encode(), b"torn", body, s.max_queue_offset(topic), 1, 1)[:500]
    seg.pwrite_all(s.max_offset, torn)       # past the log end: the torn record recovery must cut
    os._exit(0)  # a kill: no close, no final flush or checkpoint


def full_scan(path: Path) -> tuple[float, int]:
    """Peer: CRC-walk every record of every segment (no checkpoint trusted)."""
    import mmap

    from autoswitch.broker.storage import record as rec
    from autoswitch.broker.storage.store_config import StoreConfig

    cfg = StoreConfig()
    t0 = time.perf_counter()
    total = 0
    for p in sorted((path / "commitlog").iterdir()):
        with open(p, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if not size:
                continue
            with mmap.mmap(f.fileno(), size, prot=mmap.PROT_READ) as mm:
                end, _why, _ = rec.walk_fast(mm, 0, size, cfg.segment_bytes, 0, cfg.max_record_bytes)
                total += end
    return time.perf_counter() - t0, total


def measure(size: int, build_timeout_s: float) -> dict:
    from autoswitch.broker.storage.store import MessageStore, StoreConfig

    root = Path(tempfile.mkdtemp(prefix="autoswitch-bench-recovery-", dir="/tmp"))
    try:
        path = root / "store"
        _eprint(f"building {size / MiB:.0f} MiB log in {path}")
        t0 = time.monotonic()
        subprocess.run(
            [sys.executable, "-m", "bench.recovery", "--build", str(path), str(size), str(build_timeout_s)],
            check=True, timeout=build_timeout_s + 120,
        )
        build_s = time.monotonic() - t0
        t1 = time.perf_counter()
        s = MessageStore(path, StoreConfig())
        recovery_s = time.perf_counter() - t1
        log_bytes = s.max_offset
        s.close()
        t2 = time.perf_counter()
        s = MessageStore(path, StoreConfig())
        clean_open_s = time.perf_counter() - t2
        s.close()
        scan_s, scanned = full_scan(path)
        _eprint(
            f"  {log_bytes / MiB:.0f} MiB: recovery {recovery_s:.3f}s, clean reopen {clean_open_s:.3f}s, "
            f"full CRC scan {scan_s:.3f}s (build {build_s:.0f}s)"
        )
        return {"log_bytes": log_bytes, "recovery_s": recovery_s, "clean_open_s": clean_open_s,
                "full_scan_s": scan_s, "build_s": build_s}
    finally:
        shutil.rmtree(root, ignore_errors=True)


def micro(size: int = 100 * MiB) -> dict:
    """Store hot paths in CPU time (``--micro``): wall time is meaningless on a shared VM."""
    from autoswitch.broker.storage import record as rec
    from autoswitch.broker.storage.store import Message, MessageStore, StoreConfig

    cpu = time.process_time
    root = Path(tempfile.mkdtemp(prefix="autoswitch-bench-micro-", dir="/tmp"))
    try:
        src = MessageStore(root / "src", StoreConfig())
        src.append_epoch(1, 0)
        body = os.urandom(RECORD - rec.HEADER_SIZE - 5 - 32)
        t = cpu()
        i = 0
        while src.max_offset < size:
            src.append_messages([Message("topic", body, f"{i + k:032x}", 1) for k in range(BATCH)])
            i += BATCH
        out = {"append_messages_mb_s_cpu": src.max_offset / (cpu() - t) / 1e6}
        for verify in (True, False):
            object.__setattr__(src.config, "verify_reads", verify)  # frozen dataclass; bench only
            dst = MessageStore(root / f"dst{int(verify)}", StoreConfig())
            pos, rd, ap = 0, 0.0, 0.0
            while pos < src.max_offset:
                t = cpu()
                data = src.read_raw(pos, 256 * 1024)
                rd += cpu() - t
                t = cpu()
                pos = dst.append_raw(pos, data, 1, 0)
                ap += cpu() - t
            out[f"read_raw_mb_s_cpu_verify_{'on' if verify else 'off'}"] = src.max_offset / rd / 1e6
            out[f"append_raw_mb_s_cpu_{'after_verified' if verify else 'after_unverified'}_read"] = (
                src.max_offset / ap / 1e6
            )
            dst.close()
        src.close()
        return {k: round(v) for k, v in out.items()}
    finally:
        shutil.rmtree(root, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="bench.recovery")
    ap.add_argument("--sizes-mib", default="100,1024")
    ap.add_argument("--build-timeout-s", type=float, default=240.0)
    ap.add_argument("--micro", action="store_true", help="store hot-path throughput in CPU time instead")
    ap.add_argument("--build", nargs=3, metavar=("PATH", "SIZE", "DEADLINE_S"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.build:
        build(Path(args.build[0]), int(args.build[1]), float(args.build[2]))
        return 1  # unreachable
    if args.micro:
        print(json.dumps(micro()))
        return 0
    sizes = [int(x) * MiB for x in args.sizes_mib.split(",")]
    res = [measure(sz, args.build_timeout_s) for sz in sizes]
    small, big = res[0], res[-1]
    out = {
        "recovery_s_100mb": round(small["recovery_s"], 4),
        "recovery_s_1gb": round(big["recovery_s"], 4),
        "ratio": round(big["recovery_s"] / small["recovery_s"], 3) if small["recovery_s"] > 0 else None,
        "log_bytes": [r["log_bytes"] for r in res],
        "clean_open_s": [round(r["clean_open_s"], 4) for r in res],
        "peer_full_scan_s": [round(r["full_scan_s"], 4) for r in res],
        "target": "recovery <= 1 s and not growing with log size",
    }
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
