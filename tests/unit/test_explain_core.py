"""Every decision explains itself (issue 35 item 3), the pure parts: the state machine's Decision
record beside each election and SyncStateSet change (every replica, the rule that ruled it out),
the one-line summary that names what is missing, the bounded decision log, and the seeded
simulator's check that a dry run agrees with the election it precedes."""

from __future__ import annotations

import logging

from autoswitch.controller.messages import (
    TRIGGER_ADMIN,
    TRIGGER_CONTROLLER,
    BrokerLiveInfo,
    FinalizeFeaturesRequest,
    RegisterBrokerRequest,
    SetMaintenanceRequest,
)
from autoswitch.controller.state import explain
from autoswitch.controller.state.statemachine import handle

from autoswitch.base.limits import DECISIONS_KEPT_PER_GROUP
from tests.sim import controller_sim
from tests.unit.test_controller_sm_ops import C, G, group_with_master


def by_id(d: explain.Decision) -> dict[int, explain.Verdict]:
    return {v.broker_id: v for v in d.candidates}


def test_an_election_records_every_replica_and_why_it_lost():
    h = group_with_master()
    assert h.w(FinalizeFeaturesRequest(2)).ok and h.w(SetMaintenanceRequest(G, 3, True)).ok
    r = h.elect([BrokerLiveInfo(2, epoch=1, max_offset=400), BrokerLiveInfo(3, epoch=1, max_offset=450)],
                trigger=TRIGGER_CONTROLLER)
    d = r.decision
    assert r.ok and d.outcome == "elected" and d.master == 2 and d.index == h.index and d.rule == "ranked"
    v = by_id(d)
    assert v[1].ruled_out == explain.DEAD and not v[1].alive
    assert v[2].chosen and v[2].ruled_out == ""
    assert v[3].ruled_out == explain.IN_MAINTENANCE and v[3].maintenance and v[3].max_offset == 450
    assert d.summary == "broker 2 elected (ranked)"
    assert h.sm.decisions.latest_election(G) == d


def test_ranked_lower_says_by_what():
    h = group_with_master()
    r = h.elect([BrokerLiveInfo(2, epoch=1, max_offset=400), BrokerLiveInfo(3, epoch=1, max_offset=300)],
                trigger=TRIGGER_CONTROLLER)
    v = by_id(r.decision)
    assert v[3].ruled_out == explain.RANKED_LOWER
    assert v[3].why == "ranked below broker 2: it holds up to offset 300, 2 up to 400"


def test_no_master_names_what_is_missing():
    h = group_with_master()
    # 2 restarted uncleanly (it reports so), 3 is dead, the master 1 dead: nobody clean is left
    assert h.w(RegisterBrokerRequest(C, G, 2, "127.0.0.1:9002", clean_shutdown=False, ts_ms=h.ts)).ok
    r = h.elect([BrokerLiveInfo(2, epoch=1, max_offset=400, clean_shutdown=False)], trigger=TRIGGER_CONTROLLER,
                dead=(1, 3))
    d = r.decision
    assert d.outcome == "no_master" and d.code == "CONTROLLER_MASTER_NOT_AVAILABLE"
    assert by_id(d)[2].ruled_out == explain.UNCLEAN
    assert "broker 2 holds up to offset 400 of MasterEpoch 1 but is restarted after an unclean shutdown" in d.summary
    assert d.summary.startswith("no master: "), d.summary


def test_refusals_and_sync_state_set_changes_are_recorded_too():
    h = group_with_master()
    r = h.elect([BrokerLiveInfo(2)], trigger=TRIGGER_ADMIN, broker_id=9, designate=True)
    assert r.decision.outcome == "refused" and "not registered" in r.decision.rule
    assert h.alter([1, 2]).decision.outcome == "sync_state_set"
    got = h.sm.decisions.last(G)
    assert [d.outcome for d in got[:2]] == ["sync_state_set", "refused"]      # newest first
    assert explain.from_json(explain.to_json(got[0])) == got[0]


def test_a_dry_run_is_the_election_it_precedes():
    h = group_with_master()
    from autoswitch.controller.messages import ElectMasterRequest

    req = ElectMasterRequest(C, G, TRIGGER_CONTROLLER, 0, False, (BrokerLiveInfo(3, 1, 50),), ts_ms=h.ts,
                             dead_broker_ids=(1, 2))
    dry = handle(req, h.sm.state)[1]
    real = h.w(req)
    assert dry.decision.index == 0 and real.decision.index == h.index
    assert {**explain.msgspec.to_builtins(dry.decision), "index": h.index} == explain.msgspec.to_builtins(real.decision)


def test_the_decision_log_is_bounded():
    log = explain.DecisionLog()
    for i in range(DECISIONS_KEPT_PER_GROUP + 5):
        log.add(explain.Decision(group="g", request="ElectMaster", outcome="refused", index=i))
    assert len(log.last("g")) == DECISIONS_KEPT_PER_GROUP and log.last("g")[0].index == DECISIONS_KEPT_PER_GROUP + 4


def test_sim_dry_runs_agree_with_the_elections_and_maintenance_keeps_every_invariant():
    """The seeded controller simulator (Raft under faults) dry-runs every election it proposes on
    the proposing leader's state; each one applied right behind that state must be that election.
    With ``operator`` the workload also finalizes level 2 and cordons brokers and controllers."""
    logging.disable(logging.CRITICAL)
    try:
        agreed = 0
        for seed in range(12):
            agreed += controller_sim.ControllerSim(seed, operator=True).run().extra.get("dry_runs_agreed", 0)
            agreed += controller_sim.ControllerSim(seed).run().extra.get("dry_runs_agreed", 0)
    finally:
        logging.disable(logging.NOTSET)
    assert agreed > 100
