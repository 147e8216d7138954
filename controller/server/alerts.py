"""Operator alerts, Redis Sentinel style: the controller leader runs a ``notification_script`` for
every alert (time-limited, never waited for) and publishes the same alerts on the
``WatchAlerts`` gRPC stream.

Alerts (all from the leader, so each happens once): ``master_elected`` and ``no_master`` (an
applied election, with its trigger and kind), ``master_crashed`` (a master's sessions closed:
crash-fast failover starts), ``liveness_disagreement`` (the leader does not hear a master but no
majority holds it dead: an asymmetric partition or a freeze in progress), ``master_heard_by_minority``
(the reverse: a majority holds the master dead and it is failed over, but some controller still
hears it: a partition, or brokers that heartbeat to too few controllers), ``master_lease_refused``
(the master heartbeats but the leader holds its lease grants after a DEAD report: it is about to
fence itself, the "fenced master" alert), ``settings_mismatch`` (a broker states a
min_in_sync_replicas other than the controllers': the smaller decides, so it costs availability,
but the operator should make them agree), ``log_regressed`` (a replica reports a log below what it
stated it held durably: a backup restored in place, a rolled-back disk or VM snapshot, a file
system that lied about fsync; it is no clean candidate until it is past that point again).

The script is called as ``SCRIPT KIND GROUP JSON`` (JSON: the whole alert); its output is
discarded, a non-zero exit and a timeout are logged. At most ``max_alerts_in_flight`` scripts run
at once; more alerts are dropped for the script (counted, logged) but still published.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
from dataclasses import asdict, dataclass, field

from autoswitch.controller.server.alarms import AlarmBook
from autoswitch.controller.server.watchers import Watchers

from autoswitch.base.log import get_logger
from autoswitch.base.waits import cancel_and_wait

ALL = "*"           # the Watchers key every alert is published under
KINDS = ("master_elected", "no_master", "master_crashed", "liveness_disagreement", "master_heard_by_minority",
         "master_lease_refused", "settings_mismatch", "gray_failover", "cluster_degraded", "log_regressed")
MAX_DETAIL_CHARS = 2000
MAX_ONCE_KEYS = 10_000


@dataclass(frozen=True)
class Alert:
    kind: str
    group: str
    ts_ms: int
    node_id: str
    detail: dict = field(default_factory=dict)

    def to_json(self) -> str:
        text = json.dumps(asdict(self), sort_keys=True, separators=(",", ":"))
        return text if len(text) <= MAX_DETAIL_CHARS else json.dumps(
            {**asdict(self), "detail": {"truncated": True}}, sort_keys=True, separators=(",", ":"))


class Alerter:
    def __init__(self, node_id: str, script: str, timeout_s: float, max_in_flight: int, watchers: Watchers) -> None:
        self.node_id = node_id
        self.script = script
        self.timeout_s = timeout_s
        self.max_in_flight = max_in_flight
        self.watchers = watchers
        self.in_flight: set[asyncio.Task] = set()
        self.sent = 0
        self.dropped = 0
        self.failed = 0
        self._once: set[tuple[str, str, int]] = set()   # (kind, group, MasterEpoch) already alerted
        self.alarms = AlarmBook()                          # which alerts still stand (`admin alarm-list`)
        self._log = get_logger("controller.alerts", node=node_id)

    def emit(self, kind: str, group: str, ts_ms: int, **detail: object) -> Alert:
        assert kind in KINDS, kind
        alert = Alert(kind, group, ts_ms, self.node_id, dict(detail))
        self._log.warning("alert", kind=kind, group=group, **{k: v for k, v in detail.items() if k != "group"})
        self.alarms.raised(kind, group, ts_ms, alert.detail)
        self.watchers.publish(ALL, alert)
        if self.script:
            if len(self.in_flight) >= self.max_in_flight:
                self.dropped += 1
                self._log.warning("alert_script_dropped", kind=kind, group=group, in_flight=len(self.in_flight))
            else:
                t = asyncio.get_running_loop().create_task(self._run(alert))
                self.in_flight.add(t)
                t.add_done_callback(self.in_flight.discard)
        return alert

    def emit_once(self, kind: str, group: str, epoch: int, ts_ms: int, **detail: object) -> Alert | None:
        """``emit`` at most once per (kind, group, MasterEpoch): for conditions that stay true
        across scans or heartbeats. The memory is bounded (forgotten wholesale when full)."""
        key = (kind, group, epoch)
        if key in self._once:
            return None
        if len(self._once) >= MAX_ONCE_KEYS:
            self._once.clear()
        self._once.add(key)
        return self.emit(kind, group, ts_ms, epoch=epoch, **detail)

    async def _run(self, alert: Alert) -> None:
        try:
            proc = await asyncio.create_subprocess_exec(
                self.script, alert.kind, alert.group, alert.to_json(), stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
        except OSError as e:
            self.failed += 1
            self._log.error("alert_script_failed", kind=alert.kind, group=alert.group, error=e.strerror)
            return
        try:
            _, err = await asyncio.wait_for(proc.communicate(), self.timeout_s)
        except TimeoutError:
            self.failed += 1
            self._kill(proc)
            with contextlib.suppress(Exception):        # reap it and close its pipe
                await asyncio.wait_for(proc.communicate(), 5)
            self._log.error("alert_script_timeout", kind=alert.kind, group=alert.group, timeout_s=self.timeout_s,
                            pid=proc.pid)
            return
        except asyncio.CancelledError:
            self._kill(proc)
            raise
        if proc.returncode != 0:
            self.failed += 1
            self._log.error("alert_script_exit", kind=alert.kind, group=alert.group, code=proc.returncode,
                            stderr=(err or b"")[-500:].decode(errors="replace"))
        else:
            self.sent += 1

    @staticmethod
    def _kill(proc: asyncio.subprocess.Process) -> None:
        """The script's whole process group (it ran in a session of its own): a shell script's
        children would otherwise keep running, and keep its pipe open."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)

    async def close(self) -> None:
        await cancel_and_wait(list(self.in_flight), timeout_s=5)
