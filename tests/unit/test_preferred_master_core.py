"""Preferred masters, the pure parts: the state machine's SetPreferredMaster and the leader's
RebalancePlanner (one group at a time, the delay, the back-off after a failed handover)."""

from __future__ import annotations

from autoswitch.controller.codes import Code
from autoswitch.controller.failover.rebalance import GroupFacts, RebalancePlanner
from autoswitch.controller.messages import CleanBrokerDataRequest, SetPreferredMasterRequest
from autoswitch.controller.state.sm_snapshot import decode_snapshot, encode_snapshot

from tests.unit.test_controller_sm_ops import C, G, group_with_master


def test_set_preferred_master_is_replicated_state():
    h = group_with_master()
    assert h.w(SetPreferredMasterRequest(G, 9)).code == Code.CONTROLLER_INVALID_REQUEST   # not registered
    assert h.w(SetPreferredMasterRequest("nope", 1)).code == Code.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED
    r = h.w(SetPreferredMasterRequest(G, 2))
    assert r.ok and r.replica.preferred_master == 2
    assert h.history[-1]["event"] == "PreferredMaster" and h.history[-1]["reason"] == "preferred_master:2"
    n = len(h.history)
    assert h.w(SetPreferredMasterRequest(G, 2)).ok and len(h.history) == n     # unchanged: no event
    state, idx = decode_snapshot(encode_snapshot(h.sm.state, 7))
    assert state.groups[G].preferred_master == 2 and idx == 7
    # a cleaned broker is no longer preferred
    assert h.w(CleanBrokerDataRequest(C, G, (2,), True)).ok
    assert h.view().preferred_master == 0
    assert h.w(SetPreferredMasterRequest(G, 0)).ok


def facts(group="g", master=1, epoch=3, preferred=2, in_sync=True, p_alive=True, m_alive=True, degraded=False,
          maint=False) -> GroupFacts:
    return GroupFacts(group, master, epoch, "127.0.0.1:1", preferred, in_sync, p_alive, m_alive, degraded, maint)


def one(planned: list[GroupFacts]) -> GroupFacts | None:
    assert len(planned) <= 1
    return planned[0] if planned else None


def test_waits_for_the_delay_without_a_break():
    p = RebalancePlanner()
    assert one(p.plan([facts()], 1000, 0)) is None
    assert one(p.plan([facts()], 1000, 999)) is None
    assert one(p.plan([facts(in_sync=False)], 1000, 1000)) is None     # a break restarts the clock
    assert one(p.plan([facts()], 1000, 1500)) is None
    assert one(p.plan([facts()], 1000, 2500)).group == "g"


def test_a_new_master_epoch_restarts_the_clock():
    p = RebalancePlanner()
    p.plan([facts(epoch=3)], 1000, 0)
    assert one(p.plan([facts(epoch=4)], 1000, 1000)) is None
    assert p.plan([facts(epoch=4)], 1000, 2000) is not None


def test_nothing_to_do():
    p = RebalancePlanner()
    for f in (facts(preferred=0), facts(preferred=1), facts(master=None), facts(p_alive=False),
              facts(m_alive=False)):
        assert not f.qualifies
        assert one(p.plan([f], 0, 10)) is None


def test_one_group_at_a_time_oldest_first_and_back_off_after_failure():
    p = RebalancePlanner(retry_after_ms=5000)
    d = 15
    assert one(p.plan([facts("b")], d, 0)) is None
    assert one(p.plan([facts("a"), facts("b")], d, 10)) is None
    assert one(p.plan([facts("a"), facts("b")], d, 30)).group == "b"        # qualified first
    assert one(p.plan([facts("a"), facts("b")], d, 40)) is None             # "b" in flight
    p.done("b", handed_over=False, now_ms=40)
    assert one(p.plan([facts("a"), facts("b")], d, 50)).group == "a"
    p.done("a", handed_over=True, now_ms=60)
    assert one(p.plan([facts("b")], d, 100)) is None                        # backing off
    assert one(p.plan([facts("b")], d, 5040)).group == "b"


def test_at_most_n_at_a_time_and_every_wait_says_why():
    p = RebalancePlanner()
    fs = [facts("a"), facts("b"), facts("c", degraded=True), facts("d", maint=True), facts("e", in_sync=False)]
    assert p.plan(fs, 100, 0, max_in_flight=2) == []
    assert "in sync for 0 ms of 100" in p.waiting["a"]
    assert "degraded" in p.waiting["c"] and "maintenance" in p.waiting["d"] and "not in the SyncStateSet" in p.waiting["e"]
    assert [f.group for f in p.plan(fs, 100, 100, max_in_flight=2)] == ["a", "b"]
    p.plan(fs, 100, 150, max_in_flight=2)
    assert "a" not in p.waiting and "c" in p.waiting      # a, b in flight: nothing more to say of them
    p.done("a", handed_over=True, now_ms=160)
    p.done("b", handed_over=True, now_ms=160)
    assert p.plan(fs, 100, 170, max_in_flight=2, paused="storm") == []     # the delay starts again
    assert p.plan(fs, 100, 300, max_in_flight=2, paused="storm") == [] and p.waiting["a"] == "storm"
