"""Issue 30 item 2: one process per brokerId. A broker states its incarnation (random, new at every
start) and the one whose clean stop it follows; controllers refuse a second live incarnation, and
a start that does not follow the registered one must catch up again before it is electable."""

from __future__ import annotations

from autoswitch.controller.api import BrokerReport
from autoswitch.controller.failover.liveness import HeartbeatTable
from autoswitch.controller.messages import (
    TRIGGER_ADMIN,
    TRIGGER_CONTROLLER,
    BrokerLiveInfo,
    RegisterBrokerRequest,
    UpdateControllerConfigRequest,
)
from autoswitch.controller.state.sm_snapshot import decode_snapshot, encode_snapshot

from tests.unit.test_controller_sm_ops import C, G, group_with_master


def _reg(h, bid: int, inc: str, prev: str = "", clean: bool = True):
    r = h.w(RegisterBrokerRequest(C, G, bid, f"127.0.0.1:{9000 + bid}", clean_shutdown=clean, ts_ms=h.ts,
                                  incarnation=inc, previous_incarnation=prev))
    assert r.ok, r
    return h.view()


def test_a_start_following_the_registered_incarnation_keeps_its_place():
    h = group_with_master()
    _reg(h, 2, "a1")                            # first stated incarnation: nothing to compare with
    v = _reg(h, 2, "a2", prev="a1")             # clean restart of that process
    assert v.sync_state_set == (1, 2, 3)
    v = _reg(h, 2, "a2", prev="a1")             # the same process registering again
    assert v.sync_state_set == (1, 2, 3)


def test_a_copied_data_directory_must_catch_up_before_it_is_electable():
    h = group_with_master()
    _reg(h, 2, "a1")
    _reg(h, 2, "a2", prev="a1")
    # a copy of the directory as it was after a1's clean stop, started after a2 died: clean marker,
    # but an older log than the one that was in the set
    v = _reg(h, 2, "b1", prev="a1")
    assert v.sync_state_set == (1, 3)
    assert h.history[-1]["reason"] == "new_incarnation"
    # the master itself, restored from a copy: replaced by the members that kept everything
    _reg(h, 1, "m1")
    v = _reg(h, 1, "m9", prev="m0")
    assert v.master_broker_id is None and v.sync_state_set == (3,)


def test_the_incarnation_survives_a_snapshot():
    h = group_with_master()
    _reg(h, 2, "a1")
    state, index = decode_snapshot(encode_snapshot(h.sm.state, 77))
    assert index == 77 and state.groups[G].brokers[2].incarnation == "a1"
    assert state.groups[G].brokers[3].incarnation == ""


def test_a_node_hears_one_live_incarnation_per_broker():
    t = HeartbeatTable(started_ms=0, timeout_ms=1000)
    assert t.record(G, BrokerReport(2, incarnation="a1"), 100)
    assert t.live_incarnation(G, 2, 500) == "a1"
    assert t.live_incarnation(G, 2, 1101) == "", "not heard within the timeout: no live incarnation"
    t.forget(G, [2])                            # a clean stop's farewell
    assert t.live_incarnation(G, 2, 200) == ""



def test_a_crashed_process_last_clean_heartbeat_stops_counting_as_clean():
    """Found by the simulator's power cuts: a broker's process died (power cut, async flush) with
    a heartbeat that said "clean, max offset 602" still alive in the table; its new process is
    refused registration until that entry expires, and meanwhile an election took the stale entry
    as a clean candidate. The new process states its crash (clean_shutdown false): the live entry
    then stays alive (the new process still waits) but is no clean candidate."""
    t = HeartbeatTable(started_ms=0, timeout_ms=1000)
    assert t.record(G, BrokerReport(1, epoch=7, max_offset=602, clean_shutdown=True, incarnation="old"), 100)
    assert t.mark_unclean(G, 1)
    assert t.live_incarnation(G, 1, 500) == "old"
    rep = t.report(G, 1)
    assert rep is not None and rep.clean_shutdown is False and rep.max_offset == 602
    assert not t.mark_unclean(G, 1), "already unclean: nothing to change"
    # the original, really alive (a clone was refused), heartbeats again: clean again
    assert t.record(G, BrokerReport(1, epoch=7, max_offset=650, clean_shutdown=True, incarnation="old"), 600)
    assert t.report(G, 1).clean_shutdown is True
    assert not t.mark_unclean(G, 2), "no entry"


# ---------------------------------------------------------------- found by the cloned processes


def test_a_report_counts_only_for_the_registered_process():
    """The last heartbeat of the process a copy was registered over (still fresh on one node) made
    the id a clean candidate with a log the registered copy did not have (simulator seed 28)."""
    h = group_with_master()
    for b in (1, 2, 3):
        _reg(h, b, f"p{b}")
    _reg(h, 3, "copy", prev="p3")          # a move: the copy follows p3 and takes the id over
    stale = BrokerLiveInfo(3, epoch=1, max_offset=900, incarnation="p3")     # the old process's words
    r = h.elect([BrokerLiveInfo(2, max_offset=400, incarnation="p2"), stale], trigger=TRIGGER_CONTROLLER)
    assert r.ok and r.replica.master_broker_id == 2, r
    # the copy's own report counts
    h2 = group_with_master()
    for b in (1, 2, 3):
        _reg(h2, b, f"p{b}")
    _reg(h2, 3, "copy", prev="p3")
    r = h2.elect([BrokerLiveInfo(2, max_offset=400, incarnation="p2"),
                  BrokerLiveInfo(3, max_offset=900, incarnation="copy")], trigger=TRIGGER_CONTROLLER)
    assert r.ok and r.replica.master_broker_id == 3, r


