"""A broker's traffic: messages acknowledged (produce) and served (consume) per second over the
last ``WINDOW_S`` seconds, in all and per topic (mqadmin brokerStatus / statsAll, the TPS of
clusterList). Heartbeats carry it to the controllers, so `admin cluster-list` and the status page
show it (docs/operations.md "Traffic").

Pure, the clock passed in: one bucket per second, the last ``WINDOW_S`` kept; a rate divides by
the whole window once the meter has run that long, by its age before. Bounded: at most
``MAX_TOPICS_PER_BUCKET`` topics per bucket (the rest count in the totals only).
"""

from __future__ import annotations

import collections
from dataclasses import dataclass

WINDOW_S = 10
MAX_TOPICS_PER_BUCKET = 2_000
TOP_TOPICS = 16         # the busiest topics a report names (MAX_TOPIC_RATES on the controllers)


@dataclass(frozen=True)
class Rates:
    produce_per_s: float
    consume_per_s: float
    topics: tuple[tuple[str, float, float], ...]     # (topic, produce/s, consume/s), busiest first


class TrafficMeter:
    def __init__(self, now_ms: int) -> None:
        self._started_s = now_ms // 1000
        # (second, {"produce"|"consume": total}, {topic: [produce, consume]})
        self._buckets: collections.deque[tuple[int, list[int], dict[str, list[int]]]] = collections.deque()

    def count(self, kind: int, topic: str, n: int, now_ms: int) -> None:
        """``kind``: 0 produce, 1 consume; ``n`` messages now."""
        sec = now_ms // 1000
        if not self._buckets or self._buckets[-1][0] < sec:
            self._buckets.append((sec, [0, 0], {}))
            self._drop_before(sec - WINDOW_S + 1)
        _, totals, topics = self._buckets[-1]
        totals[kind] += n
        per = topics.get(topic)
        if per is None:
            if len(topics) >= MAX_TOPICS_PER_BUCKET:
                return
            per = topics[topic] = [0, 0]
        per[kind] += n

    def rates(self, now_ms: int) -> Rates:
        sec = now_ms // 1000
        self._drop_before(sec - WINDOW_S + 1)
        span = max(1, min(WINDOW_S, sec - self._started_s + 1))
        totals = [0, 0]
        per: dict[str, list[int]] = {}
        for _, t, topics in self._buckets:
            totals[0] += t[0]
            totals[1] += t[1]
            for name, (p, c) in topics.items():
                acc = per.setdefault(name, [0, 0])
                acc[0] += p
                acc[1] += c
        busiest = sorted(per.items(), key=lambda kv: (-(kv[1][0] + kv[1][1]), kv[0]))[:TOP_TOPICS]
        return Rates(round(totals[0] / span, 1), round(totals[1] / span, 1),
                     tuple((name, round(p / span, 1), round(c / span, 1)) for name, (p, c) in busiest))

    def _drop_before(self, first_kept_s: int) -> None:
        while self._buckets and self._buckets[0][0] < first_kept_s:
            self._buckets.popleft()
