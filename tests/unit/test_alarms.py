"""Which alerts still stand (controller/server/alarms.py; `admin alarm-list`)."""

from __future__ import annotations

from autoswitch.controller.server import alarms
from autoswitch.controller.server.alarms import AlarmBook


def test_a_groups_alarms_stand_until_a_master_is_elected_above_their_epoch():
    b = AlarmBook()
    b.raised("master_crashed", "g1", 100, {"master": 1, "epoch": 3})
    b.raised("no_master", "g1", 200, {"epoch": 4, "reason": "no_candidate"})
    b.raised("liveness_disagreement", "g2", 150, {"master": 2, "epoch": 7})
    assert [(a.kind, a.group) for a in b.standing()] == [
        ("master_crashed", "g1"), ("liveness_disagreement", "g2"), ("no_master", "g1")]
    b.raised("master_elected", "g1", 300, {"master": 2, "epoch": 4})     # not above no_master's epoch
    assert {a.kind for a in b.standing()} == {"no_master", "liveness_disagreement"}
    assert b.cleared()[0].cleared_by == "master 2 elected at MasterEpoch 4"
    b.elected("g1", 5, 400, 3)
    assert [a.kind for a in b.standing()] == ["liveness_disagreement"]     # another group's stands
    assert [a.kind for a in b.cleared()] == ["master_crashed", "no_master"]


def test_the_same_alarm_raised_again_counts_and_master_elected_is_no_alarm():
    b = AlarmBook()
    for ts in (10, 20, 30):
        b.raised("settings_mismatch", "g1", ts, {"epoch": 2, "brokerId": ts})
    b.raised("master_elected", "g1", 5, {"master": 1, "epoch": 2})
    [a] = b.standing()
    assert (a.first_ms, a.last_ms, a.count, a.detail["brokerId"]) == (10, 30, 3, 30)
    b.raised("cluster_degraded", "*", 40, {"degraded_groups": ["g1"]})
    b.elected("g9", 99, 50)                         # not about a MasterEpoch: an election ends nothing
    assert len(b.standing()) == 2
    b.resolved("cluster_degraded", "*", 60, "ended")
    assert [a.kind for a in b.standing()] == ["settings_mismatch"] and b.cleared()[-1].cleared_by == "ended"


def test_the_book_is_bounded(monkeypatch):
    monkeypatch.setattr(alarms, "MAX_STANDING", 3)
    b = AlarmBook()
    for i in range(5):
        b.raised("no_master", f"g{i}", i, {"epoch": 1})
    assert [a.group for a in b.standing()] == ["g2", "g3", "g4"] and b.dropped == 2
