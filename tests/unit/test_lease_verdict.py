"""The one lease rule (controller/failover/lease.py): each of its four tests refuses on its own,
the alerts are the leader's, and a node that lost its log grants nothing until it has caught up
and a hold has passed."""

from __future__ import annotations

import random
from dataclasses import replace

from autoswitch.controller.api import BrokerReport, Heartbeat
from autoswitch.controller.consensus.membership import Membership
from autoswitch.controller.failover.lease import LeaseFacts, lease_verdict
from autoswitch.controller.failover.liveness import NEVER_REPORTED, HeartbeatTable
from autoswitch.controller.raft.core import RaftConfig, RaftCore

THREE = Membership.of_ids(["n1", "n2", "n3"])
HB = Heartbeat("c", "g", BrokerReport(broker_id=1, epoch=4, incarnation="p1", assumed_timeout_ms=10_000),
               lease_quorum=2, controllers_index=0)
OK = LeaseFacts(self_id="n1", table_refusal=None, registered_incarnation="p1", catching_up=False,
                applied_conf=(0, THREE, True), master_epoch=4, master_id=1, is_leader=True, timeout_ms=10_000)


def test_a_heartbeat_that_passes_every_test_is_granted():
    v = lease_verdict(HB, OK)
    assert v.granted and v.refusal is None and v.alerts == ()


def test_each_test_refuses_on_its_own():
    cases = {
        "not_registered_process": replace(OK, registered_incarnation="p0"),
        "hold": replace(OK, table_refusal="hold"),
        "deposed": replace(OK, table_refusal="deposed"),
        "catching_up": replace(OK, catching_up=True),
        "membership_change_pending": replace(OK, applied_conf=(0, THREE, False)),
        "not_voter": replace(OK, self_id="n9"),
        "other_membership": replace(OK, applied_conf=(7, THREE, True)),
    }
    for why, facts in cases.items():
        v = lease_verdict(HB, facts)
        assert not v.granted and v.refusal == why, (why, v)
    assert lease_verdict(replace(HB, lease_quorum=1), OK).refusal == "lease_quorum"
    assert lease_verdict(replace(HB, lease_quorum=0), OK).refusal == "lease_quorum", "a quorum not stated"


def test_an_unstated_process_is_not_refused_for_it():
    """Either side unstated ("" = an older broker or no registration yet): the other tests decide."""
    assert lease_verdict(HB, replace(OK, registered_incarnation="")).granted
    assert lease_verdict(replace(HB, report=replace(HB.report, incarnation="")), OK).granted


def test_alerts_are_the_leaders_and_name_what_refused():
    v = lease_verdict(HB, replace(OK, table_refusal="hold"))
    assert [a.kind for a in v.alerts] == ["master_lease_refused"]
    assert not lease_verdict(HB, replace(OK, table_refusal="hold", master_id=2)).alerts, "not the master"
    assert not lease_verdict(HB, replace(OK, table_refusal="hold", is_leader=False)).alerts
    v = lease_verdict(HB, replace(OK, table_refusal="timeout", timeout_ms=5_000))
    assert [(a.kind, a.fields["key"], a.fields["controllers"]) for a in v.alerts] == [
        ("settings_mismatch", "heartbeat_timeout_ms", 5_000)]


def test_a_node_that_caught_up_after_losing_its_log_listens_afresh():
    """A wiped controller's DEAD reports went with its disk ("never reported" on the new one):
    once caught up it grants nothing for a hold (found by the lease simulator's wipes: without
    it an election built on its lost DEAD report commits under the old master's lease)."""
    t = HeartbeatTable(started_ms=0, timeout_ms=10_000, hold_ms=30_000, prior_dead_report_age_ms=NEVER_REPORTED)
    t.record("g", BrokerReport(broker_id=1, epoch=1), 1_000)
    assert t.lease_refusal("g", 1, 1, 1, 1_000) is None, "a new data directory: nothing to hold"
    t.listen_afresh(5_000)
    assert t.lease_refusal("g", 1, 1, 1, 34_999) == "startup"
    t.record("g", BrokerReport(broker_id=1, epoch=1), 35_000)
    assert t.lease_refusal("g", 1, 1, 1, 35_000) is None


def _core(node_id: str, peers: list[str]) -> RaftCore:
    return RaftCore(node_id, peers, RaftConfig(), random.Random(1), 0)


def test_an_empty_raft_node_may_lack_committed_entries_until_a_leader_sent_it_some():
    """A wiped member looks like a new cluster's until the leader's first message: it grants no
    lease before then (nothing on it says which MasterEpoch is current)."""
    c = _core("n1", ["n2", "n3"])
    assert c.fresh and c.may_lack_committed
    solo = _core("n1", [])
    for now in range(0, 5_000, 50):
        solo.tick(now)
        if solo.is_leader and solo.log.last_index() > 0:
            break
    assert solo.is_leader and not solo.may_lack_committed, "a one-node cluster's leader grants once it led"
