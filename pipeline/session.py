"""SparkSession for the pipeline jobs, and stage progress on stderr.

local[*] needs nothing beyond the installed pyspark and a JRE; spark://HOST:PORT
runs the same jobs on a standalone cluster (paths must then be visible to every
worker: a shared file system, HDFS or S3).
"""

from __future__ import annotations

import os
import threading
import time
from contextlib import contextmanager

from autoswitch.base.log import get_logger

log = get_logger("pipeline")

DEFAULT_MASTER = "local[*]"
DEFAULT_SHUFFLE_PARTITIONS = 64
DEFAULT_DRIVER_MEMORY = "1g"
PROGRESS_INTERVAL_S = 2.0


def build_session(master: str = DEFAULT_MASTER, app_name: str = "autoswitch-pipeline",
                  shuffle_partitions: int = DEFAULT_SHUFFLE_PARTITIONS,
                  driver_memory: str = DEFAULT_DRIVER_MEMORY, extra: dict[str, str] | None = None):
    if master.startswith("local") or "127.0.0.1" in master or "localhost" in master:
        # Keep Spark's driver and block manager on loopback on a developer machine.
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    b = (SparkSession.builder.master(master).appName(app_name)
         .config("spark.ui.enabled", "false")
         .config("spark.ui.showConsoleProgress", "false")
         .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
         .config("spark.sql.adaptive.enabled", "true")
         # The audit caches small results of big shuffles (flagged keys, suspect offsets); without
         # this AQE keeps their 64 partitions and every later read of them runs 64 tiny tasks
         # (bench/results/audit.md, session 30: -3 s of 43 at 5M rows on 2 cores).
         .config("spark.sql.optimizer.canChangeCachedPlanOutputPartitioning", "true")
         .config("spark.driver.memory", driver_memory)
         .config("spark.sql.session.timeZone", "UTC"))
    if os.environ.get("SPARK_LOCAL_IP"):
        b = b.config("spark.driver.host", os.environ["SPARK_LOCAL_IP"])
    for k, v in (extra or {}).items():
        b = b.config(k, v)
    spark = b.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    log.info("spark_session", master=master, version=spark.version, shuffle_partitions=shuffle_partitions)
    return spark


class StageProgress:
    """Polls the status tracker (no SparkListener: nothing to register on the JVM side)
    and logs one line per change of a running stage, at most every PROGRESS_INTERVAL_S."""

    def __init__(self, spark, interval_s: float = PROGRESS_INTERVAL_S) -> None:
        self._sc = spark.sparkContext
        self._interval = interval_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.phase = "-"
        self._last: dict[int, tuple[int, int]] = {}

    def set_phase(self, phase: str) -> None:
        self.phase = phase
        self._sc.setJobDescription(phase)
        log.info("phase", phase=phase)

    def _poll(self) -> None:
        tracker = self._sc.statusTracker()
        while not self._stop.wait(self._interval):
            try:
                for sid in tracker.getActiveStageIds():
                    info = tracker.getStageInfo(sid)
                    if info is None:
                        continue
                    state = (info.numCompletedTasks, info.numTasks)
                    if self._last.get(sid) != state:
                        self._last[sid] = state
                        log.info("progress", phase=self.phase, stage=sid, done=state[0], tasks=state[1],
                                 active=info.numActiveTasks, failed=info.numFailedTasks)
            except Exception as e:  # noqa: BLE001 - the gateway is closing; progress is best-effort
                log.debug("progress_poll_failed", error=str(e))
                return

    def __enter__(self) -> StageProgress:
        self._thread = threading.Thread(target=self._poll, name="stage-progress", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)


@contextmanager
def timed(name: str):
    t0 = time.monotonic()
    yield
    log.info("timed", step=name, seconds=round(time.monotonic() - t0, 3))
