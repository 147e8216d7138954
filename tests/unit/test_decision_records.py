"""The decision record end to end (issue 35 item 3): the typed record the state machine builds for
an election or SyncStateSet change rides on its events.jsonl line, seeds `admin explain` after a
restart (without counting an entry Raft applies again twice), and labels the decisions metric."""

from __future__ import annotations

import msgspec
from autoswitch.controller.messages import (
    TRIGGER_BROKER,
    AlterSyncStateSetRequest,
    ApplyBrokerIdRequest,
    BrokerLiveInfo,
    ElectMasterRequest,
    RegisterBrokerRequest,
    encode_request,
)
from autoswitch.controller.server import sm_adapter
from autoswitch.controller.server.eventlog import EventLog
from autoswitch.controller.server.metrics import ControllerMetrics
from autoswitch.controller.state import explain
from autoswitch.controller.state.history import decode_record

from autoswitch.base.log import get_logger

C, G = "DefaultCluster", "broker-a"


def _entries() -> list[bytes]:
    out = []
    for b in (1, 2, 3):
        out.append(encode_request(ApplyBrokerIdRequest(C, G, b, f"127.0.0.1:{9000 + b};{b}", ts_ms=1)))
        out.append(encode_request(RegisterBrokerRequest(C, G, b, f"127.0.0.1:{9000 + b}", ts_ms=1)))
    alive = (BrokerLiveInfo(1, max_offset=500), BrokerLiveInfo(2, max_offset=400))
    out.append(encode_request(ElectMasterRequest(C, G, TRIGGER_BROKER, 0, False, alive, ts_ms=2)))
    out.append(encode_request(AlterSyncStateSetRequest(G, 1, 1, (1, 2), 1, (1, 2), ts_ms=3)))
    return out


def _node(path):
    events = EventLog(path)
    return events, sm_adapter.AppliedStateMachine({"first_election_grace_ms": "0"}, events,
                                                  lambda *a: None, get_logger("test"))


def _applied(path):
    """A node that applied _entries() and closed its events.jsonl."""
    events, asm = _node(path)
    for i, e in enumerate(_entries(), start=1):
        asm.apply(i, e)
    events.close()
    return asm


def test_decisions_ride_on_their_events_and_outlive_a_restart(tmp_path):
    path = tmp_path / "events.jsonl"
    before = _applied(path).inner.decisions.last(G)
    assert [d.request for d in before] == ["AlterSyncStateSet", "ElectMaster"] and before[1].master == 1

    lines = [decode_record(x) for x in path.read_text().splitlines()]
    decided = {r.event: r.decision for r in lines if r.decision}
    assert set(decided) == {"ElectMaster", "AlterSyncStateSet"}
    assert all(not r.decision for r in lines if r.event not in decided)
    assert explain.from_json(decided["ElectMaster"]) == before[1]

    # a restart: events.jsonl seeds the log; Raft applies the entries again (no snapshot yet)
    events, asm = _node(path)
    assert asm.inner.decisions.last(G) == before
    for i, e in enumerate(_entries(), start=1):
        asm.apply(i, e)
    assert asm.inner.decisions.last(G) == before           # not twice
    events.close()


def test_unreadable_decisions_are_skipped_and_counted():
    log = explain.DecisionLog()
    good = explain.to_json(explain.Decision(group=G, request="ElectMaster", outcome="elected", master=2, index=7))
    assert log.restore([good, "{not json", '{"group": 5}']) == 2
    assert [d.master for d in log.last(G)] == [2]


def test_the_decisions_metric_is_labelled_by_the_record(tmp_path):
    path = tmp_path / "events.jsonl"
    _applied(path)
    metrics = ControllerMetrics(None)  # type: ignore[arg-type]   # the counters need no node
    warned = explain.Decision(group=G, request="ElectMaster", outcome="elected", master=2, index=99,
                              zones_lost=("za",), warnings=("min_in_sync_zones 2: ...",))
    recs = [decode_record(x) for x in path.read_text().splitlines()]
    recs.append(msgspec.structs.replace(recs[-1], index=99, event="ElectMaster", decision=explain.to_json(warned)))
    for r in recs:
        metrics.on_history_record(r)
    v = metrics.registry.get_sample_value
    assert v("autoswitch_controller_decisions_total", {"outcome": "elected", "zone_lost": "false", "warned": "false"}) == 1
    assert v("autoswitch_controller_decisions_total", {"outcome": "sync_state_set", "zone_lost": "false",
                                                       "warned": "false"}) == 1
    assert v("autoswitch_controller_decisions_total", {"outcome": "elected", "zone_lost": "true", "warned": "true"}) == 1
