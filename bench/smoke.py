"""Every ``make bench-*`` target at a tiny size: does each still run and print its JSON line?

A smoke, not a measurement (issue 63: ``make bench-scale`` failed within seconds for a week and
nothing noticed). Runs ``make <target> ARGS="..."`` for each target below, one after the other,
each bounded in time, and checks that it exits 0 and that its last stdout line is a JSON object.
A target that needs what this machine lacks (root and FUSE, a peer system) must say so itself and
still print its JSON line; the smoke counts that as run. Progress on stderr, one line per target;
the last stdout line is JSON: {"targets": {name: {"ok", "seconds", "why"}}, "failed": [...]}.

    python -m bench.smoke [--only bench-scale,bench-fetch] [--timeout-s 600]

Exit 1 when any target failed. CI runs it after the tests (.ci/run).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# target -> (make variables, ARGS): the smallest run that still goes through every phase
TARGETS: dict[str, tuple[dict[str, str], str]] = {
    "bench-replication": ({}, "--size-mb 8 --repeats 1 --native off --digests off --time-limit-s 120"),
    "bench-produce": ({}, "--messages 2000 --rounds 1 --max-seconds 10 --flush-ab"),
    "bench-produce UNBATCHED=1": ({"UNBATCHED": "1"}, "--messages 300 --rounds 1 --max-seconds 3"),
    "bench-fetch": ({}, "--messages 5000 --rounds 1"),
    "bench-recovery": ({}, "--sizes-mib 8"),
    "bench-controller": ({}, "--clients 4 --seconds 1 --max-ops 500 --seq-ops 20"),
    "bench-election": ({}, "--rounds 2 --etcd-rounds 2 --etcd-optional"),
    "bench-scale": ({}, "--sizes 30 --seconds 1 --workers 1"),
    "bench-failover": ({}, "--rounds 1 --sentinel-rounds 1 --max-s 180"),
    "bench-rolling": ({}, "--restarts 1 --baseline-restarts 1 --max-seconds 120"),
    "bench-grayfailure": ({}, "--rounds 1 --hang-s 2 --slow-rounds 1 --slow-s 3 --time-limit-s 300"),
    "bench-audit": ({}, "--sizes 2000 --pandas-size 2000 --max-seconds 300"),
    "bench-rocketmq": ({}, "--controllers 1 --rounds 1 --max-s 600"),
    "bench-peer-rocketmq": ({}, "--rounds 1 --seconds 1 --warmup 1"),
    "bench-backends": ({}, "--backends raft,sqlite --rounds 1 --controller-rounds 1 --seconds 1 --max-s 180"),
}


def _log(msg: str) -> None:
    print(f"[bench.smoke] {msg}", file=sys.stderr, flush=True)


def run_target(name: str, timeout_s: float) -> dict:
    target, *extra = name.split()
    variables, args = TARGETS[name]
    cmd = ["make", "--no-print-directory", target, f"ARGS={args}", *(f"{k}={v}" for k, v in variables.items())]
    t0 = time.monotonic()
    try:
        # its own session: a timeout ends the whole process group this smoke started, nothing else
        p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout_s, start_new_session=True)
    except subprocess.TimeoutExpired as e:
        return {"ok": False, "seconds": round(time.monotonic() - t0, 1), "why": f"no end within {timeout_s:.0f} s",
                "stderr_tail": (e.stderr or b"")[-800:].decode(errors="replace") if isinstance(e.stderr, bytes)
                else str(e.stderr or "")[-800:]}
    took = round(time.monotonic() - t0, 1)
    lines = [ln for ln in p.stdout.splitlines() if ln.strip()]
    last = lines[-1] if lines else ""
    try:
        parsed = json.loads(last)
    except ValueError:
        parsed = None
    if p.returncode != 0 or not isinstance(parsed, dict):
        why = f"exit {p.returncode}" if p.returncode != 0 else "the last stdout line is not a JSON object"
        return {"ok": False, "seconds": took, "why": why, "stderr_tail": p.stderr[-800:], "stdout_tail": last[-300:]}
    return {"ok": True, "seconds": took, "why": "", "keys": sorted(parsed)[:12]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.smoke")
    ap.add_argument("--only", default="", help="comma-separated target names (default: all)")
    ap.add_argument("--timeout-s", type=float, default=600.0, help="per target")
    a = ap.parse_args(argv)
    assert 10 <= a.timeout_s <= 3600
    names = [n for n in TARGETS if not a.only or n.split()[0] in a.only.split(",") or n in a.only.split(",")]
    unknown = set(a.only.split(",")) - {n.split()[0] for n in TARGETS} - set(TARGETS) - {""}
    if unknown:
        print(f"unknown targets: {sorted(unknown)}; known: {sorted(TARGETS)}", file=sys.stderr)
        return 2
    env_note = "root" if os.geteuid() == 0 else "not root"
    _log(f"{len(names)} targets ({env_note}), each bounded by {a.timeout_s:.0f} s")
    results: dict[str, dict] = {}
    for i, n in enumerate(names, 1):
        r = run_target(n, a.timeout_s)
        results[n] = r
        _log(f"[{i}/{len(names)}] {n}: {'ok' if r['ok'] else 'FAILED (' + r['why'] + ')'} in {r['seconds']} s")
        if not r["ok"]:
            print(r.get("stderr_tail", ""), file=sys.stderr)
    failed = [n for n, r in results.items() if not r["ok"]]
    print(json.dumps({"targets": {n: {k: r[k] for k in ("ok", "seconds", "why")} for n, r in results.items()},
                      "failed": failed}))
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
