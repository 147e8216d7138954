"""A broker watching itself (issue 32 part 2): the health monitor fed by every disk operation and
by the event-loop probe, and the watchdog thread that gives a stuck master's role up.

The probe runs on the loop every LOOP_PROBE_S: how late it woke is the loop-lag sample, the time
it ran is the watchdog's mark that the loop is alive (broker/stall_watch.py), and it closes the
health windows (broker/health.py). The health report goes into every heartbeat; nothing here
decides about roles but the watchdog's rule for a loop or disk that does not return.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from autoswitch.broker.health import SIGNALS, HealthMonitor, HealthReport, HealthThresholds
from autoswitch.broker.stall_watch import IoWatch, StallFacts, StallWatchdog

from autoswitch.base.crashpoints import crash_point
from autoswitch.base.waits import cancel_and_wait

if TYPE_CHECKING:
    from autoswitch.broker.config import BrokerConfig

LOOP_PROBE_S = 0.1              # the event-loop probe's period (loop lag, the watchdog's mark)


class WatchedLog:
    """The store as a slave's HA session writes it: each append of replicated data and each fsync
    marked like the master's own (the watchdog sees a hung slave disk, the health monitor a slow
    one, so a slow slave reports itself degraded and is never chosen to take over). Everything
    else is the store's."""

    def __init__(self, store: Any, io: IoWatch) -> None:
        self._store = store
        self._io = io

    def append_raw(self, offset: int, data: bytes | memoryview, epoch: int, epoch_start: int) -> int:
        self._io.begin("append")
        try:
            return int(self._store.append_raw(offset, data, epoch, epoch_start))
        finally:
            self._io.end()

    def flush(self) -> None:
        self._io.begin("fsync")
        try:
            self._store.flush()
        finally:
            self._io.end()

    def sync_log(self) -> None:
        self._io.begin("fsync")
        try:
            self._store.sync_log()
        finally:
            self._io.end()

    @property
    def synced_offset(self) -> int:
        return int(self._store.synced_offset)

    @property
    def confirm_offset(self) -> int:
        return int(self._store.confirm_offset)

    @confirm_offset.setter
    def confirm_offset(self, value: int) -> None:
        self._store.confirm_offset = value

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


class SelfWatch:
    def __init__(self, cfg: BrokerConfig, facts: Callable[[float], StallFacts], log: Callable[[], Any]) -> None:
        """``facts``: the watchdog's reading of the broker (from its thread); ``log``: the logger
        to use now (the broker's carries its brokerId and MasterEpoch)."""
        self.health = HealthMonitor(HealthThresholds(
            cfg.health_window_s, cfg.slow_append_ms, cfg.slow_fsync_ms, cfg.slow_loop_lag_ms,
            cfg.health_degrade_windows, cfg.health_recover_windows), time.monotonic())
        self.io = IoWatch(sink=self.health.sample)
        # the group commit's own thread (write_path.GroupFlusher): its fdatasync, beside the loop's work
        self.sync_io = IoWatch(sink=self.health.sample)
        self.watchdog = StallWatchdog(facts, cfg.disk_stall_timeout_ms / 1000, cfg.disk_stall_cooldown_s, log,
                                      loop_timeout_s=cfg.loop_stall_timeout_ms / 1000)
        self._log = log
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._probe(), name="loop-probe")
        self.watchdog.start()

    async def stop(self) -> None:
        self.watchdog.stop()
        await cancel_and_wait([self._task])

    def report(self) -> HealthReport:
        return self.health.report()

    async def _probe(self) -> None:
        w = self.io
        while True:
            t0 = time.monotonic()
            w.loop_at = t0
            crash_point("broker.loop_probe")     # tests freeze the loop's thread here (tests/crash_run.py)
            await asyncio.sleep(LOOP_PROBE_S)
            now = time.monotonic()
            self.health.sample("loop_lag", max(0.0, now - t0 - LOOP_PROBE_S) * 1000.0, now)
            since = w.since
            for signal, slow in self.health.tick(now, {w.op: since} if since > 0 and w.op in SIGNALS else None):
                r = self.health.report()
                log = self._log()
                (log.warning if slow else log.info)(
                    "broker_health_changed", signal=signal, slow=slow, degraded=r.degraded,
                    appendMs=round(r.append_ms, 1), fsyncMs=round(r.fsync_ms, 1), loopLagMs=round(r.loop_lag_ms, 1))
