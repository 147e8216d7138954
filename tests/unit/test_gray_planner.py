"""Gray failover's planner (controller/failover/gray.py): a degraded master moves to a healthy
in-sync slave after the delay; never to a slow, diverged, dead or out-of-set replica; once per
group per cool-down (a new leader waits a whole one too); never while most of the cluster is
degraded; one move at a time; a failed move waits."""

from __future__ import annotations

from autoswitch.controller.failover.gray import GrayPlanner, GroupHealth, Replica

DELAY, COOL = 5_000, 60_000


def group(name="g", master=1, epoch=3, slow=("fsync",), **slaves) -> GroupHealth:
    reps = [Replica(master, True, True, tuple(slow), max_offset=100)]
    for bid, kw in sorted(slaves.items()):
        base = dict(alive=True, in_sync=True, degraded=(), diverged=False, max_offset=90)
        base.update(kw)
        reps.append(Replica(int(bid[1:]), **base))
    return GroupHealth(name, master, epoch, f"{name}-m:1", tuple(reps))


def test_moves_a_degraded_master_after_the_delay_and_cooldown():
    p = GrayPlanner()
    g = group(b2={}, b3={"max_offset": 95})
    assert p.plan([g], DELAY, COOL, now_ms=0) is None          # epoch first seen now: cool-down starts
    assert p.waiting == {"g": "delay"}
    assert p.plan([g], DELAY, COOL, now_ms=DELAY) is None
    assert p.waiting == {"g": "cooldown"}
    move = p.plan([g], DELAY, COOL, now_ms=COOL)
    assert move is not None and (move.group, move.master, move.to, move.reasons) == ("g", 1, 3, ("fsync",))
    assert p.in_flight == "g"
    p.done("g", True, COOL + 100)
    # the next epoch's master (slow too) waits a whole cool-down from when the epoch is seen
    g2 = GroupHealth("g", 3, 4, "x:1", (Replica(3, True, True, ("fsync",)), Replica(1, True, True, ()),
                                       Replica(2, True, True, ())))
    assert p.plan([g2], DELAY, COOL, now_ms=COOL + 200) is None
    assert p.plan([g2], DELAY, COOL, now_ms=2 * COOL + 100) is None
    assert p.plan([g2], DELAY, COOL, now_ms=2 * COOL + 300) is not None


def test_a_break_in_the_degradation_restarts_the_delay():
    p = GrayPlanner()
    assert p.plan([group(b2={})], DELAY, 0, 0) is None
    assert p.plan([group(slow=(), b2={})], DELAY, 0, 3_000) is None     # healthy again
    assert p.plan([group(b2={})], DELAY, 0, 4_000) is None
    assert p.plan([group(b2={})], DELAY, 0, 8_000) is None              # 4 s since it came back
    assert p.plan([group(b2={})], DELAY, 0, 9_000) is not None


def test_never_to_a_replica_that_is_slow_diverged_dead_or_out_of_the_set():
    healthy = group("h", slow=(), b2={}, b3={})     # the rest of the cluster is fine: no storm
    for bad in ({"degraded": ("loop_lag",)}, {"diverged": True}, {"alive": False}, {"in_sync": False}):
        p = GrayPlanner()
        g = group(b2=bad)
        assert p.plan([g, healthy], 0, 0, 0) is None, bad
        assert p.waiting == {"g": "no_healthy_in_sync_slave"}
    p = GrayPlanner()
    move = p.plan([group(b2={"degraded": ("fsync",)}, b3={"max_offset": 1}), healthy], 0, 0, 0)
    assert move is not None and move.to == 3


def test_a_dead_or_healthy_master_is_not_moved():
    p = GrayPlanner()
    assert p.plan([group(slow=(), b2={})], 0, 0, 0) is None
    dead = GroupHealth("g", 1, 3, "m:1", (Replica(1, False, True, ("fsync",)), Replica(2, True, True, ())))
    assert p.plan([dead], 0, 0, 0) is None           # a dead master is the failover scan's
    assert p.plan([GroupHealth("g", None, 3, "", (Replica(2, True, True, ()),))], 0, 0, 0) is None


def test_no_storm_when_most_of_the_cluster_is_degraded():
    """Shared storage slow for everyone: no group moves, and the planner says why."""
    p = GrayPlanner()
    slow = ("fsync",)
    groups = [group("a", b2={"degraded": slow}, b3={}), group("b", b2={"degraded": slow}, b3={})]
    assert p.plan(groups, 0, 0, 0) is None
    assert p.storm and p.waiting == {"a": "cluster_degraded", "b": "cluster_degraded"}
    # one degraded master among six brokers: it moves
    groups = [group("a", b2={}, b3={}), group("b", slow=(), b2={}, b3={})]
    assert p.plan(groups, 0, 0, 0) is not None and not p.storm


def test_one_move_at_a_time_and_a_failed_move_waits():
    p = GrayPlanner(retry_after_ms=10_000)
    groups = [group("a", b2={}), group("b", b2={}), group("c", slow=(), b2={}), group("d", slow=(), b2={}),
              group("e", slow=(), b2={})]
    first = p.plan(groups, 0, 0, 0)
    assert first is not None and first.group == "a"
    assert p.plan(groups, 0, 0, 1) is None and p.waiting["b"] == "another_move_in_flight"
    p.done("a", False, 2)
    second = p.plan(groups, 0, 0, 3)
    assert second is not None and second.group == "b"
    p.done("b", True, 4)
    groups[1] = group("b", master=2, epoch=4, slow=(), b1={})     # b's move took effect
    assert p.plan(groups, 0, 0, 5) is None and p.waiting["a"] == "retry_after_failure"
    assert p.plan(groups, 0, 0, 10_002) is not None


def test_forgets_groups_that_are_gone():
    p = GrayPlanner()
    p.plan([group("a", b2={})], DELAY, COOL, 0)
    p.plan([], DELAY, COOL, 1)
    assert not p._epoch_seen and not p._degraded
