"""Session-scoped fixtures of the pipeline tests: one SparkSession for all of them."""

from __future__ import annotations

import pytest

# Test data is tiny: a JVM that starts fast (C1 JIT only, serial GC) and no whole-stage code
# generation (compiling each query costs more than running it) keep the suite's Spark time low.
# Same semantics as the defaults; the benchmark runs the defaults.
TEST_JAVA_OPTS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
TEST_CONF = {
    "spark.default.parallelism": "2",
    "spark.driver.extraJavaOptions": TEST_JAVA_OPTS,
    "spark.executor.extraJavaOptions": TEST_JAVA_OPTS,
    "spark.sql.codegen.wholeStage": "false",
}


@pytest.fixture(scope="session")
def spark():
    from autoswitch.pipeline.session import build_session

    s = build_session("local[2]", "autoswitch-tests", shuffle_partitions=2, driver_memory="1g", extra=TEST_CONF)
    yield s
    s.stop()


class NoProgress:
    """StageProgress's interface without the polling thread."""

    def __init__(self, spark) -> None:
        self._sc = spark.sparkContext
        self.phases: list[str] = []

    def set_phase(self, phase: str) -> None:
        self.phases.append(phase)
        self._sc.setJobDescription(phase)
