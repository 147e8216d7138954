"""The health monitor (broker/health.py): per-window medians, hysteresis both ways, windows
without samples neutral, an operation still running counted with its age, bounded memory."""

from __future__ import annotations

import pytest
from autoswitch.broker.health import HealthMonitor, HealthThresholds

from autoswitch.base.slowness import MAX_SAMPLES_PER_WINDOW, window_figure

CFG = HealthThresholds(window_s=1.0, slow_append_ms=100, slow_fsync_ms=250, slow_loop_lag_ms=250,
                   degrade_windows=3, recover_windows=4)


def feed(m: HealthMonitor, t: float, signal: str, values: list[float]) -> None:
    for i, v in enumerate(values):
        m.sample(signal, v, t + i * 0.01)


def test_window_figure_is_the_median_or_the_smallest_of_few():
    assert window_figure([]) is None
    assert window_figure([500.0]) == 500.0
    assert window_figure([500.0, 20.0]) == 20.0              # two samples: the smaller
    assert window_figure([1, 2, 900, 3, 4.0]) == 3           # one spike moves no median


def test_degrades_after_n_slow_windows_and_recovers_after_m_healthy_ones():
    m = HealthMonitor(CFG, now=0.0)
    changes = []
    for w in range(3):
        feed(m, w + 0.1, "fsync", [400.0] * 5)
        changes += m.tick(w + 1.0)
        assert m.degraded == (w == 2)
    assert changes == [("fsync", True)]
    r = m.report()
    assert r.degraded and r.reasons == ("fsync",) and r.fsync_ms == 400.0
    # healthy windows: back after 4, not before
    for w in range(3, 7):
        feed(m, w + 0.1, "fsync", [5.0] * 5)
        changes = m.tick(w + 1.0)
        assert m.degraded == (w < 6)
    assert changes == [("fsync", False)]
    assert m.report().reasons == ()


def test_one_healthy_window_breaks_a_slow_streak():
    m = HealthMonitor(CFG, now=0.0)
    for w, v in enumerate([400, 400, 5, 400, 400]):
        feed(m, w + 0.1, "append", [float(v)] * 5)
        m.tick(w + 1.0)
    assert not m.degraded


def test_windows_without_samples_are_neutral():
    m = HealthMonitor(CFG, now=0.0)
    feed(m, 0.1, "append", [400.0] * 5)
    m.tick(1.0)
    m.tick(2.0)            # idle: no append at all
    m.tick(3.0)
    for w in (3, 4):
        feed(m, w + 0.1, "append", [400.0] * 5)
        m.tick(w + 1.0)
    assert m.degraded and m.report().reasons == ("append",)


def test_an_operation_still_running_counts_with_its_age():
    """A disk that finishes less than once a window still shows as slow."""
    m = HealthMonitor(CFG, now=0.0)
    for w in range(3):
        m.tick(w + 1.0, {"fsync": w + 0.2})       # an fsync running since 0.8 s before the window closed
    assert m.report().reasons == ("fsync",)


def test_a_long_pause_closes_at_most_two_windows():
    m = HealthMonitor(CFG, now=0.0)
    feed(m, 0.1, "loop_lag", [300.0] * 5)
    m.tick(1000.0)
    assert m.windows <= 2


def test_memory_is_bounded():
    m = HealthMonitor(CFG, now=0.0)
    for _ in range(MAX_SAMPLES_PER_WINDOW * 4):
        m.sample("append", 1.0, 0.5)
    assert len(m._signals["append"].samples) == MAX_SAMPLES_PER_WINDOW


@pytest.mark.parametrize("bad", [dict(window_s=0.0), dict(slow_fsync_ms=0.0), dict(degrade_windows=0),
                                 dict(recover_windows=10_000)])
def test_config_is_checked(bad):
    with pytest.raises(ValueError):
        HealthThresholds(**bad).validate()


def test_a_change_found_while_sampling_is_reported_by_the_next_tick():
    """Samples close windows too; the change they find must not be lost (the log line and the
    heartbeat's reasons come from tick's answer)."""
    m = HealthMonitor(CFG, now=0.0)
    for w in range(4):
        feed(m, w + 0.1, "fsync", [400.0] * 5)     # each first sample closes the window before
    assert m.degraded
    assert m.tick(3.5) == [("fsync", True)]
    assert m.tick(3.6) == []
