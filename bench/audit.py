"""bench-audit: generate and audit 1M, 5M and 20M acked messages x 3 replicas with Spark
(local[*]), plus a single-process pandas audit of the 5M case, in the same run.

Bounded: a size is skipped (reported as null, with the reason) when the time already spent
plus the time predicted from the previous size would pass --max-seconds. Every audit's counts
are checked against the generator's manifest. Beside the wall clock, CPU seconds per acked row:
the Spark JVM's and the driver's over the audit, the pandas child's over its run. Progress on
stderr; one JSON line on stdout.
Generated data lives in a temporary directory that is removed after each size.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

SIZES = (1_000_000, 5_000_000, 20_000_000)
PLANT = 100
GROUPS = 100


def _rss_mb(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


class Peak:
    """Samples the summed RSS of some processes every 0.25 s and keeps the maximum."""

    def __init__(self, pids: list[int]) -> None:
        self.pids, self.peak = pids, 0.0
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.25):
            self.peak = max(self.peak, sum(_rss_mb(p) for p in self.pids))

    def __enter__(self) -> Peak:
        self.peak = sum(_rss_mb(p) for p in self.pids)
        self._t.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._t.join(5)


def say(msg: str, **kv) -> None:
    print(json.dumps({"bench": "audit", "msg": msg, **kv}), file=sys.stderr, flush=True)


def expected(m: dict) -> dict:
    p = m["planted"]
    return {"lost": len(p["losses"]), "moved": 0, "replica_missing": 3 * len(p["losses"]),
            "divergence": len(p["divergences"]), "duplicates": len(p["duplicates"])}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.audit")
    ap.add_argument("--max-seconds", type=float, default=3000.0)
    ap.add_argument("--sizes", default=",".join(str(s) for s in SIZES))
    ap.add_argument("--pandas-size", type=int, default=5_000_000)
    ap.add_argument("--driver-memory", default="1g")
    ap.add_argument("--workdir", default=None, help="where to generate (default: a temp dir)")
    args = ap.parse_args(argv)
    sizes = [int(x) for x in args.sizes.split(",")]
    t_start = time.monotonic()
    aslog_level = os.environ.get("AUTOSWITCH_LOG_LEVEL", "info")

    from autoswitch.pipeline import inputs
    from autoswitch.pipeline.audit import run_audit
    from autoswitch.pipeline.session import StageProgress, build_session

    from autoswitch.base import log as aslog
    from bench.produce import CpuMeter

    aslog.configure(aslog_level)   # stage progress lines (StageProgress) go to stderr
    spark = build_session("local[*]", "bench-audit", shuffle_partitions=64, driver_memory=args.driver_memory)
    jvm_pid = int(spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid())
    out: dict = {"cores": os.cpu_count(), "groups": GROUPS, "planted_each": PLANT, "sizes": {}}
    rate_prev = None
    for n in sizes:
        elapsed = time.monotonic() - t_start
        predicted = n / rate_prev * 1.3 + n / 200_000 if rate_prev else 0.0   # audit + generation
        if rate_prev and elapsed + predicted > args.max_seconds:
            say("skip", size=n, elapsed_s=round(elapsed), predicted_s=round(predicted))
            out["sizes"][str(n)] = {"skipped": f"predicted {predicted:.0f}s would pass --max-seconds"}
            continue
        work = Path(tempfile.mkdtemp(prefix=f"bench-audit-{n}-", dir=args.workdir))
        try:
            t0 = time.monotonic()
            # in a child process, so the driver's RSS is the audit's, not the generator's
            subprocess.run([sys.executable, "-m", "autoswitch", "--log-level", "warning", "pipeline", "generate",
                            "--groups", str(GROUPS), "--messages", str(n), "--seed", str(n % 9973),
                            "--plant-losses", str(PLANT), "--plant-divergences", str(PLANT),
                            "--plant-duplicates", str(PLANT), "--out", str(work), "--json"],
                           check=True, stdout=subprocess.DEVNULL, timeout=args.max_seconds)
            m = json.loads((work / "manifest.json").read_text())
            gen_s = time.monotonic() - t0
            say("generated", size=n, seconds=round(gen_s, 1), index_rows=m["index_rows"])
            logs = inputs.find_log_sources(work / "logs")
            t0 = time.monotonic()
            meter = CpuMeter({"jvm": jvm_pid})      # the JVM, and this driver as "client"
            with Peak([jvm_pid, os.getpid()]) as peak, StageProgress(spark) as prog:
                res = run_audit(spark, inputs.read(spark, inputs.find_sources(work / "acks", "acks")),
                                inputs.read(spark, logs["index"]), inputs.read_rows(logs["replica"]),
                                inputs.read_rows(logs["epochs"]),
                                inputs.read_rows(inputs.find_sources(work / "events", "events")),
                                work / "out", prog)
            audit_s = time.monotonic() - t0
            cpu_s = sum(meter.spent().values())
            rate_prev = m["acked_rows"] / audit_s
            row = {"acked_rows": m["acked_rows"], "index_rows": m["index_rows"], "generate_s": round(gen_s, 1),
                   "audit_s": round(audit_s, 1), "rows_per_s": round(rate_prev), "driver_rss_mb": round(peak.peak),
                   "cpu_s": round(cpu_s, 1), "cpu_us_per_row": round(cpu_s / m["acked_rows"] * 1e6, 2),
                   # the Spark audit also counts what an operator's unclean recovery lost (none here)
                   "correct": res["counts"] == {**expected(m), "lost_by_operator": 0}}
            say("audited", size=n, **row)
            if n == args.pandas_size:
                # In a child process: pandas' peak memory would otherwise stay in this process and be
                # counted as the Spark driver's RSS at the next size.
                code = ("import json,sys; from pathlib import Path; "
                        "from autoswitch.pipeline.audit_pandas import audit_pandas; w=Path(sys.argv[1]); "
                        "print(json.dumps(audit_pandas(w/'acks', w/'logs', w/'events')['counts'], default=int))")
                t0 = time.monotonic()
                kids0 = resource.getrusage(resource.RUSAGE_CHILDREN)
                child = subprocess.Popen([sys.executable, "-c", code, str(work)], stdout=subprocess.PIPE, text=True)
                with Peak([child.pid]) as pk:
                    child_out, _ = child.communicate(timeout=args.max_seconds)
                p_s = time.monotonic() - t0
                kids1 = resource.getrusage(resource.RUSAGE_CHILDREN)     # the pandas child, waited for
                p_cpu = kids1.ru_utime + kids1.ru_stime - kids0.ru_utime - kids0.ru_stime
                if child.returncode != 0:
                    raise RuntimeError(f"pandas audit failed with exit code {child.returncode}")
                pres = {"counts": json.loads(child_out.strip().splitlines()[-1])}
                row.update(pandas_s=round(p_s, 1), pandas_rows_per_s=round(m["acked_rows"] / p_s),
                           pandas_rss_mb=round(pk.peak), pandas_correct=pres["counts"] == expected(m),
                           pandas_cpu_s=round(p_cpu, 1), pandas_cpu_us_per_row=round(p_cpu / m["acked_rows"] * 1e6, 2))
                say("pandas", size=n, seconds=round(p_s, 1), rss_mb=round(pk.peak))
            out["sizes"][str(n)] = row
        finally:
            shutil.rmtree(work, ignore_errors=True)
    spark.stop()

    def rate(n: int):
        return out["sizes"].get(str(n), {}).get("rows_per_s")

    r5, r20 = rate(5_000_000), rate(20_000_000)
    result = {
        "rows_per_s_1m": rate(1_000_000), "rows_per_s_5m": r5, "rows_per_s_20m": r20,
        "scaling_ratio": round(r20 / r5, 3) if r5 and r20 else None,
        "driver_rss_mb": max((v.get("driver_rss_mb", 0) for v in out["sizes"].values()), default=None),
        "pandas_rows_per_s_5m": out["sizes"].get(str(args.pandas_size), {}).get("pandas_rows_per_s"),
        "cpu_us_per_row_5m": out["sizes"].get("5000000", {}).get("cpu_us_per_row"),
        "pandas_cpu_us_per_row_5m": out["sizes"].get(str(args.pandas_size), {}).get("pandas_cpu_us_per_row"),
        "all_correct": all(v.get("correct", True) and v.get("pandas_correct", True) for v in out["sizes"].values()),
        "seconds": round(time.monotonic() - t_start, 1),
        "detail": out,
    }
    print(json.dumps(result, sort_keys=True))
    return 0 if result["all_correct"] else 1


if __name__ == "__main__":
    sys.exit(main())
