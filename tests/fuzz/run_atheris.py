"""``make fuzz``: run every tests/fuzz/atheris_*.py harness for a bounded time each.

    python -m tests.fuzz.run_atheris [--seconds 60] [--only ha,record]

Each harness runs in its own process (libFuzzer owns the process) with ``-max_total_time``;
the committed seed corpus is copied to run-data/fuzz/<name>/corpus so new inputs never land
in the repository, and crash artifacts go to run-data/fuzz/<name>/. Exit 1 if any harness
found a crash (its artifact path is printed), 0 otherwise. Without atheris (it needs CPython
<= 3.11 wheels or a clang toolchain) the runner says so and exits 0.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
MAX_SECONDS = 3600


def harnesses() -> list[Path]:
    return sorted(HERE.glob("atheris_*.py"))


def run_one(path: Path, seconds: int, out_root: Path) -> dict:
    name = path.stem.removeprefix("atheris_")
    out = out_root / name
    out.mkdir(parents=True, exist_ok=True)
    args = [sys.executable, "-m", f"tests.fuzz.{path.stem}", f"-max_total_time={seconds}",
            "-rss_limit_mb=2048", "-timeout=20", f"-artifact_prefix={out}/"]
    seeds = HERE / "corpus" / name
    if "seed_dir" not in path.read_text():
        # the harness would use (and grow) the committed corpus: give it a scratch copy
        work = out / "corpus"
        if seeds.is_dir():
            shutil.copytree(seeds, work, dirs_exist_ok=True)
        work.mkdir(exist_ok=True)
        args.append(str(work))
    t0 = time.monotonic()
    log = out / "fuzz.log"
    with open(log, "wb") as f:
        try:
            rc = subprocess.run(args, cwd=ROOT, stdout=f, stderr=subprocess.STDOUT,
                                timeout=seconds + 120).returncode
        except subprocess.TimeoutExpired:
            rc = -1
    crashes = sorted(str(p) for p in out.glob("crash-*")) + sorted(str(p) for p in out.glob("timeout-*"))
    tail = log.read_text(errors="replace").splitlines()[-3:]
    return {"harness": name, "returncode": rc, "seconds": round(time.monotonic() - t0, 1),
            "artifacts": crashes, "log": str(log), "tail": tail}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.fuzz.run_atheris")
    ap.add_argument("--seconds", type=int, default=int(os.environ.get("FUZZ_SECONDS", "60")),
                    help="time per harness (default 60, env FUZZ_SECONDS)")
    ap.add_argument("--only", default="", help="comma-separated harness names (ha, record, ...)")
    ap.add_argument("--out", default=str(ROOT / "run-data" / "fuzz"))
    a = ap.parse_args(argv)
    seconds = max(1, min(a.seconds, MAX_SECONDS))
    try:
        import atheris  # noqa: F401
    except ImportError:
        print("atheris is not installed on this Python (pip install atheris==3.0.0 needs CPython <= 3.11 "
              "wheels or clang); fuzzing skipped — the hypothesis properties in tests/fuzz/ still run "
              "in the default suite.", file=sys.stderr)
        return 0
    only = {s.strip() for s in a.only.split(",") if s.strip()}
    todo = [p for p in harnesses() if not only or p.stem.removeprefix("atheris_") in only]
    results = []
    for p in todo:
        print(f"fuzzing {p.stem} for {seconds}s ...", file=sys.stderr, flush=True)
        r = run_one(p, seconds, Path(a.out))
        results.append(r)
        status = "OK" if r["returncode"] == 0 and not r["artifacts"] else "CRASH"
        print(f"  {status} rc={r['returncode']} {r['seconds']}s {r['tail'][-1] if r['tail'] else ''}",
              file=sys.stderr, flush=True)
        for art in r["artifacts"]:
            print(f"  artifact: {art}", file=sys.stderr)
    bad = [r["harness"] for r in results if r["returncode"] != 0 or r["artifacts"]]
    print(json.dumps({"harnesses": [r["harness"] for r in results], "seconds_each": seconds, "failed": bad}))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
