"""The alarms: which of the leader's alerts still stand (etcdctl alarm list; `admin alarm-list`).

An alert is a moment (controller/server/alerts.py); an alarm is its condition while it lasts. An
alarm about a group stands until a master is elected for that group at a higher MasterEpoch than
the alarm's (every alert kind about a group carries the epoch it was raised at: a crashed or
missing master, a disagreement or refused lease about the master of that epoch, a setting or a
log found wrong while it ruled); ``cluster_degraded`` stands until the leader sees its onset end.
``master_elected`` is the clearing event, never an alarm. The same kind raised again for the same
group counts on the standing alarm (first and last time, how often, the last detail).

Pure and bounded: ``MAX_STANDING`` standing alarms (the oldest is dropped, and counted), the last
``MAX_CLEARED`` cleared ones kept for `--all`.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass, field, replace
from typing import Any

MAX_STANDING = 10_000
MAX_CLEARED = 200
CLEARING_KIND = "master_elected"


@dataclass(frozen=True)
class Alarm:
    kind: str
    group: str
    epoch: int | None            # the MasterEpoch it was (last) raised at; None: not about one
    first_ms: int
    last_ms: int
    count: int
    detail: dict[str, Any] = field(default_factory=dict)
    cleared_ms: int | None = None
    cleared_by: str = ""         # what ended it ("master 2 elected at MasterEpoch 5", "ended")


class AlarmBook:
    def __init__(self) -> None:
        self._standing: dict[tuple[str, str], Alarm] = {}
        self._cleared: collections.deque[Alarm] = collections.deque(maxlen=MAX_CLEARED)
        self.dropped = 0

    def raised(self, kind: str, group: str, ts_ms: int, detail: dict[str, Any]) -> None:
        """An alert was emitted."""
        epoch = detail.get("epoch")
        epoch = epoch if isinstance(epoch, int) and not isinstance(epoch, bool) else None
        if kind == CLEARING_KIND:
            if epoch is not None:
                self.elected(group, epoch, ts_ms, detail.get("master"))
            return
        key = (kind, group)
        old = self._standing.get(key)
        if old is not None:
            newest = old.epoch if epoch is None else max(epoch, old.epoch or 0)
            self._standing[key] = replace(old, last_ms=max(old.last_ms, ts_ms), count=old.count + 1,
                                          detail=dict(detail), epoch=newest)
            return
        if len(self._standing) >= MAX_STANDING:
            oldest = min(self._standing, key=lambda k: self._standing[k].last_ms)
            del self._standing[oldest]
            self.dropped += 1
        self._standing[key] = Alarm(kind, group, epoch, ts_ms, ts_ms, 1, dict(detail))

    def elected(self, group: str, epoch: int, ts_ms: int, master: Any = None) -> None:
        """A master was elected for ``group`` at ``epoch``: the group's alarms of earlier epochs end."""
        why = f"master {master} elected at MasterEpoch {epoch}" if master else f"a master elected at MasterEpoch {epoch}"
        for key, a in list(self._standing.items()):
            if a.group == group and a.epoch is not None and a.epoch < epoch:
                self._clear(key, ts_ms, why)

    def resolved(self, kind: str, group: str, ts_ms: int, why: str) -> None:
        """The condition of an alarm without a MasterEpoch ended (``cluster_degraded``)."""
        if (kind, group) in self._standing:
            self._clear((kind, group), ts_ms, why)

    def _clear(self, key: tuple[str, str], ts_ms: int, why: str) -> None:
        a = self._standing.pop(key)
        self._cleared.append(replace(a, cleared_ms=max(ts_ms, a.last_ms), cleared_by=why))

    def standing(self) -> list[Alarm]:
        """Standing alarms, oldest first."""
        return sorted(self._standing.values(), key=lambda a: (a.first_ms, a.kind, a.group))

    def cleared(self) -> list[Alarm]:
        """The last cleared ones, oldest first."""
        return list(self._cleared)
