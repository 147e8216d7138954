"""Issue 30 item 2: one process per brokerId. A broker states its incarnation (random, new at every
start) and the one whose clean stop it follows; controllers refuse a second live incarnation, and
a start that does not follow the registered one must catch up again before it is electable."""

from __future__ import annotations

from autoswitch.controller.liveness import BrokerReport, HeartbeatTable
from autoswitch.controller.messages import RegisterBrokerRequest
from autoswitch.controller.statemachine import decode_snapshot, encode_snapshot

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
