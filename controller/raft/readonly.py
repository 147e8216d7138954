"""Read-index requests (Raft thesis 6.4, etcd readOnly): a read is released at the commit index
the leader had when it asked, once a quorum acknowledged a heartbeat sent after the request (so
the leader was still the leader). Before the leader's first entry of its term commits, its commit
index may be stale: requests wait for that commit."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from .messages import ReadState


@dataclass(slots=True)
class PendingRead:
    ctx: object
    index: int      # commit index when the read was started
    seq: int        # heartbeat round that must be acknowledged by a quorum


class ReadOnly:
    def __init__(self) -> None:
        self.pending: deque[PendingRead] = deque()
        self.waiting_commit: list[object] = []

    def __len__(self) -> int:
        return len(self.pending) + len(self.waiting_commit)

    def wait_for_commit(self, ctx: object) -> None:
        self.waiting_commit.append(ctx)

    def take_waiting(self) -> list[object]:
        """The requests that waited for the leader's first commit (now they can start)."""
        waiting, self.waiting_commit = self.waiting_commit, []
        return waiting

    def add(self, ctx: object, index: int, seq: int) -> None:
        self.pending.append(PendingRead(ctx, index, seq))

    def release(self, quorum_acked: Callable[[int], bool]) -> list[ReadState]:
        """ReadStates for the oldest requests whose heartbeat round a quorum acknowledged."""
        out = []
        while self.pending and quorum_acked(self.pending[0].seq):
            r = self.pending.popleft()
            out.append(ReadState(r.ctx, r.index))
        return out

    def clear(self) -> None:
        self.pending.clear()
        self.waiting_commit.clear()
