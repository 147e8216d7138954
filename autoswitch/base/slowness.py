"""One slow-or-not signal with hysteresis, pure (issue 32): the broker's own health signals
(broker/health.py) and the master's view of each slave's acknowledgement latency
(ha/sync_state.py) share it.

Samples (ms) go into the current window; closing a window reduces it to one figure: the median
of its samples, or with fewer than MIN_SAMPLES the smallest (a single spike on a busy machine
moves no median; a signal seen twice a window, both slowly, is slow). The signal turns slow after
``degrade_windows`` slow windows in a row and healthy after ``recover_windows`` healthy ones; a
window without samples changes neither count (an idle broker appends nothing).
"""

from __future__ import annotations

MIN_SAMPLES = 3
# Samples kept per window: a busy broker appends thousands of times a second; overwriting slots
# spread over the window keeps the median honest and the memory bounded.
MAX_SAMPLES_PER_WINDOW = 512


def window_figure(samples: list[float]) -> float | None:
    """One figure per window: the median, or the smallest of fewer than MIN_SAMPLES."""
    if not samples:
        return None
    if len(samples) < MIN_SAMPLES:
        return min(samples)
    s = sorted(samples)
    return s[len(s) // 2]


class WindowedSignal:
    __slots__ = ("threshold_ms", "degrade_windows", "recover_windows", "samples", "seen", "slow", "streak", "last_ms")

    def __init__(self, threshold_ms: float, degrade_windows: int, recover_windows: int) -> None:
        assert threshold_ms > 0 and degrade_windows >= 1 and recover_windows >= 1
        self.threshold_ms = threshold_ms
        self.degrade_windows = degrade_windows
        self.recover_windows = recover_windows
        self.samples: list[float] = []
        self.seen = 0                    # samples offered this window
        self.slow = False
        self.streak = 0                  # consecutive windows against the current state
        self.last_ms = -1.0              # the last closed window's figure (-1: none yet)

    def add(self, ms: float) -> None:
        self.seen += 1
        if len(self.samples) < MAX_SAMPLES_PER_WINDOW:
            self.samples.append(ms)
        else:
            self.samples[self.seen % MAX_SAMPLES_PER_WINDOW] = ms

    def close_window(self) -> bool:
        """Close the current window; True when ``slow`` changed."""
        fig = window_figure(self.samples)
        self.samples = []
        self.seen = 0
        if fig is None:
            return False
        self.last_ms = fig
        against = (fig > self.threshold_ms) != self.slow
        self.streak = self.streak + 1 if against else 0
        need = self.recover_windows if self.slow else self.degrade_windows
        if self.streak < need:
            return False
        self.slow = not self.slow
        self.streak = 0
        return True
