"""WatchReplicaInfo subscribers: bounded queues per group; a slow subscriber is dropped, not waited for.

A dropped subscriber's stream ends; on reconnect it first receives the current ReplicaInfo, so
nothing is lost that matters (the latest view supersedes every earlier one). Brokers also poll
GetReplicaInfo every few seconds, as in RocketMQ, so a notification is a speed-up, never the only path.
"""

from __future__ import annotations

import asyncio
from typing import Any

from autoswitch.base.log import get_logger

_log = get_logger("controller.watchers")


class Watchers:
    def __init__(self, max_watchers: int, queue_size: int) -> None:
        assert max_watchers > 0 and queue_size > 0
        self.max_watchers = max_watchers
        self.queue_size = queue_size
        self._by_group: dict[str, set[asyncio.Queue]] = {}
        self._count = 0

    def __len__(self) -> int:
        return self._count

    def subscribe(self, group: str) -> asyncio.Queue | None:
        if self._count >= self.max_watchers:
            return None
        q: asyncio.Queue = asyncio.Queue(self.queue_size)
        self._by_group.setdefault(group, set()).add(q)
        self._count += 1
        return q

    def unsubscribe(self, group: str, q: asyncio.Queue) -> None:
        qs = self._by_group.get(group)
        if qs is not None and q in qs:
            qs.discard(q)
            self._count -= 1
            if not qs:
                del self._by_group[group]
        assert self._count >= 0

    def publish(self, group: str, item: Any) -> int:
        qs = self._by_group.get(group)
        if not qs:
            return 0
        for q in list(qs):
            try:
                q.put_nowait(item)
            except asyncio.QueueFull:
                # Leave room for the end marker: the subscriber re-subscribes and reads the current view.
                _log.warning("watcher_dropped_slow", group=group)
                while not q.empty():
                    q.get_nowait()
                q.put_nowait(None)
                self.unsubscribe(group, q)
        return len(qs)

    def close_all(self) -> None:
        for group, qs in list(self._by_group.items()):
            for q in list(qs):
                while not q.empty():
                    q.get_nowait()
                q.put_nowait(None)
                self.unsubscribe(group, q)
