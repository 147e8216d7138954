"""A group taken over from RocketMQ's controller (issue 62, docs/rocketmq.md "Moving a running
RocketMQ cluster"): the ImportGroup entry through the real Raft-log path, and the export file and
1006 answers read into checked records."""

from __future__ import annotations

import json

import pytest
from autoswitch.controller.codes import Code
from autoswitch.controller.messages import (
    TRIGGER_CONTROLLER,
    BrokerLiveInfo,
    CleanBrokerDataRequest,
    FinalizeFeaturesRequest,
    ImportGroupRequest,
    MalformedRequest,
    RegisterBrokerRequest,
    encode_request,
)
from autoswitch.controller.remoting import rocketmq_state as rs
from autoswitch.controller.state.statemachine import ControllerStateMachine

from autoswitch.base.errors import FormatTooNew
from tests.unit.test_controller_sm_ops import C, G, Harness

BROKERS = ((1, "10.0.0.1:10911"), (2, "10.0.0.2:10911"), (4, "10.0.0.4:10911"))


def imp(**kw) -> ImportGroupRequest:
    args = {"cluster_name": C, "broker_name": G, "brokers": BROKERS, "master_broker_id": 2, "master_epoch": 7,
            "sync_state_set": (1, 2), "sync_state_set_epoch": 12, "source": "rocketmq:10.0.0.9:9878"}
    args.update(kw)
    return ImportGroupRequest(**args)


def harness() -> Harness:
    h = Harness()
    assert h.w(FinalizeFeaturesRequest(3)).ok
    return h


def test_an_imported_group_is_the_other_controllers_group_unchanged():
    h = harness()
    r = h.w(imp())
    assert r.ok, r
    v = h.view()
    assert (v.master_broker_id, v.master_address, v.master_epoch) == (2, "10.0.0.2:10911", 7)
    assert (v.sync_state_set, v.sync_state_set_epoch, v.eligible_replicas) == ((1, 2), 12, ())
    g = h.sm.state.groups[G]
    assert {b: rec.address for b, rec in g.brokers.items()} == dict(BROKERS)
    assert not g.first_election                       # it has a history: no "first election" rules
    # ids below the largest imported one may have had a history there (cleaned brokers): never reused
    assert g.next_assign_broker_id == 5 and g.id_retired(3)
    rec = h.history[-1]
    assert rec["event"] == "ImportGroup" and rec["master_epoch"] == 7 and "from=rocketmq:10.0.0.9:9878" in rec["reason"]
    # it survives a snapshot
    sm2 = ControllerStateMachine()
    sm2.restore(h.sm.snapshot())
    assert sm2.replica_view(G) == v


def test_the_same_import_again_changes_nothing_and_another_is_refused():
    h = harness()
    assert h.w(imp()).ok
    n = len(h.history)
    r = h.w(imp())
    assert r.ok and r.remark == "already imported" and len(h.history) == n
    r = h.w(imp(master_epoch=8))
    assert r.code == Code.CONTROLLER_INVALID_REQUEST and "known here already" in r.remark
    assert h.view().master_epoch == 7


def test_an_import_never_takes_a_removed_groups_epochs_backwards():
    h = harness()
    assert h.w(imp(master_epoch=30, sync_state_set_epoch=40)).ok
    assert h.w(CleanBrokerDataRequest(C, G, (), clean_living_broker=True)).ok
    assert h.view() is None
    r = h.w(imp())
    assert r.code == Code.CONTROLLER_INVALID_REQUEST and "backwards" in r.remark
    assert h.w(imp(master_epoch=31, sync_state_set_epoch=40)).ok


def test_an_import_needs_feature_level_3():
    h = Harness()
    r = h.w(imp())
    assert r.code == Code.CONTROLLER_FEATURE_UNSUPPORTED and h.view() is None


@pytest.mark.parametrize("kw, why", [
    ({"master_broker_id": 4}, "not in the SyncStateSet"),
    ({"sync_state_set": (1, 3)}, "not among the brokers"),
    ({"brokers": ((1, "a:1"), (1, "b:1"))}, "duplicates"),
    ({"master_epoch": 0}, "at least 1"),
    ({"master_epoch": 2**31}, "<="),
    ({"brokers": ()}, "length"),
])
def test_a_malformed_import_is_refused_before_the_log(kw, why):
    with pytest.raises(MalformedRequest, match=why):
        encode_request(imp(**kw))


