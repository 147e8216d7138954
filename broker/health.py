"""A broker's own health signals, sans-IO (issue 32 part 2, docs/broker.md "A slow master").

The broker measures three things about itself -- how long a log append takes, how long an fsync
takes, and how late its event loop runs (a probe that sleeps 100 ms and notes how much longer it
slept) -- and feeds the samples here with the time they were taken. The monitor cuts time into
windows of ``window_s``; each signal is an autoswitch/base/slowness.WindowedSignal (the median
per window, hysteresis both ways). An operation still running when the window closes counts with
its age so far, so a disk slow enough to finish less than once a window still shows. The broker
is *degraded* while any signal is slow.

The monitor decides nothing about roles: the report goes into every heartbeat, and the
controllers' leader, which sees every broker, decides whether a degraded master hands its role to
a healthy in-sync slave (controller/failover/gray.py). A disk that *hangs* is the watchdog's
(broker/stall_watch.py), which acts within a second.
"""

from __future__ import annotations

from dataclasses import dataclass

from autoswitch.base.ranges import RANGES
from autoswitch.base.slowness import WindowedSignal

SIGNALS = ("append", "fsync", "loop_lag")
# HealthThresholds field -> the BrokerConfig key that sets it
_CONFIG_KEYS = {"window_s": "health_window_s", "slow_append_ms": "slow_append_ms", "slow_fsync_ms": "slow_fsync_ms",
                "slow_loop_lag_ms": "slow_loop_lag_ms", "degrade_windows": "health_degrade_windows",
                "recover_windows": "health_recover_windows"}


@dataclass(frozen=True)
class HealthThresholds:
    window_s: float = 1.0
    slow_append_ms: float = 100.0
    slow_fsync_ms: float = 250.0
    slow_loop_lag_ms: float = 250.0
    degrade_windows: int = 5
    recover_windows: int = 10

    def validate(self) -> HealthThresholds:
        """The ranges of the broker's config keys these come from (autoswitch/base/ranges.py)."""
        ranges = RANGES["BrokerConfig"]
        for name, key in _CONFIG_KEYS.items():
            lo, hi = ranges[key]
            v = getattr(self, name)
            if not lo <= v <= hi:
                raise ValueError(f"{key} must be in [{lo}, {hi}], got {v}")
        return self

    def threshold_ms(self, signal: str) -> float:
        return {"append": self.slow_append_ms, "fsync": self.slow_fsync_ms,
                "loop_lag": self.slow_loop_lag_ms}[signal]


@dataclass(frozen=True)
class HealthReport:
    """What the heartbeats carry. Figures are the last closed window's (ms, -1 = no sample)."""

    reasons: tuple[str, ...] = ()          # the slow signals, e.g. ("fsync", "loop_lag")
    append_ms: float = -1.0
    fsync_ms: float = -1.0
    loop_lag_ms: float = -1.0

    @property
    def degraded(self) -> bool:
        return bool(self.reasons)

    def as_dict(self) -> dict[str, object]:
        return {"degraded": self.degraded, "reasons": list(self.reasons), "appendMs": round(self.append_ms, 1),
                "fsyncMs": round(self.fsync_ms, 1), "loopLagMs": round(self.loop_lag_ms, 1)}


class HealthMonitor:
    def __init__(self, config: HealthThresholds, now: float) -> None:
        self.config = config.validate()
        self._signals = {s: WindowedSignal(config.threshold_ms(s), config.degrade_windows, config.recover_windows)
                         for s in SIGNALS}
        self._window_end = now + config.window_s
        self.windows = 0
        self._changed: list[tuple[str, bool]] = []

    def sample(self, signal: str, ms: float, now: float) -> None:
        """One measured duration (ms) of ``signal`` that ended at ``now``."""
        self._roll(now)
        self._signals[signal].add(ms)

    def tick(self, now: float, in_flight: dict[str, float] | None = None) -> list[tuple[str, bool]]:
        """Close the windows that ended by ``now``. ``in_flight``: signal -> since when (monotonic
        s) an operation of it has been running. Returns each (signal, slow) that changed."""
        if in_flight and now >= self._window_end:
            for signal, since in in_flight.items():
                if since > 0:
                    self._signals[signal].add((now - since) * 1000.0)
        self._roll(now)
        changed, self._changed = self._changed, []
        return changed

    def _roll(self, now: float) -> None:
        """Close the windows that ended by ``now`` (a sample may close one too: the changes wait
        in ``_changed`` for the next tick)."""
        while now >= self._window_end:
            self.windows += 1
            self._changed += [(name, sig.slow) for name, sig in self._signals.items() if sig.close_window()]
            # a broker stopped for long (a paused VM) closes one window for the whole gap
            self._window_end = max(self._window_end + self.config.window_s, now - self.config.window_s / 2)

    @property
    def degraded(self) -> bool:
        return any(s.slow for s in self._signals.values())

    def report(self) -> HealthReport:
        sig = self._signals
        return HealthReport(tuple(n for n in SIGNALS if sig[n].slow), sig["append"].last_ms,
                            sig["fsync"].last_ms, sig["loop_lag"].last_ms)
