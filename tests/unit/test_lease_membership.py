"""The master lease across a controller membership change (broker/replicas/lease.py, controller/failover/lease.py,
controller/server/membership_ops.py)."""

from __future__ import annotations

from autoswitch.broker.replicas.lease import LeaseConfig, MasterLease
from autoswitch.controller.consensus.membership import Member, Membership
from autoswitch.controller.failover.lease import lease_quorum_ok, membership_refusal
from autoswitch.controller.server.membership_ops import MembershipView

CFG = LeaseConfig(master_lease_ms=600, heartbeat_timeout_ms=1000, safety_ms=100)


def test_a_new_list_keeps_what_was_granted_and_counts_only_its_own_answers():
    lease = MasterLease(["c1", "c2", "c3"], CFG)
    r = lease.on_round_sent(10.0)
    lease.on_reply("c1", r, 10.01)
    assert lease.on_reply("c2", r, 10.02)
    assert lease.expires_at() == 10.6
    assert lease.replace_controllers(["c2", "c3", "c4", "c5", "c6"])
    assert lease.quorum == 3 and lease.valid(10.5), "the old grants keep their expiry"
    r2 = lease.on_round_sent(10.4)
    assert not lease.on_reply("c1", r2, 10.41), "a removed controller's answer counts no more"
    lease.on_reply("c2", r2, 10.41)
    assert not lease.on_reply("c3", r2, 10.42), "two of five are no majority"
    assert not lease.valid(10.61)
    assert lease.on_reply("c4", r2, 10.7)
    assert lease.expires_at() == 11.0
    assert not lease.replace_controllers(["c2", "c3", "c4", "c5", "c6"]) and not lease.replace_controllers([])


def test_voters_grant_only_to_a_lease_quorum_that_meets_every_electing_majority():
    # k grants (all from voters) and any majority of |V| voters must share a member: k + maj(V) > |V|
    assert lease_quorum_ok(2, 3) and lease_quorum_ok(2, 4) and lease_quorum_ok(3, 5)
    assert not lease_quorum_ok(2, 5), "a 3-controller list's lease next to five voters"
    assert not lease_quorum_ok(1, 3)
    assert not lease_quorum_ok(0, 9), "not stated: refused (it skipped the quorum rule)"
    assert not lease_quorum_ok(0, 1) and not lease_quorum_ok(-1, 3)
    from itertools import combinations

    for v in range(1, 8):
        voters = range(v)
        for k in range(1, v + 1):
            # brute force: does every k granting voters meet every majority of voters?
            meets = all(set(g) & set(d) for g in combinations(voters, k) for d in combinations(voters, v // 2 + 1))
            assert lease_quorum_ok(k, v) == meets, (k, v)


def test_answers_to_rounds_sent_before_an_adoption_never_count():
    # a grant names the configuration its round named: rounds of another one must not mix in
    lease = MasterLease(["c1", "c2", "c3"], CFG)
    r = lease.on_round_sent(10.0)
    lease.on_reply("c1", r, 10.01)
    assert not lease.replace_controllers(["c1", "c2", "c3"]), "the same list under a newer configuration"
    assert not lease.on_reply("c2", r, 10.02) and not lease.on_reply("c3", r, 10.03)
    assert lease.expires_at() is None
    r2 = lease.on_round_sent(10.1)
    lease.on_reply("c1", r2, 10.11)
    assert lease.on_reply("c2", r2, 10.12) and lease.expires_at() == 10.7


def test_a_voter_grants_only_under_its_applied_configuration_named_by_the_broker():
    three = Membership.of_ids(["n1", "n2", "n3"])
    four = Membership.of_ids(["n1", "n2", "n3", "n4"])
    assert membership_refusal("n1", 2, 0, (0, three, True)) is None
    assert membership_refusal("n1", 2, 7, (7, four, True)) is None
    assert membership_refusal("n1", 2, 7, (7, four, False)) == "membership_change_pending"
    assert membership_refusal("n1", 2, 0, (7, four, True)) == "other_membership", "the broker counts the old voters"
    assert membership_refusal("n1", 2, 9, (7, four, True)) == "other_membership"
    assert membership_refusal("n1", 0, 0, (7, four, True)) == "other_membership", "a broker that names none"
    assert membership_refusal("n1", 1, 7, (7, four, True)) == "lease_quorum"
    assert membership_refusal("n9", 2, 7, (7, four, True)) == "not_voter"
    assert membership_refusal("n4", 2, 0, (0, three, True)) == "not_voter", "a learner"


def test_heartbeat_replies_advertise_the_applied_configuration_only():
    four = Membership({"n1": Member("h:1"), "n2": Member("h:2"), "n3": Member("h:3"), "n4": Member("h:4")}, {})
    v = MembershipView("n1", Membership.of_ids(["n1", "n2", "n3"]), {"n1": "c:1", "n2": "c:2", "n3": "c:3"})
    assert v.broker_view((0, Membership.of_ids(["n1", "n2", "n3"]), True)) == (0, ["c:1", "c:2", "c:3"])
    assert v.broker_view((7, four, False)) == (7, ["h:1", "h:2", "h:3", "h:4"])
