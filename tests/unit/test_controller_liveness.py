"""Liveness: heartbeat tables per controller node, the majority rule, lease holds, the scan."""

from __future__ import annotations

import pytest
from autoswitch.controller.codes import Code
from autoswitch.controller.failover.liveness import (
    NEVER_REPORTED,
    BrokerReport,
    HeartbeatTable,
    LivenessView,
    MasterRef,
    NodeOpinion,
    Opinion,
    ScanPlanner,
    combine,
)
from autoswitch.controller.messages import TRIGGER_CONTROLLER, encode_request

from tests.unit.test_controller_sm_ops import C, G, group_with_master

T = 10_000   # heartbeat timeout, ms


def rep(bid: int, max_offset: int = 1000) -> BrokerReport:
    return BrokerReport(bid, f"127.0.0.1:{9000 + bid}", epoch=1, max_offset=max_offset)


class Cluster:
    """Three controller nodes, each with its own clock offset and table; brokers send to each."""

    def __init__(self, n: int = 3) -> None:
        self.offsets = {f"n{i}": i * 7_919 for i in range(n)}   # unrelated clocks
        self.tables = {nid: HeartbeatTable(started_ms=off, timeout_ms=T) for nid, off in self.offsets.items()}

    def beat(self, now: int, bid: int, to: tuple[str, ...] | None = None, max_offset: int = 1000) -> None:
        for nid, t in self.tables.items():
            if to is None or nid in to:
                t.record(G, rep(bid, max_offset), now + self.offsets[nid])

    def view(self, now: int, ids=(1, 2, 3), asked=None) -> LivenessView:
        asked = asked or tuple(self.tables)
        by_node = {nid: {(G, b): self.tables[nid].report_opinion(G, b, now + self.offsets[nid]) for b in ids}
                   for nid in asked}
        return LivenessView.from_opinions(len(self.tables), by_node)


def test_alive_boundary_is_last_update_plus_timeout():
    t = HeartbeatTable(started_ms=0, timeout_ms=T)
    t.record(G, rep(1), 50_000)
    assert t.alive(G, 1, 50_000 + T)
    assert not t.alive(G, 1, 50_000 + T + 1)
    assert not t.alive(G, 2, 50_000)


def test_fresh_node_has_no_opinion_until_it_listened_a_whole_timeout():
    t = HeartbeatTable(started_ms=1_000, timeout_ms=T)
    assert t.opinion(G, 1, 1_000 + T - 1).opinion is Opinion.UNKNOWN
    assert t.opinion(G, 1, 1_000 + T).opinion is Opinion.DEAD
    t.record(G, rep(1), 2_000)
    assert t.opinion(G, 1, 3_000).opinion is Opinion.ALIVE


def test_majority_rule():
    dead, alive, unk = (NodeOpinion(Opinion.DEAD), NodeOpinion(Opinion.ALIVE, 5, rep(1)),
                        NodeOpinion(Opinion.UNKNOWN))
    assert combine(3, [dead, dead]).dead
    assert not combine(3, [dead, unk, alive]).dead
    assert not combine(3, [dead]).dead                 # unanswered nodes never count as dead
    assert not combine(5, [dead, dead, alive, alive]).dead
    assert combine(5, [dead, dead, dead]).dead
    assert combine(3, [alive, alive, dead]).alive
    v = combine(3, [NodeOpinion(Opinion.ALIVE, 900, rep(1, 5)), NodeOpinion(Opinion.ALIVE, 10, rep(1, 7))])
    assert v.report.max_offset == 7                    # freshest report wins


def test_asymmetric_partition_one_controller_misses_the_master_no_election():
    c = Cluster()
    planner = ScanPlanner(interval_ms=5_000)
    masters = [MasterRef("c", G, 1, 1)]
    for now in range(0, 60_000, 1_000):
        c.beat(now, 1, to=("n1", "n2"))                # n0 (the leader) cannot hear master 1
        c.beat(now, 2)
        c.beat(now, 3)
    now = 60_000
    suspects = planner.suspects(masters, c.tables["n0"], now + c.offsets["n0"])
    assert suspects == [(G, 1)], "the leader itself suspects the master"
    view = c.view(now)
    assert not view.is_dead(G, 1) and view.is_alive(G, 1)
    assert planner.plan(masters, view, now) == []


