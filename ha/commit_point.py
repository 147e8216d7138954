"""The one owner of a master's confirmOffset (RocketMQ's commit point): what consumers may read,
what slaves are told in transfer frames, what heartbeats report and what the store persists.

The SyncStateSet tracker says how far the in-sync replicas hold the log (``live``). While the
master is fenced -- its lease ran out or a newer MasterEpoch is known -- the value stays where it
was when the fence went up: a message a new master may lack must never become readable, here or
on a slave. Pure: the fence is a predicate the broker supplies, the log end is passed in.
"""

from __future__ import annotations

from collections.abc import Callable

from autoswitch.ha.sync_state import SyncStateTracker


class CommitPoint:
    def __init__(self, tracker: SyncStateTracker, fenced: Callable[[], bool] | None = None) -> None:
        self._tracker = tracker
        self._fenced = fenced or (lambda: False)
        self._frozen: int | None = None

    def live(self, master_max: int) -> int:
        """How far the in-sync replicas hold the log, fence or not (never moves backwards)."""
        return min(self._tracker.confirm_offset(master_max), master_max)

    def freeze(self, master_max: int) -> None:
        """The fence went up now: hold the current value (a later freeze keeps the first)."""
        if self._frozen is None:
            self._frozen = self.live(master_max)

    @property
    def frozen(self) -> bool:
        return self._frozen is not None

    def value(self, master_max: int) -> int:
        """The confirmOffset everyone outside the tracker sees."""
        if not self._fenced():
            self._frozen = None
            return self.live(master_max)
        self.freeze(master_max)
        assert self._frozen is not None
        return min(self._frozen, master_max)
