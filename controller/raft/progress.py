"""The leader's view of each follower (etcd tracker.Progress): where its log matches, what to send
next, and the flow-control state that decides how much may be in flight."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field


class ProgressState:
    PROBE = "probe"            # one append at a time until the match point is found
    REPLICATE = "replicate"    # pipelined appends, up to max_inflight
    SNAPSHOT = "snapshot"      # sending InstallSnapshot chunks


@dataclass(slots=True)
class Progress:
    match: int = 0
    next: int = 1
    state: str = ProgressState.PROBE
    paused: bool = False
    inflight: deque[int] = field(default_factory=deque)    # last index of each AppendEntries in flight
    last_ack_ms: int = 0
    hb_acked: int = 0          # highest heartbeat seq acknowledged (read-index)
    snap_index: int = 0
    snap_offset: int = 0
    snap_sent_ms: int = 0

    def become_probe(self) -> None:
        self.state = ProgressState.PROBE
        self.inflight.clear()

    def become_replicate(self) -> None:
        self.state = ProgressState.REPLICATE
        self.next = self.match + 1
        self.inflight.clear()

    def become_snapshot(self, snap_index: int) -> None:
        self.state = ProgressState.SNAPSHOT
        self.snap_index = snap_index
        self.snap_offset = 0
        self.inflight.clear()

    def acked(self, index: int) -> None:
        """An AppendEntries up to ``index`` was accepted."""
        if index > self.match:
            self.match = index
        self.next = max(self.next, self.match + 1)
        while self.inflight and self.inflight[0] <= index:
            self.inflight.popleft()
