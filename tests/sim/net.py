"""Seeded message network for the simulator: drop, duplicate, delay, reorder, partitions.

Datagram semantics (Raft, controller RPCs, heartbeats): every message independently may be
dropped or duplicated and gets its own random delay, so messages reorder. HA links are TCP-like
and live in ``data_sim`` (in order; a loss breaks the connection).
"""

from __future__ import annotations

import heapq
import random
from dataclasses import dataclass
from typing import Any


@dataclass
class NetFaults:
    drop: float = 0.0            # probability a message is lost
    dup: float = 0.0             # probability a message is delivered twice
    delay_ms: tuple[int, int] = (1, 5)
    slow: float = 0.0            # probability of a long delay (reordering far behind)
    slow_ms: tuple[int, int] = (50, 400)


MAX_QUEUE = 200_000              # a limit on everything: a run that floods the network is a bug


class Network:
    def __init__(self, rng: random.Random, faults: NetFaults | None = None) -> None:
        self.rng = rng
        self.faults = faults or NetFaults()
        self.blocked: set[tuple[str, str]] = set()
        self._q: list[tuple[int, int, str, str, Any]] = []
        self._seq = 0
        self.sent = 0
        self.dropped = 0
        self.duplicated = 0

    # ------------------------------------------------------------------ partitions
    def partition(self, side_a: set[str], everyone: set[str]) -> None:
        """Cut every link between side_a and the rest (both directions)."""
        for a in side_a:
            for b in everyone - side_a:
                self.blocked |= {(a, b), (b, a)}

    def cut_one_way(self, a: str, b: str) -> None:
        self.blocked.add((a, b))

    def heal(self) -> None:
        self.blocked.clear()

    def reachable(self, a: str, b: str) -> bool:
        return a == b or (a, b) not in self.blocked

    # ------------------------------------------------------------------ traffic
    def _delay(self) -> int:
        f = self.faults
        if f.slow and self.rng.random() < f.slow:
            return self.rng.randint(*f.slow_ms)
        return self.rng.randint(*f.delay_ms)

    def send(self, now: int, frm: str, to: str, msg: Any) -> None:
        self.sent += 1
        if (frm, to) in self.blocked:
            return
        f = self.faults
        if f.drop and self.rng.random() < f.drop:
            self.dropped += 1
            return
        copies = 2 if f.dup and self.rng.random() < f.dup else 1
        self.duplicated += copies - 1
        for _ in range(copies):
            self._seq += 1
            heapq.heappush(self._q, (now + self._delay(), self._seq, frm, to, msg))
        assert len(self._q) <= MAX_QUEUE, "network queue overflow"

    def due(self, now: int) -> list[tuple[str, str, Any]]:
        """Messages whose delivery time has come, in delivery order; a partition that started
        while a message was in flight also drops it."""
        out = []
        while self._q and self._q[0][0] <= now:
            _, _, frm, to, msg = heapq.heappop(self._q)
            if (frm, to) in self.blocked:
                continue
            out.append((frm, to, msg))
        return out

    def clear(self) -> None:
        self._q.clear()


@dataclass
class Clock:
    """A node's local clock: rate drift and offset relative to true virtual time."""

    rate: float = 1.0
    offset: int = 0

    def local(self, now: int) -> int:
        return self.offset + int(now * self.rate)
