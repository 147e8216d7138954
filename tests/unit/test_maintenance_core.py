"""Maintenance mode, the pure parts (issue 35 item 1): the state machine's SetMaintenance and
SetControllerMaintenance (feature level 2, replicated, in the snapshot), elections passing over
cordoned replicas unless only they hold the acked data, the leader's DrainPlanner, and a Raft
member in maintenance that votes but never campaigns."""

from __future__ import annotations

from autoswitch.controller.codes import Code
from autoswitch.controller.failover.drain import DrainFacts, DrainPlanner, Member, drain_target
from autoswitch.controller.messages import (
    TRIGGER_ADMIN,
    TRIGGER_CONTROLLER,
    BrokerLiveInfo,
    CleanBrokerDataRequest,
    FinalizeFeaturesRequest,
    SetControllerMaintenanceRequest,
    SetMaintenanceRequest,
)
from autoswitch.controller.raft.harness import SimNet
from autoswitch.controller.state.sm_snapshot import decode_snapshot, encode_snapshot, state_hash

from tests.unit.test_controller_sm_ops import C, G, group_with_master


def at_level_2(**cfg):
    h = group_with_master(**cfg)
    assert h.w(FinalizeFeaturesRequest(2)).ok
    return h


def test_maintenance_needs_feature_level_2():
    h = group_with_master()
    r = h.w(SetMaintenanceRequest(G, 2, True))
    assert r.code == Code.CONTROLLER_FEATURE_UNSUPPORTED and "finalize-features --level 2" in r.remark
    r = h.w(SetControllerMaintenanceRequest("n1", True, voters=("n1", "n2", "n3")))
    assert r.code == Code.CONTROLLER_FEATURE_UNSUPPORTED


def test_set_maintenance_is_replicated_state_in_the_snapshot():
    h = at_level_2()
    assert h.w(SetMaintenanceRequest(G, 9, True)).code == Code.CONTROLLER_INVALID_REQUEST   # not registered
    r = h.w(SetMaintenanceRequest(G, 2, True))
    assert r.ok and r.replica.maintenance == (2,)
    assert h.history[-1]["event"] == "Maintenance" and h.history[-1]["reason"] == "maintenance_on:2"
    n = len(h.history)
    assert h.w(SetMaintenanceRequest(G, 2, True)).remark == "unchanged" and len(h.history) == n
    assert h.w(SetControllerMaintenanceRequest("n2", True, voters=("n1", "n2", "n3"))).ok
    state, idx = decode_snapshot(encode_snapshot(h.sm.state, 9))
    assert state.groups[G].maintenance == {2} and state.controller_maintenance == {"n2"} and idx == 9
    assert state_hash(state) == state_hash(h.sm.state)
    assert h.w(SetMaintenanceRequest(G, 2, False)).ok and h.view().maintenance == ()
    # a cleaned broker leaves maintenance with its id
    assert h.w(SetMaintenanceRequest(G, 3, True)).ok
    assert h.w(CleanBrokerDataRequest(C, G, (3,), True)).ok and h.view().maintenance == ()


def test_one_voter_stays_outside_controller_maintenance():
    h = at_level_2()
    voters = ("n1", "n2", "n3")
    assert h.w(SetControllerMaintenanceRequest("n1", True, voters=voters)).ok
    assert h.w(SetControllerMaintenanceRequest("n2", True, voters=voters)).ok
    r = h.w(SetControllerMaintenanceRequest("n3", True, voters=voters))
    assert r.code == Code.CONTROLLER_INVALID_REQUEST and "last voter outside maintenance" in r.remark
    assert h.w(SetControllerMaintenanceRequest("n1", False, voters=voters)).data == {"maintenance": ["n2"]}


def test_a_failover_passes_over_a_cordoned_replica_with_more_data():
    h = at_level_2()
    assert h.w(SetMaintenanceRequest(G, 2, True)).ok
    # 2 holds more than 3, but is cordoned: 3 (in sync, holds every acked message) wins
    r = h.elect([BrokerLiveInfo(2, max_offset=500), BrokerLiveInfo(3, max_offset=400)], trigger=TRIGGER_CONTROLLER)
    assert r.ok and r.replica.master_broker_id == 3, r


def test_only_cordoned_holders_left_one_of_them_is_elected():
    h = at_level_2()
    assert h.w(SetMaintenanceRequest(G, 2, True)).ok
    # 3 is dead: the only clean candidate is in maintenance; cordoning never costs availability
    r = h.elect([BrokerLiveInfo(2, max_offset=500)], trigger=TRIGGER_CONTROLLER, dead=(1, 3))
    assert r.ok and r.replica.master_broker_id == 2 and r.remark == "only_clean_replicas_in_maintenance", r


