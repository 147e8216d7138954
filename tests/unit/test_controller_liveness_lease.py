"""The lease argument of docs/controller.md, attacked with drifting clocks and lossy links.

``simulate`` (tests/sim/lease_sim.py) runs one scenario: one master broker heartbeats three
controllers over links that fail per time window; the leader scans, asks its peers
(``report_opinion``) about a master it does not hear, and on a majority DEAD verdict an election
commits after a delay shorter than ``hold_ms``. Claim checked: the old master's lease never
covers any real time at or after the commit. ``make soak`` runs 100,000 more scenarios from a
plain seeded generator (``python -m tests.sim.soak --lease-scenarios N``).
"""

from __future__ import annotations

import pytest
from autoswitch.controller.api import BrokerReport
from autoswitch.controller.failover.liveness import HeartbeatTable, Opinion
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.sim.lease_sim import END, HOLD, NODES, RHO, SCAN, check, run_scenarios, simulate, store_fence_model

__all__ = ["simulate"]

# Outages: (start, length). Partitions that start at time 0 (a controller that never heard the
# master) and ones that end on a scan instant are drawn far more often than chance would: the
# counterexample below needs both, and 40 unbiased examples found it only now and then.
starts = st.one_of(st.just(0), st.integers(0, END // SCAN).map(lambda i: i * SCAN), st.integers(0, END))
lengths = st.one_of(st.integers(0, 40_000 // SCAN).map(lambda i: i * SCAN), st.integers(0, 40_000))
window = st.tuples(starts, lengths)
outages = st.one_of(st.lists(window, min_size=1, max_size=3), st.just([(30_000, END)]), st.just([]))


@st.composite
def scenarios(draw):
    tie = draw(st.booleans())    # equal clocks and zero delays: events at the same instant
    rate = st.just(1.0) if tie else st.floats(1 - RHO, 1 + RHO)
    return {
        "rates": {n: draw(rate) for n in (*NODES, "broker")},
        "offsets": {n: 0 if tie else draw(st.integers(0, 10**9)) for n in NODES},
        "down_to": {n: draw(outages) for n in NODES},                           # broker -> node lost
        "down_from": {n: draw(st.lists(window, max_size=2)) for n in NODES},    # node -> broker lost
        "delay": 0 if tie else draw(st.integers(0, 300)),
        "commit_delay": draw(st.one_of(st.just(0), st.integers(0, 50), st.integers(0, 2_000),
                                       st.integers(0, HOLD - 5_000))),
        "apply_delay": draw(st.integers(0, 2_000)),
        "seed_delays": [0] * 8 if tie else draw(st.lists(st.integers(0, 300), min_size=8, max_size=8)),
        "leader": draw(st.sampled_from(NODES)),
        "restarts": draw(st.dictionaries(st.sampled_from(NODES), st.lists(
            st.tuples(st.integers(0, END), st.integers(0, 2_000)), min_size=1, max_size=2), max_size=2)),
    }


# A fixed seed (derandomize) and a few hundred examples: the default suite must not pass or fail
# by luck. ``make soak`` runs 100,000 scenarios of the same space.
@settings(max_examples=400, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_old_master_lease_ends_before_the_election_commits(sc):
    assert check(sc) is None, sc


# Found by the property test: n0 (the leader) never heard the master (partitioned from it since
# start), n2 lost it at 30 s, n1 always hears it. n0's first DEAD report (at 10 s) started its
# hold; at 39 s its link heals at the scan where n0 and n2 vote DEAD; the election commits at
# 40.001 s, but n0's hold, counted from 10 s, ran out at 40 s and n0 granted the heartbeat it had
# just heard: with n1 that is a majority, lease valid until 46 s.
NEVER_HEARD_HEALS_AT_A_SCAN = {
    "rates": {"n0": 1.0, "n1": 1.0, "n2": 1.0078125, "broker": 1.0}, "offsets": {"n0": 0, "n1": 0, "n2": 0},
    "down_to": {"n0": [(0, 38001)], "n1": [], "n2": [(30000, 90000)]}, "down_from": {"n0": [], "n1": [], "n2": []},
    "delay": 0, "commit_delay": 1001, "apply_delay": 0, "seed_delays": [0] * 8,
}


def test_regression_never_heard_controller_grants_nothing_after_its_dead_vote():
    commit_at, last_valid = simulate(NEVER_HEARD_HEALS_AT_A_SCAN)
    assert commit_at == 40_001
    assert last_valid is not None and last_valid <= commit_at, f"lease valid until {last_valid:.0f} ms"


def test_every_dead_report_restarts_the_hold_even_for_a_never_heard_broker():
    """The same story on one table: the hold runs from the LAST DEAD report, and no grant comes in
    the same instant as a DEAD vote, even on the first heartbeat the node ever hears."""
    t = HeartbeatTable(started_ms=0, timeout_ms=10_000, hold_ms=30_000, startup_grace_ms=0)
    assert t.report_opinion("g", 1, 10_000).opinion is Opinion.DEAD       # never heard: DEAD
    assert t.report_opinion("g", 1, 39_000).opinion is Opinion.DEAD       # still never heard
    t.record("g", _report(), 39_000)                                      # the first heartbeat ever
    assert not t.grants_lease("g", 1, 1, 1, 39_000), "a grant in the instant of a DEAD vote"
    t.record("g", _report(), 40_000)
    assert not t.grants_lease("g", 1, 1, 1, 40_000), "the hold ran from the first report, not the last"
    t.record("g", _report(), 68_999)
    assert not t.grants_lease("g", 1, 1, 1, 68_999)
    t.record("g", _report(), 69_000)
    assert t.grants_lease("g", 1, 1, 1, 69_000)                          # hold_ms after the last vote


def test_a_running_hold_keeps_its_length_when_the_timeout_is_lowered():
    """Issue 30 item 4: heartbeat_timeout_ms lowered at run time (hold_ms follows it, 3 x) must not
    shorten a hold already running: the election built on that DEAD vote may still be committing,
    and the old master's lease was granted under the longer timeout."""
    t = HeartbeatTable(started_ms=0, timeout_ms=10_000, hold_ms=30_000, startup_grace_ms=0)
    assert t.report_opinion("g", 1, 10_000).opinion is Opinion.DEAD
    t.timeout_ms, t.hold_ms = 2_000, 6_000                 # ControllerNode._sync_liveness_config
    t.record("g", _report(), 20_000)
    assert not t.grants_lease("g", 1, 1, 1, 20_000), "the lowered hold_ms cut a running hold short"
    t.record("g", _report(), 39_999)
    assert not t.grants_lease("g", 1, 1, 1, 39_999)
    t.record("g", _report(), 40_000)
    assert t.grants_lease("g", 1, 1, 1, 40_000)
    # a DEAD report after the change holds for the new length
    assert t.report_opinion("g", 2, 41_000).opinion is Opinion.DEAD
    t.record("g", _report(broker_id=2), 46_999)
    assert not t.grants_lease("g", 2, 1, 1, 46_999)
    t.record("g", _report(broker_id=2), 47_000)
    assert t.grants_lease("g", 2, 1, 1, 47_000)


def test_each_dead_report_reaches_the_restart_marker():
    """A restarted node pauses for what is left of its LAST report's hold, so every DEAD report
    (not only the first of a hold) must pass through on_hold before it leaves the node."""
    seen = []
    t = HeartbeatTable(started_ms=0, timeout_ms=10_000, hold_ms=30_000, startup_grace_ms=0,
                       on_hold=lambda key: seen.append(key))
    for now in (10_000, 20_000, 29_000):
        t.report_opinion("g", 1, now)
    assert seen == [("g", 1)] * 3


def test_applying_the_epoch_that_made_the_held_broker_master_keeps_the_hold():
    """A lagging node votes master 1 DEAD before it has applied the election that made 1 master
    (the leader asked about that newer epoch). Applying it must not end the hold: 1's heartbeats
    carry exactly that epoch. Applying an epoch with another master does end it (the deposed
    epoch is refused by the epoch check)."""
    t = HeartbeatTable(started_ms=0, timeout_ms=10_000, hold_ms=30_000, startup_grace_ms=0)
    assert t.report_opinion("g", 1, 12_000).opinion is Opinion.DEAD
    t.release("g", master_id=1)                 # applies epoch 5: master 1
    t.record("g", _report(epoch=5), 13_000)
    assert not t.grants_lease("g", 1, 5, 5, 13_000)
    t.release("g", master_id=2)                 # applies epoch 6: master 2
    assert not t.grants_lease("g", 1, 5, 6, 13_001)
    t.record("g", _report(broker_id=2, epoch=6), 13_001)
    assert t.grants_lease("g", 2, 6, 6, 13_001)


def test_restarted_node_grants_nothing_until_the_hold_of_its_last_report_is_over():
    """A node that voted DEAD and restarted (holds are in memory only) pauses its grants for
    hold_ms minus the age of its last report, taken from the fsynced marker."""
    sc = dict(NEVER_HEARD_HEALS_AT_A_SCAN, restarts={"n0": [(39_500, 100)]})
    commit_at, last_valid = simulate(sc)
    assert commit_at is not None and (last_valid is None or last_valid <= commit_at)
    fresh = HeartbeatTable(started_ms=0, timeout_ms=10_000, hold_ms=30_000, prior_dead_report_age_ms=1_000)
    fresh.record("g", _report(), 5)
    assert not fresh.grants_lease("g", 1, 1, 1, 28_999) and fresh.grants_lease("g", 1, 1, 1, 29_000)


def _report(broker_id: int = 1, epoch: int = 1):
    from autoswitch.controller.api import BrokerReport
    return BrokerReport(broker_id, epoch=epoch)


def test_majority_partition_does_elect_and_lease_is_gone_by_then():
    """A concrete schedule: the master loses n0 and n1 at 40 s for good."""
    sc = {
        "rates": {"n0": 1 + RHO, "n1": 1 + RHO, "n2": 1.0, "broker": 1 - RHO},
        "offsets": {"n0": 5, "n1": 70_000, "n2": 123},
        "down_to": {"n0": [(40_000, END)], "n1": [(40_000, END)], "n2": []},
        "down_from": {"n0": [], "n1": [], "n2": []},
        "delay": 50, "commit_delay": 0, "apply_delay": 500, "seed_delays": [0] * 8,
    }
    commit_at, last_valid = simulate(sc)
    assert commit_at is not None, "a majority lost the master: the leader must elect"
    assert last_valid is not None and last_valid <= commit_at


def test_one_broken_link_never_elects():
    sc = {
        "rates": {n: 1.0 for n in (*NODES, "broker")}, "offsets": {n: 0 for n in NODES},
        "down_to": {"n0": [(0, END)], "n1": [], "n2": []}, "down_from": {n: [] for n in NODES},
        "delay": 10, "commit_delay": 0, "apply_delay": 0, "seed_delays": [0] * 8,
    }
    assert simulate(sc)[0] is None
    assert Opinion.DEAD.value == "dead"


def test_dead_voters_hearing_the_master_again_before_the_commit_grant_nothing():
    """Case (ii): n0 and n1 lose the master for 15 s, vote it DEAD, then hear it again while the
    election takes 20 s to commit. Without the hold their replies would renew its lease."""
    sc = {
        "rates": {n: 1.0 for n in (*NODES, "broker")}, "offsets": {n: 0 for n in NODES},
        "down_to": {"n0": [(20_000, 15_000)], "n1": [(20_000, 15_000)], "n2": []},
        "down_from": {n: [] for n in NODES},
        "delay": 20, "commit_delay": 20_000, "apply_delay": 0, "seed_delays": [0] * 8,
    }
    commit_at, last_valid = simulate(sc)
    assert commit_at is not None and 30_000 <= commit_at <= 52_000
    assert last_valid is not None and last_valid <= commit_at


def test_controller_membership_changes_keep_the_lease_argument():
    """Two voter changes (add a fourth controller, remove an original) in every scenario, each
    appended late by some nodes and applied late by others, under the faults above
    (docs/controller.md "Controller membership"); `make soak` runs 20,000. The planted bugs
    membership_no_pacing and membership_grant_unapplied show the scenarios bite
    (tests/unit/test_sim_bugs.py)."""
    elections, bad = run_scenarios(0, 400, membership=True)
    assert elections > 100, "the scenarios must elect to attack anything"
    assert not bad, bad[0]


def test_store_backend_fencing_keeps_the_lease_argument():
    """The controllers keep their log in a store (docs/controller.md "Store backends"): the
    scanning leader holds a lock on SQL, etcd or ZooKeeper, pauses once (up to 60 s, often right
    after deciding an election) and its election write commits only until that backend fences
    it; the successor takes over when that backend lets it and scans (store_fence_model). `make soak` runs 20,000; the planted bug
    store_no_fence (the write commits anyway) is caught (tests/unit/test_sim_bugs.py)."""
    elections, bad = run_scenarios(0, 400, store=True)
    assert elections > 100, "the scenarios must elect to attack anything"
    assert not bad, bad[0]


@pytest.mark.parametrize(("kind", "takeover_at"), [("sql", 42_600), ("etcd", 42_000), ("zookeeper", 42_010)])
def test_a_paused_leaders_fenced_election_is_redone_by_its_successor(kind, takeover_at):
    """One directed scenario per store backend: the master is unreachable from 30 s on; the
    leader decides at 39.25 s and is paused right after for 20 s, past its 3 s lock (renewed
    every 600 ms, last at 39 s): its write is refused and the successor elects on its own
    opinions, long before the paused leader resumes; without fencing the paused leader's write
    would land ~20 s later. When the successor leads depends on the backend's fencing
    (lease_sim.store_fence_model): SQL at its next look after the row expired (42 s + 600 ms);
    etcd when its revoke loop deletes the 3 s lease's key (42 s, before the successor's own
    silence count of 3.6 s ends); ZooKeeper at the tick after the session timeout (42 s with a
    2 s tick) plus the watch's 10 ms."""
    sc = {"rates": dict.fromkeys((*NODES, "broker"), 1.0), "offsets": {}, "down_to": dict.fromkeys(NODES, [(30_000, END)]),
          "down_from": {}, "delay": 0, "commit_delay": 100, "apply_delay": 0, "seed_delays": [0] * 8,
          "store": {"kind": kind, "tick": 2_000, "watch_ms": 10, "revoke_phase": 0, "poll_phase": 0,
                    "lock": 3_000, "pause_at": 0, "pause_after": 0, "pause_ms": 20_000, "successor": "n1"}}
    assert store_fence_model(sc["store"], 39_250)[1] == takeover_at
    commit_at, last_valid = simulate(sc)
    assert commit_at is not None and takeover_at < commit_at < takeover_at + 1_000   # the successor's election
    assert last_valid is not None and last_valid <= commit_at
    unfenced, _ = simulate(sc, rules=frozenset({"store_fence"}))
    assert unfenced is not None and unfenced > commit_at + 10_000    # the paused leader's late write


def test_an_election_committed_late_holds_the_new_masters_grants():
    """Issue 30 item 5: a controller leader appended an ElectMaster, lost its followers for
    minutes and was elected again when they returned; the stale election committed while the old
    master held a fresh lease. Each node now holds grants to the new master for the hold window
    when it applies an election stamped more than a heartbeat timeout ago."""
    t = HeartbeatTable(started_ms=0, timeout_ms=1000, hold_ms=3000)
    t.record("g", BrokerReport(2, epoch=5), 10_000)
    assert t.grants_lease("g", 2, 5, 5, 10_000)
    assert not t.election_applied("g", 2, entry_ts_ms=99_500, wall_ms=100_000, now_ms=10_000), "on time"
    assert t.grants_lease("g", 2, 5, 5, 10_000)
    assert t.election_applied("g", 2, entry_ts_ms=100_000 - 180_000, wall_ms=100_000, now_ms=10_000)
    t.record("g", BrokerReport(2, epoch=5), 12_000)
    assert not t.grants_lease("g", 2, 5, 5, 12_000), "held: the old master's lease may still run"
    t.record("g", BrokerReport(2, epoch=5), 13_100)
    assert t.grants_lease("g", 2, 5, 5, 13_100), "held for hold_ms only"


def test_no_lease_grant_to_a_broker_sized_for_a_longer_timeout():
    """Found by the lease simulator's runtime timeout changes: heartbeat_timeout_ms lowered while
    the master was not heard by anyone (the floor counts brokers heard within the timeout) let
    its next lease, sized for the old timeout, outlive an election. A node grants no lease to a
    broker whose stated timeout is longer than its own."""
    from autoswitch.controller.api import BrokerReport
    from autoswitch.controller.failover.liveness import HeartbeatTable

    t = HeartbeatTable(started_ms=0, timeout_ms=3_000, startup_grace_ms=0)
    t.record("g", BrokerReport(1, epoch=1, assumed_timeout_ms=10_000), 100)
    assert t.lease_refusal("g", 1, 1, 1, 100) == "timeout"
    t.record("g", BrokerReport(1, epoch=1, assumed_timeout_ms=3_000), 200)
    assert t.lease_refusal("g", 1, 1, 1, 200) is None
    t.timeout_ms = 10_000                       # raised: a shorter lease is safe
    assert t.lease_refusal("g", 1, 1, 1, 300) is None


def test_grant_pause_left_covers_the_start_pause_and_every_hold():
    """What a restarted controller reports (lease_grants_paused_ms, /readyz): how long it may still
    refuse some master its lease. A log replay applies old elections late, so a restart holds the
    current masters for hold_ms: the next controller of a rolling restart waits for 0."""
    from autoswitch.controller.failover.liveness import NEVER_REPORTED, HeartbeatTable

    t = HeartbeatTable(started_ms=0, timeout_ms=3000, prior_dead_report_age_ms=NEVER_REPORTED)
    assert t.grant_pause_left_ms(0) == 0                       # a new data dir: nothing to wait for
    assert t.election_applied("g1", 1, entry_ts_ms=0, wall_ms=8000, now_ms=100)   # replayed: late
    assert t.grant_pause_left_ms(100) == 9000 and t.grant_pause_left_ms(5100) == 4000
    assert t.grant_pause_left_ms(9100) == 0 and t.grant_pause_left_ms(20_000) == 0
    assert not t.election_applied("g1", 2, entry_ts_ms=10_000, wall_ms=11_000, now_ms=11_000)  # on time
    assert t.grant_pause_left_ms(11_000) == 0
    # a DEAD report 2 s before the restart: the start pause is the rest of its hold
    u = HeartbeatTable(started_ms=50_000, timeout_ms=3000, prior_dead_report_age_ms=2000)
    assert u.grant_pause_left_ms(50_000) == 7000 and u.grant_pause_left_ms(57_000) == 0