def test_an_unclean_start_that_follows_nothing_is_no_holder_and_stops_the_unclean_recovery():
    """An unclean restart names the crashed run (its abort marker) and stays a last known holder;
    an unclean start that follows nothing (a copy of a running broker) leaves the set, and the
    set's unclean recovery is off until a master is elected again: the rest's longest log may
    lack what the replaced holder had (simulator seeds 244, 242)."""
    h = group_with_master()
    for b in (1, 2, 3):
        _reg(h, b, f"p{b}")
    v = _reg(h, 2, "p2b", prev="p2", clean=False)       # an unclean restart of p2: kept
    assert v.sync_state_set == (1, 2, 3) and not h.sm.state.groups[G].holder_replaced
    v = _reg(h, 3, "hot", prev="", clean=False)          # a hot copy of 3: out
    assert v.sync_state_set == (1, 2) and h.sm.state.groups[G].holder_replaced
    assert h.history[-1]["reason"] == "new_incarnation"
    state, _ = decode_snapshot(encode_snapshot(h.sm.state, 5))
    assert state.groups[G].holder_replaced
    # the master and 2 restart uncleanly: no clean candidate; the rest of the set is back, but
    # the unclean recovery is off
    _reg(h, 1, "p1b", prev="p1", clean=False)
    unclean = [BrokerLiveInfo(1, max_offset=500, clean_shutdown=False, incarnation="p1b"),
               BrokerLiveInfo(2, max_offset=400, clean_shutdown=False, incarnation="p2b")]
    r = h.elect(unclean, trigger=TRIGGER_CONTROLLER)
    assert not r.ok and "needs the operator" in r.remark, r
    # the operator elects (unclean); a master clears the flag
    assert h.w(UpdateControllerConfigRequest({"enable_elect_unclean_master": "true"}, ts_ms=h.ts)).ok
    r = h.elect(unclean, trigger=TRIGGER_ADMIN, broker_id=1, designate=True)
    assert r.ok and r.replica.master_broker_id == 1 and not h.sm.state.groups[G].holder_replaced


def test_a_process_that_does_not_follow_the_master_is_no_copy_of_its_log():
    """The lone master's id registered by a process that does not follow it: before, it was
    elected at a new epoch as "the only copy", and the acknowledged messages of the registered
    process were gone (simulator seed 242). Now the master is deposed and the group waits."""
    h = group_with_master()
    for b in (1, 2, 3):
        _reg(h, b, f"p{b}")
    assert h.alter([1]).ok
    v = _reg(h, 1, "other", prev="p0")
    assert v.master_broker_id is None and h.sm.state.groups[G].holder_replaced
    # an unclean restart of the master's own process is still elected at a new epoch
    h2 = group_with_master()
    _reg(h2, 1, "p1")
    assert h2.alter([1]).ok
    epoch = h2.view().master_epoch
    v = _reg(h2, 1, "p1b", prev="p1", clean=False)
    assert v.master_broker_id == 1 and v.master_epoch == epoch + 1


def test_a_live_master_reported_unclean_is_kept():
    """A master's older heartbeat (from before its election, saying unclean) overtook its newer
    ones at one node: a failover election deposed the live master, whose lease still ran
    (simulator seed 135, crash-fast)."""
    h = group_with_master()
    r = h.elect([BrokerLiveInfo(1, max_offset=500, clean_shutdown=False), BrokerLiveInfo(2, max_offset=400)])
    assert not r.ok and h.view().master_broker_id == 1, r


def test_a_takeover_by_a_process_that_does_not_follow_waits_two_timeouts():
    """A copy registered before the original, restarting after a clean stop, could register (the
    original registers before it heartbeats): a non-following process waits two heartbeat
    timeouts after the id's last sign of life (simulator seed 28)."""
    t = HeartbeatTable(started_ms=0, timeout_ms=1000)
    assert t.takeover_wait_ms(G, 2, 500) == 1500, "a node that just started may have missed the id"
    assert t.record(G, BrokerReport(2, incarnation="a1"), 3000)
    t.note_sign(G, 2, 4000)                     # the clean stop's farewell
    t.forget(G, [2])
    assert t.takeover_wait_ms(G, 2, 4500) == 1500
    assert t.takeover_wait_ms(G, 2, 6000) == 0


def test_a_session_placeholder_is_no_process_and_no_candidate():
    t = HeartbeatTable(started_ms=0, timeout_ms=1000)
    assert t.record(G, BrokerReport(2, epoch=3, max_offset=90, incarnation="old"), 100)
    assert t.session_opened(G, 2, "all", "new")
    rep = t.report(G, 2)
    assert rep is not None and rep.incarnation == "" and not rep.clean_shutdown and rep.max_offset == 0
    assert t.live_incarnation(G, 2, 200) == "", "the new process's heartbeats are not refused"