def test_majority_misses_master_election_planned_and_applied():
    c = Cluster()
    planner = ScanPlanner(interval_ms=5_000)
    h = group_with_master()
    m = h.view()
    masters = [MasterRef(C, G, m.master_broker_id, m.master_epoch)]
    for now in range(0, 20_000, 1_000):
        c.beat(now, 1, to=("n2",) if now >= 5_000 else None)   # master reaches only n2 after 5 s
        c.beat(now, 2, max_offset=900)
        c.beat(now, 3, max_offset=1000)
    now = 20_000
    view = c.view(now)
    assert view.is_dead(G, 1)
    reqs = planner.plan(masters, view, now)
    assert len(reqs) == 1 and reqs[0].trigger == TRIGGER_CONTROLLER and 1 in reqs[0].dead_broker_ids
    assert [a.broker_id for a in reqs[0].alive] == [2, 3]
    h.index += 1
    r = h.sm.apply(h.index, encode_request(reqs[0]))
    assert r.ok and r.replica.master_broker_id == 3 and r.replica.master_epoch == m.master_epoch + 1


def test_lease_hold_after_reporting_dead():
    t = HeartbeatTable(started_ms=0, timeout_ms=T, hold_ms=3 * T)
    t.record(G, rep(1), 100_000)
    now = 100_000 + T + 1
    assert t.grants_lease(G, 1, 1, 1, 100_000)
    assert t.report_opinion(G, 1, now).opinion is Opinion.DEAD
    t.record(G, rep(1), now + 10)                      # the master's heartbeats get through again
    assert not t.grants_lease(G, 1, 1, 1, now + 20), "no grant while holding a DEAD report"
    # What it sees is ALIVE again (electable), and that answer does not re-arm the hold.
    assert t.report_opinion(G, 1, now + 20).opinion is Opinion.ALIVE
    assert not t.grants_lease(G, 1, 1, 1, now + 3 * T - 1)
    t.release(G)                                       # this node applied a newer MasterEpoch
    assert t.grants_lease(G, 1, 2, 2, now + 30)
    assert not t.grants_lease(G, 1, 1, 2, now + 30), "a deposed epoch gets no lease"


def test_lease_hold_ends_after_hold_time_only_if_broker_is_heard_again():
    t = HeartbeatTable(started_ms=0, timeout_ms=T, hold_ms=3 * T)
    t.record(G, rep(1), 100_000)
    reported = 100_000 + T + 1
    t.report_opinion(G, 1, reported)
    assert not t.grants_lease(G, 1, 1, 1, reported + 3 * T)     # hold over, but broker still silent
    t.record(G, rep(1), reported + 3 * T + 5)
    assert t.grants_lease(G, 1, 1, 1, reported + 3 * T + 6)


def test_restarted_node_grants_no_lease_during_hold_time():
    t = HeartbeatTable(started_ms=500_000, timeout_ms=T, hold_ms=3 * T)
    t.record(G, rep(1), 500_100)
    assert not t.grants_lease(G, 1, 1, 1, 500_200)
    assert t.grants_lease(G, 1, 1, 1, 500_000 + 3 * T)
    known_clean = HeartbeatTable(started_ms=500_000, timeout_ms=T, hold_ms=3 * T, startup_grace_ms=0)
    assert known_clean.grants_lease(G, 1, 1, 1, 500_200)


def test_scan_interval_and_bounded_retries():
    p = ScanPlanner(interval_ms=5_000, max_retries=2, give_up_ms=60_000)
    assert p.due(0)
    p.suspects([], HeartbeatTable(0), 0)
    assert not p.due(4_999) and p.due(5_000)
    masters = [MasterRef("c", G, 1, 4)]
    dead = LivenessView(3, {(G, 1): combine(3, [NodeOpinion(Opinion.DEAD)] * 2)})
    for attempt in range(3):
        assert len(p.plan(masters, dead, 1_000 * attempt)) == 1, attempt
        p.record_result(G, 4, committed=False, now_ms=1_000 * attempt)
    assert p.gave_up(G, 4)
    assert p.plan(masters, dead, 10_000) == []
    assert len(p.plan(masters, dead, 2_000 + 60_000)) == 1, "a fresh budget after give_up_ms"
    # A new MasterEpoch (someone else elected) clears the bookkeeping.
    p.record_result(G, 4, committed=False, now_ms=70_000)
    assert len(p.plan([MasterRef("c", G, 2, 5)], LivenessView(3, {(G, 2): combine(3, [NodeOpinion(
        Opinion.DEAD)] * 2)}), 70_001)) == 1


def test_scan_caps_elections_per_round():
    p = ScanPlanner(max_per_scan=2)
    masters = [MasterRef("c", f"g{i}", 1, 1) for i in range(5)]
    view = LivenessView(1, {(f"g{i}", 1): combine(1, [NodeOpinion(Opinion.DEAD)]) for i in range(5)})
    assert [r.broker_name for r in p.plan(masters, view, 0)] == ["g0", "g1"]


