"""The master lease across a controller membership change (broker/lease.py, controller/membership_ops.py)."""

from __future__ import annotations

from autoswitch.broker.lease import LeaseConfig, MasterLease
from autoswitch.controller.membership_ops import lease_quorum_ok

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
    assert lease_quorum_ok(0, 9), "not stated (older brokers): as before"
    from itertools import combinations

    for v in range(1, 8):
        voters = range(v)
        for k in range(1, v + 1):
            # brute force: does every k granting voters meet every majority of voters?
            meets = all(set(g) & set(d) for g in combinations(voters, k) for d in combinations(voters, v // 2 + 1))
            assert lease_quorum_ok(k, v) == meets, (k, v)
