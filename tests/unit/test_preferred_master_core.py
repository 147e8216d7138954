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


def facts(group="g", master=1, epoch=3, preferred=2, in_sync=True, p_alive=True, m_alive=True) -> GroupFacts:
    return GroupFacts(group, master, epoch, "127.0.0.1:1", preferred, in_sync, p_alive, m_alive)


def test_waits_for_the_delay_without_a_break():
    p = RebalancePlanner()
    assert p.plan([facts()], 1000, 0) is None
    assert p.plan([facts()], 1000, 999) is None
    assert p.plan([facts(in_sync=False)], 1000, 1000) is None     # a break restarts the clock
    assert p.plan([facts()], 1000, 1500) is None
    assert p.plan([facts()], 1000, 2500).group == "g"


def test_a_new_master_epoch_restarts_the_clock():
    p = RebalancePlanner()
    p.plan([facts(epoch=3)], 1000, 0)
    assert p.plan([facts(epoch=4)], 1000, 1000) is None
    assert p.plan([facts(epoch=4)], 1000, 2000) is not None


def test_nothing_to_do():
    p = RebalancePlanner()
    for f in (facts(preferred=0), facts(preferred=1), facts(master=None), facts(p_alive=False),
              facts(m_alive=False)):
        assert not f.qualifies
        assert p.plan([f], 0, 10) is None


def test_one_group_at_a_time_oldest_first_and_back_off_after_failure():
    p = RebalancePlanner(retry_after_ms=5000)
    d = 15
    assert p.plan([facts("b")], d, 0) is None
    assert p.plan([facts("a"), facts("b")], d, 10) is None
    assert p.plan([facts("a"), facts("b")], d, 30).group == "b"        # qualified first
    assert p.plan([facts("a"), facts("b")], d, 40) is None             # "b" in flight
    p.done("b", handed_over=False, now_ms=40)
    assert p.plan([facts("a"), facts("b")], d, 50).group == "a"
    p.done("a", handed_over=True, now_ms=60)
    assert p.plan([facts("b")], d, 100) is None                        # backing off
    assert p.plan([facts("b")], d, 5040).group == "b"
