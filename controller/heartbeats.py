"""Node-local broker heartbeat table: what THIS controller node has heard, by its own clock.

A controller's opinion "broker X is dead" is formed only from its own receipt times (DESIGN-NOTES 7,
"How 1 and 2 fit together"): alive while ``last_receipt + timeout >= now``. The leader combines
the opinions of a majority of nodes (QueryLiveness) before declaring a master dead. Sans-IO:
``now`` is always passed in.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class BeatInfo:
    received_at: float
    timeout_s: float
    address: str
    epoch: int
    max_offset: int
    confirm_offset: int
    election_priority: int
    clean_shutdown: bool   # this incarnation started after a clean shutdown (log intact)


class HeartbeatTable:
    def __init__(self, default_timeout_s: float, max_entries: int = 1_000_000) -> None:
        assert default_timeout_s > 0 and max_entries > 0
        self.default_timeout_s = default_timeout_s
        self.max_entries = max_entries
        self._beats: dict[tuple[str, int], BeatInfo] = {}

    def __len__(self) -> int:
        return len(self._beats)

    def record(self, group: str, broker_id: int, info: BeatInfo) -> bool:
        key = (group, broker_id)
        if key not in self._beats and len(self._beats) >= self.max_entries:
            return False
        self._beats[key] = info
        return True

    def get(self, group: str, broker_id: int) -> BeatInfo | None:
        return self._beats.get((group, broker_id))

    def timeout_for(self, b: BeatInfo) -> float:
        return b.timeout_s if b.timeout_s > 0 else self.default_timeout_s

    def is_alive(self, group: str, broker_id: int, now: float) -> bool:
        b = self._beats.get((group, broker_id))
        return b is not None and b.received_at + self.timeout_for(b) >= now

    def opinion(self, group: str, broker_id: int, now: float) -> tuple[bool, int]:
        """(alive, ms since last receipt or -1 if never heard)."""
        b = self._beats.get((group, broker_id))
        if b is None:
            return False, -1
        return self.is_alive(group, broker_id, now), int(max(0.0, now - b.received_at) * 1000)

    def forget(self, group: str, broker_ids: list[int] | None = None) -> None:
        if broker_ids is None:
            for k in [k for k in self._beats if k[0] == group]:
                del self._beats[k]
        else:
            for b in broker_ids:
                self._beats.pop((group, b), None)

    def expire(self, now: float, keep_s: float) -> int:
        """Drop entries not heard from for keep_s (far beyond the timeout) to bound memory."""
        dead = [k for k, b in self._beats.items() if b.received_at + keep_s < now]
        for k in dead:
            del self._beats[k]
        return len(dead)
