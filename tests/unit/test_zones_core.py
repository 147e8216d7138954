"""Zones, the pure parts (issue 35 item 2): SetZonePreference (feature level 2, in the snapshot),
elections that prefer the zone order among replicas holding every acknowledged message (never
over one that may lack some), and decisions that name a zone none of whose replicas is alive."""

from __future__ import annotations

from autoswitch.controller.codes import Code
from autoswitch.controller.messages import (
    TRIGGER_CONTROLLER,
    BrokerLiveInfo,
    ElectMasterRequest,
    FinalizeFeaturesRequest,
    SetZonePreferenceRequest,
)
from autoswitch.controller.state import election
from autoswitch.controller.state.sm_snapshot import decode_snapshot, encode_snapshot, state_hash

from tests.unit.test_controller_sm_ops import C, G, group_with_master

ZONES = ((1, "za"), (2, "zb"), (3, "zc"))


def elect(h, alive, dead, zones=ZONES):
    return h.w(ElectMasterRequest(C, G, TRIGGER_CONTROLLER, 0, False, tuple(alive), ts_ms=h.ts,
                                  dead_broker_ids=tuple(dead), zones=zones))


def test_zone_preference_is_level_2_replicated_state():
    h = group_with_master()
    assert h.w(SetZonePreferenceRequest(G, ("zc", "zb"))).code == Code.CONTROLLER_FEATURE_UNSUPPORTED
    assert h.w(FinalizeFeaturesRequest(2)).ok
    r = h.w(SetZonePreferenceRequest(G, ("zc", "zb")))
    assert r.ok and r.replica.zone_preference == ("zc", "zb") and h.history[-1]["event"] == "ZonePreference"
    state, _ = decode_snapshot(encode_snapshot(h.sm.state, 3))
    assert state.groups[G].zone_preference == ("zc", "zb") and state_hash(state) == state_hash(h.sm.state)
    assert h.w(SetZonePreferenceRequest(G, ())).ok and h.view().zone_preference == ()


def test_the_preferred_surviving_zone_wins_among_replicas_holding_every_acked_message():
    h = group_with_master()
    assert h.w(FinalizeFeaturesRequest(2)).ok and h.w(SetZonePreferenceRequest(G, ("za", "zc", "zb"))).ok
    # 2 holds more (not acknowledged: both are in the SyncStateSet), 3 is in the preferred zone
    r = elect(h, [BrokerLiveInfo(2, 1, 500), BrokerLiveInfo(3, 1, 400)], dead=(1,))
    assert r.ok and r.replica.master_broker_id == 3, r
    v = {x.broker_id: x for x in r.decision.candidates}
    assert v[2].zone == "zb" and "comes after zc in the group's zone preference" in v[2].why
    assert r.decision.zones_lost == ("za",) and r.decision.summary.startswith("zone lost: za")


def test_a_zone_never_outranks_the_acknowledged_data():
    h = group_with_master()
    assert h.w(FinalizeFeaturesRequest(2)).ok and h.w(SetZonePreferenceRequest(G, ("zc",))).ok
    assert h.alter([1, 2]).ok          # 3 left the SyncStateSet: it may lack acknowledged messages
    r = elect(h, [BrokerLiveInfo(2, 1, 400), BrokerLiveInfo(3, 1, 400)], dead=(1,))
    assert r.ok and r.replica.master_broker_id == 2, r


def test_zone_ranks():
    assert election.zone_ranks({1: "a", 2: "b", 3: ""}, ("b", "a")) == {1: 1, 2: 0, 3: 2}
    assert election.zone_ranks({1: "a"}, ()) == {}
