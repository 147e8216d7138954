"""One retry back-off for every loop: exponential from ``min_s`` to ``max_s``, optionally jittered.

A pure value (no sleeping, no clock): adapters sleep ``next()`` seconds, sans-IO cores add it to the
time they were given. Jitter draws the delay from [50 %, 100 %] of the exponential step, so many
clients that failed together do not retry together.
"""

from __future__ import annotations

import random
from collections.abc import Callable


class Backoff:
    __slots__ = ("min_s", "max_s", "_rand", "attempt")

    def __init__(self, min_s: float, max_s: float, *, jitter: bool = True,
                 rand: Callable[[], float] | None = None) -> None:
        if not 0 < min_s <= max_s:
            raise ValueError(f"need 0 < min_s <= max_s, got {min_s}, {max_s}")
        self.min_s, self.max_s = min_s, max_s
        self._rand = (rand or random.random) if jitter else None
        self.attempt = 0

    def next(self) -> float:
        """The delay before the next attempt; each call doubles the step, up to ``max_s``."""
        step = min(self.max_s, self.min_s * (2 ** min(self.attempt, 60)))
        self.attempt += 1
        return step if self._rand is None else step * (0.5 + 0.5 * self._rand())

    def reset(self) -> None:
        """After a success: the next failure starts again at ``min_s``."""
        self.attempt = 0