def test_table_limits_and_expiry():
    t = HeartbeatTable(started_ms=0, timeout_ms=T, max_entries=2)
    assert t.record(G, rep(1), 0) and t.record(G, rep(2), 0)
    assert not t.record(G, rep(3), 0)
    assert t.record(G, rep(1), 5)                      # updates are always accepted
    assert t.expire(now_ms=100_000, keep_ms=50_000) == 2 and len(t) == 0
    t.record(G, rep(1), 200)
    t.record(G, rep(1), 100)                           # a clock step back never un-hears a beat
    assert t.last_heard_ms_ago(G, 1, 300) == 100


def test_unreachable_peers_never_make_a_master_dead():
    c = Cluster()
    for now in range(0, 30_000, 1_000):
        c.beat(now, 2)
    now = 30_000
    view = c.view(now, ids=(1,), asked=("n0",))        # master 1 silent to n0; peers did not answer
    assert not view.is_dead(G, 1)


def test_reply_codes_used_by_liveness_are_rocketmq_values():
    assert int(Code.CONTROLLER_BROKER_NOT_ALIVE) == 2006 and int(Code.CONTROLLER_MASTER_NOT_AVAILABLE) == 2004


# --- lease grants after a restart (holds are in memory; their time is on disk) ---


def test_startup_pause_follows_the_last_dead_report_before_the_restart():
    hold = 3 * T
    unknown = HeartbeatTable(started_ms=0, timeout_ms=T, hold_ms=hold)
    never = HeartbeatTable(started_ms=0, timeout_ms=T, hold_ms=hold, prior_dead_report_age_ms=NEVER_REPORTED)
    recent = HeartbeatTable(started_ms=0, timeout_ms=T, hold_ms=hold, prior_dead_report_age_ms=hold - 5_000)
    old = HeartbeatTable(started_ms=0, timeout_ms=T, hold_ms=hold, prior_dead_report_age_ms=hold + 1)
    assert [t.startup_grace() for t in (unknown, never, recent, old)] == [hold, 0, 5_000, 0]
    for t in (unknown, never, recent, old):
        t.record("g", BrokerReport(1, epoch=1), 1_000)
    assert [t.grants_lease("g", 1, 1, 1, 1_000) for t in (unknown, never, recent, old)] == [False, True, False, True]
    assert recent.grants_lease("g", 1, 1, 1, 5_000) and not recent.grants_lease("g", 1, 1, 1, 4_999)


def test_a_dead_report_is_made_only_after_its_time_was_recorded():
    recorded: list[tuple[str, int]] = []
    fail = [True]

    def on_hold(key):
        if fail[0]:
            raise OSError(28, "No space left on device")
        recorded.append(key)

    t = HeartbeatTable(started_ms=0, timeout_ms=T, on_hold=on_hold, prior_dead_report_age_ms=NEVER_REPORTED)
    t.record("g", BrokerReport(1), 0)
    now = 2 * T                                   # listened long enough, not heard: DEAD
    with pytest.raises(OSError):
        t.report_opinion("g", 1, now)
    assert t.grants_lease("g", 1, 0, 0, now)      # nothing was reported, so nothing is held
    fail[0] = False
    assert t.report_opinion("g", 1, now).opinion is Opinion.DEAD
    assert t.report_opinion("g", 1, now + 1).opinion is Opinion.DEAD
    assert recorded == [("g", 1)] * 2             # every report: the marker must cover the last
    assert not t.grants_lease("g", 1, 0, 0, now)


def test_an_imported_group_gets_a_whole_timeout_of_listening_before_anyone_is_dead():
    """A group taken over from another controller (ImportGroup) runs brokers this node never
    heard: none is DEAD by the timeout until a whole timeout after the import. Otherwise the first
    scan after an import into controllers that had not heard the brokers yet finds the running
    master dead and nobody alive, and commits a new MasterEpoch without a master."""
    t = HeartbeatTable(started_ms=0, timeout_ms=T)
    now = 10 * T
    assert t.opinion(G, 1, now).opinion is Opinion.DEAD          # never heard, listened long enough
    t.listen_to_group_from(G, now)
    assert t.opinion(G, 1, now + T - 1).opinion is Opinion.UNKNOWN
    assert t.opinion("other", 1, now).opinion is Opinion.DEAD     # only that group
    t.record(G, rep(1), now + 5)
    assert t.opinion(G, 1, now + T).opinion is Opinion.ALIVE
    assert t.opinion(G, 2, now + T).opinion is Opinion.DEAD       # a whole timeout later: the rule again