def test_the_imported_brokers_register_and_fail_over_like_any_other():
    h = harness()
    assert h.w(imp()).ok
    # a RocketMQ broker with its identity file only registers (1003): same address, no new epoch
    for bid, addr in BROKERS:
        assert h.w(RegisterBrokerRequest(C, G, bid, addr)).ok
    assert h.view().master_epoch == 7
    # the master dies: the controllers elect inside the imported SyncStateSet, one epoch above
    r = h.elect([BrokerLiveInfo(1, epoch=7, max_offset=500), BrokerLiveInfo(4, epoch=7, max_offset=900)],
                trigger=TRIGGER_CONTROLLER)
    assert r.ok and r.replica.master_broker_id == 1 and r.replica.master_epoch == 8, r


# ---- what a RocketMQ controller answers, and the export file ----

ANSWER = {"masterBrokerId": 2, "masterAddress": "10.0.0.2:10911", "masterEpoch": 7, "syncStateSetEpoch": 12,
          "inSyncReplicas": [{"brokerName": G, "brokerId": 1, "brokerAddress": "10.0.0.1:10911", "alive": True},
                             {"brokerName": G, "brokerId": 2, "brokerAddress": "10.0.0.2:10911", "alive": True}],
          "notInSyncReplicas": [{"brokerName": G, "brokerId": 4, "brokerAddress": "10.0.0.4:10911", "alive": False}]}


def test_a_1006_answer_reads_as_the_group():
    g = rs.parse_replicas_info(C, G, ANSWER)
    assert (g.master_broker_id, g.master_epoch, g.sync_state_set, g.sync_state_set_epoch) == (2, 7, (1, 2), 12)
    assert [(r.broker_id, r.address, r.in_sync) for r in g.replicas] == [
        (1, "10.0.0.1:10911", True), (2, "10.0.0.2:10911", True), (4, "10.0.0.4:10911", False)]
    # no master: RocketMQ leaves masterBrokerId out
    g = rs.parse_replicas_info(C, G, {**ANSWER, "masterBrokerId": None, "masterAddress": None})
    assert g.master_broker_id == 0


@pytest.mark.parametrize("change", [
    {"masterBrokerId": 4},                                          # the master is not in sync
    {"masterEpoch": -1}, {"masterEpoch": 2**31}, {"masterEpoch": "7"},
    {"inSyncReplicas": [{"brokerId": 0, "brokerAddress": "10.0.0.1:10911"}]},
    {"inSyncReplicas": [{"brokerId": 1, "brokerAddress": "no port"}]},
    {"inSyncReplicas": {"1": "x"}},
    {"notInSyncReplicas": [{"brokerId": 1, "brokerAddress": "10.0.0.1:10911"}]},   # listed twice
    {"inSyncReplicas": [], "notInSyncReplicas": [], "masterBrokerId": None},      # nobody
])
def test_a_bad_1006_answer_is_a_typed_error(change):
    with pytest.raises(rs.RocketMQStateError):
        rs.parse_replicas_info(C, G, {**ANSWER, **change})
    with pytest.raises(rs.RocketMQStateError):
        rs.parse_replicas_info(C, G, [1, 2])


def test_an_export_file_round_trips_and_a_bad_one_is_refused(tmp_path):
    g = rs.parse_replicas_info(C, G, ANSWER)
    ex = rs.Export(rs.FORMAT, rs.VERSION, "10.0.0.9:9878", 1, (g,))
    p = tmp_path / "rmq.json"
    rs.dump(ex, p)
    assert rs.load(p) == ex
    doc = json.loads(p.read_text())
    for bad in ({**doc, "format": "x"}, {**doc, "groups": [doc["groups"][0], doc["groups"][0]]},
                {**doc, "groups": [{**doc["groups"][0], "master_broker_id": 4}]}, {**doc, "extra": 1}):
        p.write_text(json.dumps(bad))
        with pytest.raises(rs.RocketMQStateError):
            rs.load(p)
    p.write_text("{not json")
    with pytest.raises(rs.RocketMQStateError):
        rs.load(p)
    p.write_text(json.dumps({**doc, "version": rs.VERSION + 1}))
    with pytest.raises(FormatTooNew):
        rs.load(p)
    with pytest.raises(rs.RocketMQStateError):
        rs.load(tmp_path / "missing.json")
