"""Crash-fast failover, the pure parts: session evidence in HeartbeatTable, crash-only verdicts and
plans, and the state machine's rules for crash-only elections (docs/controller.md)."""

from __future__ import annotations

from autoswitch.controller.api import BrokerReport
from autoswitch.controller.codes import Code
from autoswitch.controller.failover.liveness import (
    HeartbeatTable,
    LivenessView,
    MasterRef,
    NodeOpinion,
    Opinion,
    ScanPlanner,
    combine,
)
from autoswitch.controller.messages import TRIGGER_CONTROLLER, BrokerLiveInfo, ElectMasterRequest

from tests.unit.test_controller_sm_ops import C, G, group_with_master

T = 1000


def table(now: int = 0) -> HeartbeatTable:
    t = HeartbeatTable(started_ms=now, timeout_ms=T, startup_grace_ms=0)
    return t


def heard(t: HeartbeatTable, bid: int, now: int) -> None:
    t.record("g", BrokerReport(broker_id=bid, epoch=1), now)


def test_closed_session_in_mode_all_is_a_crash_at_once():
    t = table()
    heard(t, 1, 10)
    assert t.session_opened("g", 1, "all")
    assert t.opinion("g", 1, 20).opinion is Opinion.ALIVE
    assert t.session_closed("g", 1, 30)
    op = t.opinion("g", 1, 31)
    # a node that has not listened for a whole timeout may still use the evidence
    assert op.opinion is Opinion.DEAD and op.crashed
    assert not t.alive("g", 1, 31)
    heard(t, 1, 40)                   # a heartbeat already in flight does not undo it
    assert t.opinion("g", 1, 41).crashed


def test_quorum_and_master_modes_never_count_a_close():
    for mode in ("quorum", "master", ""):
        t = table()
        heard(t, 1, 10)
        t.session_opened("g", 1, mode)
        assert not t.session_closed("g", 1, 30)
        assert t.opinion("g", 1, 31).opinion is Opinion.ALIVE


def test_a_new_session_or_one_timeout_ends_the_evidence():
    t = table()
    heard(t, 1, 0)
    t.session_opened("g", 1, "all")
    t.session_closed("g", 1, 100)
    assert t.crashed("g", 1, 200)
    t.session_opened("g", 1, "all")   # reconnected after a reset
    assert not t.crashed("g", 1, 201) and t.opinion("g", 1, 201).opinion is Opinion.ALIVE
    t.session_closed("g", 1, 300)
    heard(t, 1, 900)                  # heartbeats go on (no new session)
    assert t.crashed("g", 1, 1299)
    assert not t.crashed("g", 1, 1300) and t.opinion("g", 1, 1300).opinion is Opinion.ALIVE


def test_overlapping_sessions_count_only_the_last_end():
    t = table()
    heard(t, 1, 0)
    t.session_opened("g", 1, "all")
    t.session_opened("g", 1, "all")   # the reconnect opened before the old stream's end arrived
    assert not t.session_closed("g", 1, 10)
    assert t.opinion("g", 1, 11).opinion is Opinion.ALIVE
    assert t.session_closed("g", 1, 20)


def test_fast_failover_off_ignores_sessions():
    t = table()
    t.fast_failover = False
    heard(t, 1, 0)
    t.session_opened("g", 1, "all")
    assert not t.session_closed("g", 1, 10)
    assert t.opinion("g", 1, 11).opinion is Opinion.ALIVE


def test_timeout_beats_crash_evidence_in_the_opinion():
    """Both true: the DEAD opinion is the timeout's, so the election is not crash-only."""
    t = table()
    heard(t, 1, 0)
    t.session_opened("g", 1, "all")
    t.session_closed("g", 1, 900)
    op = t.opinion("g", 1, 1500)
    assert op.opinion is Opinion.DEAD and not op.crashed


def test_sessions_are_bounded_and_forgotten():
    t = HeartbeatTable(started_ms=0, timeout_ms=T, max_entries=2, startup_grace_ms=0)
    assert t.session_opened("g", 1, "all") and t.session_opened("g", 2, "all")
    assert not t.session_opened("g", 3, "all")
    t.session_closed("g", 1, 5)
    t.forget("g", [1])
    assert t.session_opened("g", 3, "all")


def _op(kind: Opinion, crashed: bool = False) -> NodeOpinion:
    return NodeOpinion(kind, 5, None, crashed=crashed)


def test_verdict_crash_only_needs_crashed_votes():
    d, dc, a = _op(Opinion.DEAD), _op(Opinion.DEAD, True), _op(Opinion.ALIVE)
    assert combine(3, [d, d, a]).dead_by_timeout
    v = combine(3, [dc, d, a])
    assert v.dead and not v.dead_by_timeout
    v = combine(3, [dc, d, d])
    assert v.dead and v.dead_by_timeout
    assert not combine(3, [dc, a, a]).dead