def test_an_operator_cannot_designate_a_cordoned_replica():
    h = at_level_2()
    assert h.w(SetMaintenanceRequest(G, 3, True)).ok
    r = h.elect([BrokerLiveInfo(2, max_offset=500), BrokerLiveInfo(3, max_offset=500)], trigger=TRIGGER_ADMIN,
                broker_id=3, designate=True, dead=(1,))
    assert r.code == Code.CONTROLLER_ELECT_MASTER_FAILED and "in maintenance" in r.remark, r


def _facts(master=1, maint=frozenset({1}), pref=0, members=None, group="g") -> DrainFacts:
    members = members if members is not None else (Member(1, True, True, 100), Member(2, True, True, 90),
                                                    Member(3, True, True, 95))
    return DrainFacts(group, master, 4, "127.0.0.1:1", maint, pref, tuple(members))


def test_drain_target_prefers_the_preferred_then_the_most_data_outside_maintenance():
    assert drain_target(_facts()) == 3
    assert drain_target(_facts(pref=2)) == 2
    assert drain_target(_facts(maint=frozenset({1, 3}))) == 2
    unhealthy = (Member(1, True, True, 100), Member(2, True, False, 90), Member(3, False, True, 95))
    why = drain_target(_facts(members=unhealthy))
    assert isinstance(why, str) and "no in-sync replica" in why
    alone = (Member(1, True, True, 100), Member(2, False, True, 90))
    why = drain_target(_facts(members=alone))
    assert isinstance(why, str) and "only replica holding every acknowledged message" in why


def test_drain_planner_bounds_in_flight_and_backs_off_after_a_failure():
    p = DrainPlanner(retry_after_ms=1000, max_in_flight=2)
    facts = [_facts(group=f"g{i}") for i in range(3)]
    moves = p.plan(facts, 0)
    assert [m.group for m in moves] == ["g0", "g1"] and "drains already running" in p.waiting["g2"]
    assert p.plan(facts, 1) == []                      # both still in flight
    p.done("g0", False, 10)
    assert [m.group for m in p.plan(facts, 20)] == ["g2"] and "failed" in p.waiting["g0"]
    p.done("g1", True, 30)
    p.done("g2", True, 30)
    moved = [facts[0], _facts(group="g1", master=3), _facts(group="g2", master=2)]   # g1, g2 handed over
    assert p.plan(moved, 999) == [] and [m.group for m in p.plan(moved, 1010)] == ["g0"]
    assert p.plan([_facts(maint=frozenset())], 2000) == []     # not draining


def test_a_raft_member_in_maintenance_votes_but_never_campaigns():
    net = SimNet(("n1", "n2", "n3"), seed=7)
    first = net.wait_leader()
    cordoned, free = [n for n in ("n1", "n2", "n3") if n != first]
    net.nodes[cordoned].core.no_campaign = True
    net.crash(first)
    assert net.run_until(lambda: net.leader() == free, 20_000)      # elected with the cordoned one's vote
    net.restart(first)
    net.run(2_000)
    net.crash(free)
    assert net.run_until(lambda: net.leader() == first, 20_000)
    assert net.leader() != cordoned
    # alone with a member that will not campaign, nobody leads; out of maintenance it does
    net.crash(first)
    net.run(5_000)
    assert net.leader() is None
    net.nodes[cordoned].core.no_campaign = False
    net.restart(free)
    assert net.run_until(lambda: net.leader() is not None, 20_000)


def test_a_level_2_config_key_is_refused_below_it_and_left_out_of_snapshots_at_its_default():
    from autoswitch.controller.messages import UpdateControllerConfigRequest

    h = group_with_master()
    # members of the first release hash a state without the key: so must this one, at its default
    assert "rebalance_max_in_flight" not in decode_snapshot(encode_snapshot(h.sm.state, 1))[0].config.snapshot_strings()
    r = h.w(UpdateControllerConfigRequest({"rebalance_max_in_flight": "3"}))
    assert r.code == Code.CONTROLLER_INVALID_REQUEST and "needs feature level 2" in r.remark
    assert h.w(FinalizeFeaturesRequest(2)).ok
    assert h.w(UpdateControllerConfigRequest({"rebalance_max_in_flight": "3"})).ok
    state, _ = decode_snapshot(encode_snapshot(h.sm.state, 1))
    assert state.config.rebalance_max_in_flight == 3


def test_a_broker_hands_over_to_no_cordoned_slave():
    from autoswitch.broker.replicas.rm_handover import pick_target

    acked = {2: 500, 3: 400}
    assert pick_target(1, frozenset({1, 2, 3}), acked, None) == 2
    assert pick_target(1, frozenset({1, 2, 3}), acked, None, frozenset({2})) == 3
    why = pick_target(1, frozenset({1, 2, 3}), acked, None, frozenset({2, 3}))
    assert isinstance(why, str) and "outside maintenance" in why
