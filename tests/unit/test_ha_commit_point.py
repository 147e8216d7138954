"""The commit point: live follows the in-sync replicas; while fenced the value holds where it was
when the fence went up, and moves on when it clears."""

from __future__ import annotations

from autoswitch.ha.commit_point import CommitPoint
from autoswitch.ha.config import HAConfig
from autoswitch.ha.sync_state import SyncStateTracker


def _tracker(sss: frozenset[int]) -> SyncStateTracker:
    t = SyncStateTracker(1, 1, sss, 1, HAConfig(), now=0.0)
    for b in sss - {1}:
        t.on_connect(b, async_learner=False, now=0.0)
    return t


def test_holds_while_fenced_and_moves_on_after():
    t = _tracker(frozenset({1, 2}))
    fence = {"up": False}
    cp = CommitPoint(t, lambda: fence["up"])
    t.on_ack(2, 100, 0.1, 300)
    assert cp.value(300) == 100
    fence["up"] = True
    cp.freeze(300)                 # the broker's lease ran out now
    t.on_ack(2, 300, 0.2, 300)     # the slave keeps acking while the master is fenced
    assert cp.live(300) == 300 and cp.value(300) == 100 and cp.frozen
    fence["up"] = False
    assert cp.value(300) == 300 and not cp.frozen


def test_freeze_happens_at_the_first_read_when_nobody_froze_it():
    t = _tracker(frozenset({1, 2}))
    cp = CommitPoint(t, lambda: True)
    t.on_ack(2, 40, 0.1, 100)
    assert cp.value(100) == 40
    t.on_ack(2, 100, 0.2, 100)
    assert cp.value(100) == 40


def test_never_above_the_log_end():
    cp = CommitPoint(_tracker(frozenset({1})), lambda: True)
    assert cp.value(50) == 50
    assert cp.value(20) == 20      # a truncated log end bounds the held value too
