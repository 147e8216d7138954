"""Session-scoped fixtures of the pipeline tests: one SparkSession for all of them."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def spark():
    from autoswitch.pipeline.session import build_session

    s = build_session("local[2]", "autoswitch-tests", shuffle_partitions=4, driver_memory="1g",
                      extra={"spark.default.parallelism": "4"})
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
