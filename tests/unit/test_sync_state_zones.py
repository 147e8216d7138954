"""Acks that span zones (issue 35 item 2b), the pure parts: the master's min_in_sync_zones rule in
the SyncStateTracker, where it learns zones (ha/zones.py), and the controller's decision saying
when an election leaves the group unable to keep the promise."""

from __future__ import annotations

import asyncio

import pytest
from autoswitch.controller.messages import (
    TRIGGER_CONTROLLER,
    BrokerLiveInfo,
    ElectMasterRequest,
    FinalizeFeaturesRequest,
)
from autoswitch.controller.state import explain
from autoswitch.ha import zones
from autoswitch.ha.config import HAConfig
from autoswitch.ha.sync_state import SyncStateTracker

from autoswitch.base.errors import ConfigError
from autoswitch.base.write_errors import InSyncReplicasNotEnough
from tests.unit.test_controller_sm_ops import C, G, group_with_master

ZONE = {1: "za", 2: "za", 3: "zb"}


def tracker(sss=(1, 2, 3), mode="all", need=2, zone=ZONE, **kw) -> SyncStateTracker:
    cfg = HAConfig(ack_mode=mode, min_in_sync_zones=need, **kw).validate()
    t = SyncStateTracker(1, 5, frozenset(sss), 10, cfg, now=0.0)
    for b, z in zone.items():
        t.set_zone(b, z)
    for b in sss:
        if b != 1:
            t.on_connect(b, False, 0.0)
    return t


def test_ack_mode_all_acknowledges_while_the_set_spans_the_zones():
    t = tracker()
    t.on_ack(2, 100, 0.0, 100)
    t.on_ack(3, 100, 0.0, 100)
    t.check_enough()
    assert t.is_acked(100, 100) and t.confirm_offset(100) == 100 and t.zone_shortfall() is None


def test_a_set_within_one_zone_acknowledges_nothing_and_refuses_writes():
    t = tracker(sss=(1, 2))                         # both in za
    t.on_ack(2, 100, 0.0, 100)
    assert not t.is_acked(100, 100) and t.confirm_offset(100) == 0
    assert "span zones ['za'] (1) < min_in_sync_zones 2" in (t.zone_shortfall() or "")
    with pytest.raises(InSyncReplicasNotEnough, match="min_in_sync_zones 2"):
        t.check_enough()


def test_the_other_zone_disconnected_refuses_writes_and_holds_acks():
    t = tracker()
    t.on_ack(2, 100, 0.0, 100)
    t.on_disconnect(3, 1.0)
    with pytest.raises(InSyncReplicasNotEnough, match=r"zones \['za'\]"):
        t.check_enough()
    assert not t.is_acked(100, 100)                # ack mode all: 3 has not acked it either


def test_quorum_mode_counts_the_zones_of_the_holders():
    t = tracker(mode="in_sync_replicas", in_sync_replicas=2)
    t.on_ack(2, 100, 0.0, 100)                     # master + 2: two copies, one zone
    assert not t.is_acked(100, 100)
    t.on_ack(3, 100, 0.0, 100)
    assert t.is_acked(100, 100)
    t2 = tracker(mode="in_sync_replicas", in_sync_replicas=2)
    t2.on_ack(3, 100, 0.0, 100)                    # master (za) + 3 (zb): enough
    assert t2.is_acked(100, 100)


def test_a_replica_whose_zone_is_not_known_covers_none():
    t = tracker(zone={1: "za", 2: "za"})
    t.on_ack(2, 100, 0.0, 100)
    t.on_ack(3, 100, 0.0, 100)
    assert not t.is_acked(100, 100)
    assert "zone not known for [3]" in (t.zone_shortfall() or "")
    t.set_zone(3, "zb")
    assert t.is_acked(100, 100)


def test_off_by_default_and_refused_with_ack_mode_master():
    t = tracker(need=0, zone={})
    t.on_ack(2, 100, 0.0, 100)
    t.on_ack(3, 100, 0.0, 100)
    assert t.is_acked(100, 100) and t.zone_shortfall() is None
    with pytest.raises(ConfigError):
        HAConfig(ack_mode="master", min_in_sync_zones=2).validate()
    with pytest.raises(ConfigError):
        HAConfig(min_in_sync_zones=17).validate()


@pytest.mark.parametrize("need", [2, 0])
def test_the_slow_rule_keeps_the_only_member_of_another_zone(need):
    t = tracker(need=need, slave_slow_ack_ms=100.0, slave_slow_windows=1)
    now = 0.0
    for i in range(1, 40):                         # 3 (zb) acks each write 0.5 s late; 2 at once
        now = i * 0.25
        t.on_ack(2, i * 10, now, i * 10, now)
        t.tick(now, i * 10)
        if i > 2:
            t.on_ack(3, (i - 2) * 10, now, i * 10, now)
    assert t.replicas[3].ack_latency is not None and t.replicas[3].ack_latency.slow
    # without it the set would span one zone; without the rule (need 0) it leaves as slow
    assert (3 in t.desired_set(now, 390)) == (need == 2)


class _Source:
    def __init__(self, known: dict[int, str]) -> None:
        self.known = known
        self.asked = 0

    def zone(self, broker_id: int) -> str:
        return self.known.get(broker_id, "")

    async def refresh(self) -> None:
        self.asked += 1


def test_zones_are_learnt_from_the_controllers_and_an_empty_answer_keeps_them():
    t = tracker(zone={1: "za"})
    src = _Source({2: "za"})
    zones.learn(t, src)
    assert t.zones == {1: "za", 2: "za"} and zones.missing(t)
    asyncio.run(zones.refresh(t, src))
    assert src.asked == 1
    src.known = {3: "zb"}                          # a controller that has not heard 2 yet
    asyncio.run(zones.refresh(t, src))
    assert t.zones == {1: "za", 2: "za", 3: "zb"} and not zones.missing(t)
    asyncio.run(zones.refresh(t, src))
    assert src.asked == 2                          # nothing missing: not asked again


def test_an_election_that_breaks_the_zone_promise_says_so():
    h = group_with_master()
    assert h.w(FinalizeFeaturesRequest(2)).ok
    req = ElectMasterRequest(C, G, TRIGGER_CONTROLLER, 0, False, (BrokerLiveInfo(2, 1, 400),), ts_ms=h.ts,
                             dead_broker_ids=(1, 3), zones=((1, "za"), (2, "zb"), (3, "zc")), min_in_sync_zones=2)
    r = h.w(req)
    assert r.ok and r.replica.master_broker_id == 2, r
    w = r.decision.warnings
    assert len(w) == 2 and "held in 1 zone(s) ['zb'] only" in w[0] and "broker 2 acknowledges no write" in w[1]
    assert "min_in_sync_zones 2" in r.decision.summary
    assert explain.from_json(explain.to_json(r.decision)).warnings == w


def test_an_election_within_the_promise_warns_of_nothing():
    h = group_with_master()
    assert h.w(FinalizeFeaturesRequest(2)).ok
    req = ElectMasterRequest(C, G, TRIGGER_CONTROLLER, 0, False, (BrokerLiveInfo(2, 1, 400), BrokerLiveInfo(3, 1, 400)),
                             ts_ms=h.ts, dead_broker_ids=(1,), zones=((1, "za"), (2, "zb"), (3, "zc")),
                             min_in_sync_zones=2)
    r = h.w(req)
    assert r.ok and r.decision.warnings == ()
    assert explain.zone_promise(0, "elected", 2, r.decision.candidates) == ()