def test_plan_marks_crash_only_elections():
    view = LivenessView(3, {("g", 1): combine(3, [_op(Opinion.DEAD, True), _op(Opinion.DEAD, True), _op(Opinion.ALIVE)]),
                            ("g", 2): combine(3, [_op(Opinion.ALIVE)] * 3)})
    assert view.crash_only("g", 1)
    (req,) = ScanPlanner().plan([MasterRef("c", "g", 1, 4)], view, now_ms=0)
    assert req.crash_only and 1 in req.dead_broker_ids
    timeout_view = LivenessView(3, {("g", 1): combine(3, [_op(Opinion.DEAD)] * 3)})
    (req,) = ScanPlanner().plan([MasterRef("c", "g", 1, 4)], timeout_view, now_ms=0)
    assert not req.crash_only


def _crash_elect(h, alive):
    infos = tuple(BrokerLiveInfo(a, max_offset=100) for a in alive)
    return h.w(ElectMasterRequest(C, G, TRIGGER_CONTROLLER, 0, False, infos, ts_ms=h.ts,
                                  dead_broker_ids=(h.view().master_broker_id,), crash_only=True))


def test_crash_only_election_is_clean_and_says_so():
    h = group_with_master(enable_elect_unclean_master=True)
    assert h.alter([1, 2]).ok
    r = _crash_elect(h, [2, 3])
    assert r.ok and r.replica.master_broker_id == 2
    assert h.history[-1]["reason"].startswith("controller:crash:") and not h.history[-1]["unclean"]


def test_crash_only_never_unclean_and_never_no_master():
    h = group_with_master(enable_elect_unclean_master=True)
    assert h.alter([1]).ok                       # nobody else in sync
    before = h.view()
    r = _crash_elect(h, [2, 3])
    assert r.code == Code.CONTROLLER_MASTER_NOT_AVAILABLE
    after = h.view()
    # a reset connection must not depose a healthy master that nobody can replace
    assert (after.master_broker_id, after.master_epoch) == (before.master_broker_id, before.master_epoch)


def test_lease_refusal_says_why():
    t = HeartbeatTable(started_ms=0, timeout_ms=T, startup_grace_ms=500)
    heard(t, 1, 0)
    assert t.lease_refusal("g", 1, 1, 1, 100) == "startup"
    assert t.lease_refusal("g", 1, 1, 1, 600) is None and t.grants_lease("g", 1, 1, 1, 600)
    assert t.lease_refusal("g", 1, 1, 2, 600) == "deposed"
    assert t.report_opinion("g", 1, 2000).opinion is Opinion.DEAD      # silent past the timeout: a DEAD report
    heard(t, 1, 2100)                                                   # it is back, but the hold stands
    assert t.lease_refusal("g", 1, 1, 1, 2100) == "hold" and not t.grants_lease("g", 1, 1, 1, 2100)


def test_a_new_process_session_does_not_revive_the_crashed_process_report():
    """Issue 30, found by tests/integration/test_unclean_restart.py: a slave was killed (its session
    closed: not alive), its new process opened a session at once, and the open session made the
    broker alive again *with the dead process's last report* (clean, its old max offset): the new
    process's heartbeats were refused as a second incarnation and the controller elected the
    slave as clean although it had just lost its unsynced tail."""
    from autoswitch.controller.api import BrokerReport

    t = table()
    t.record("g", BrokerReport(broker_id=2, epoch=1, max_offset=36_900, clean_shutdown=True, incarnation="old"), 10)
    assert t.session_opened("g", 2, "all", "old")
    assert t.session_closed("g", 2, 20)                          # kill -9
    assert t.live_incarnation("g", 2, 21) == ""
    assert t.session_opened("g", 2, "all", "new")                # the restarted process
    rep = t.report("g", 2)
    # a placeholder: alive, unclean, no data, of no stated process (so no election candidate;
    # the simulator once saw a whole set's unclean recovery rank two placeholders)
    assert rep is not None and rep.incarnation == "" and rep.clean_shutdown is False and rep.max_offset == 0
    assert t.live_incarnation("g", 2, 22) == ""                  # its own heartbeats are accepted
    # the same process reconnecting keeps its report
    t.record("g", BrokerReport(broker_id=2, epoch=1, max_offset=100, clean_shutdown=False, incarnation="new"), 30)
    assert t.session_opened("g", 2, "all", "new")
    assert t.report("g", 2).max_offset == 100
