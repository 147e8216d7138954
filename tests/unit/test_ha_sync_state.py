"""SyncStateSet shrink/expand, the union rule, confirmOffset and ack modes, on a fake clock."""

from __future__ import annotations

import pytest
from autoswitch.ha.config import HAConfig
from autoswitch.ha.sync_state import LOOK_EVERY_S, SyncStateTracker

from autoswitch.base.write_errors import InSyncReplicasNotEnough


def tracker(sss=(1, 2, 3), mode="all", **kw) -> SyncStateTracker:
    cfg = HAConfig(ack_mode=mode, ha_max_time_slave_not_catchup_s=15.0, **kw).validate()
    return SyncStateTracker(1, 5, frozenset(sss), 10, cfg, now=0.0)


def test_confirm_offset_is_min_over_members_and_monotonic():
    t = tracker()
    t.on_connect(2, False, 0)
    t.on_connect(3, False, 0)
    t.on_ack(2, 500, 0, master_max=1000)
    assert t.confirm_offset(1000) == 0            # 3 unknown
    t.on_ack(3, 700, 0, master_max=1000)
    assert t.confirm_offset(1000) == 500
    t.on_connect(2, False, 1)                     # reconnect: ack unknown again
    assert t.confirm_offset(1000) == 500          # never backwards
    # A non-member does not hold the confirm back.
    t.on_connect(9, True, 1)
    t.on_ack(2, 900, None, 1000)
    assert t.confirm_offset(1000) == 700


def test_shrink_after_not_catching_up_for_the_window():
    t = tracker()
    t.on_connect(2, False, 0)
    t.on_connect(3, False, 0)
    t.on_ack(2, 100, 1.0, 100)
    t.on_ack(3, 100, 1.0, 100)
    assert t.tick(15.0, 100) is None
    t.on_ack(2, 100, 16.0, 200)                    # 2 keeps up, 3 goes quiet
    assert t.tick(16.0, 200) is None
    p = t.tick(16.5, 200)
    assert p is not None and p.new_set == frozenset({1, 2}) and p.base_sync_state_set_epoch == 10
    assert t.tick(17.0, 200) is None              # one proposal in flight at a time


def test_disconnected_member_is_shrunk_at_once_never_connected_after_grace():
    t = tracker()
    t.on_connect(2, False, 0)
    t.on_disconnect(2, 1.0)
    p = t.tick(1.0, 0)
    assert p.new_set == frozenset({1, 3})         # 3 never connected: still in its grace window
    t.on_proposal_accepted(p.new_set, 11, 1.0)
    p = t.tick(15.5, 0)
    assert p.new_set == frozenset({1})


def test_expand_needs_confirm_and_current_epoch_start():
    cfg = HAConfig().validate()
    t = SyncStateTracker(1, 5, frozenset({1}), 10, cfg, now=0.0, epoch_start_offset=400)
    t.on_connect(2, False, 0)
    t.on_ack(2, 300, None, 1000)
    assert t.tick(1.0, 1000) is None              # below confirm (1000) and the epoch start
    t.on_ack(2, 1000, 1.0, 1000)
    assert t.tick(1.0, 1000) is None              # looked at 1.0 already: acks alone do not force a look
    p = t.tick(1.0 + LOOK_EVERY_S, 1000)
    assert p.new_set == frozenset({1, 2})
    t.on_proposal_accepted(p.new_set, 11, 1.0)
    assert t.sync_state_set == frozenset({1, 2}) and t.sync_state_set_epoch == 11


def test_async_learner_never_joins_and_never_counts():
    t = tracker(sss=(1,))
    t.on_connect(7, True, 0)
    t.on_ack(7, 1000, 0.5, 1000)
    assert t.tick(1.0, 1000) is None
    assert t.is_acked(1000, 1000)


def test_union_rule_while_a_proposal_is_in_flight():
    """RocketMQ #5663: during a change, an ack must hold under both the old and the new set."""
    t = tracker(sss=(1, 2))
    t.on_connect(2, False, 0)
    t.on_connect(3, False, 0)
    t.on_ack(2, 100, 0.0, 100)
    t.on_ack(3, 100, 0.0, 100)
    p = t.tick(0.5, 100)                          # expand with 3
    assert p.new_set == frozenset({1, 2, 3})
    t.on_ack(2, 200, None, 300)
    assert not t.is_acked(200, 300), "3 is in the proposed set and lacks 200"
    t.on_ack(3, 200, None, 300)
    assert t.is_acked(200, 300)
    t.on_proposal_accepted(p.new_set, 11, 1.0)
    # Shrink in flight: 3 is leaving, but until the controller agrees it still counts.
    t.on_disconnect(3, 2.0)
    p = t.tick(2.0, 400)
    assert p.new_set == frozenset({1, 2})
    t.on_ack(2, 400, None, 400)
    assert not t.is_acked(400, 400)
    assert t.confirm_offset(400) == 200
    t.on_proposal_accepted(p.new_set, 12, 2.5)
    assert t.is_acked(400, 400) and t.confirm_offset(400) == 400


def test_failed_proposals_back_off_exponentially_and_are_capped():
    t = tracker(sss=(1, 2), proposal_backoff_min_s=0.2, proposal_backoff_max_s=1.0)
    t.on_connect(2, False, 0)
    t.on_disconnect(2, 0)
    now, gaps = 0.0, []
    last = None
    while len(gaps) < 5 and now < 30:
        p = t.tick(now, 0)
        if p is not None:
            if last is not None:
                gaps.append(now - last)
            last = now
            t.on_proposal_failed(now)
        now = round(now + 0.01, 2)
    assert gaps == pytest.approx([0.2, 0.4, 0.8, 1.0, 1.0], abs=0.011)


def test_ack_mode_master():
    t = tracker(mode="master")
    assert t.is_acked(100, 100) and not t.is_acked(101, 100)
    t.check_enough()                             # master mode never needs slaves


def test_ack_mode_in_sync_replicas_counts_n_including_master():
    t = tracker(sss=(1, 2, 3), mode="in_sync_replicas", in_sync_replicas=2, min_in_sync_replicas=2)
    t.on_connect(2, False, 0)
    t.on_connect(3, False, 0)
    assert not t.is_acked(100, 100)
    t.on_ack(3, 100, 0.0, 100)
    assert t.is_acked(100, 100)
    # During a shrink of 3, only replicas in both sets count.
    t.on_disconnect(3, 1.0)
    t.tick(1.0, 100)
    assert not t.is_acked(100, 100)


def test_min_in_sync_replicas_fails_fast():
    t = tracker(sss=(1, 2, 3), min_in_sync_replicas=2)
    with pytest.raises(InSyncReplicasNotEnough) as ei:
        t.check_enough()
    assert ei.value.code == "IN_SYNC_REPLICAS_NOT_ENOUGH"
    t.on_connect(2, False, 0)
    t.check_enough()
    t.on_connect(4, False, 0)                     # alive but not a member: does not count
    t.on_disconnect(2, 1)
    with pytest.raises(InSyncReplicasNotEnough):
        t.check_enough()


def test_stale_proposal_answer_is_ignored():
    t = tracker(sss=(1, 2))
    t.on_sync_state_set(frozenset({1, 2, 3}), 12)
    t.on_proposal_accepted(frozenset({1}), 11, 0.0)
    assert t.sync_state_set == frozenset({1, 2, 3})


@pytest.mark.parametrize("mode", ["all", "in_sync_replicas"])
def test_nothing_acked_while_a_possible_set_is_below_min_in_sync_replicas(mode):
    """A1 of docs/controller.md: the controller keeps a shrunk-away member *eligible* (electable)
    only while the set is below minInSyncReplicas, assuming the master acknowledges nothing then.
    A write admitted while the set was big enough must not be acknowledged by the master alone once
    the set has shrunk below it, nor may confirmOffset move past what the eligible member holds."""
    t = tracker(sss=(1, 2), mode=mode, min_in_sync_replicas=2, in_sync_replicas=2)
    t.on_connect(2, False, 0)
    t.on_ack(2, 100, 0.0, master_max=100)
    t.check_enough()                                  # the write at 200 is admitted
    assert not t.is_acked(200, 200) and t.confirm_offset(200) == 100
    t.on_disconnect(2, 1.0)
    p = t.tick(20.0, 200)                             # 2 lags too long: shrink to {1}
    assert p is not None and p.new_set == frozenset({1})
    assert not t.is_acked(200, 200) and t.confirm_offset(200) == 100   # in flight: union
    t.on_proposal_accepted(frozenset({1}), 11, 20.0)  # committed: 2 is now eligible
    assert not t.is_acked(200, 200), "acknowledged alone below minInSyncReplicas"
    assert t.confirm_offset(200) == 100
    t.on_connect(2, False, 21.0)
    t.on_ack(2, 200, 21.0, 200)
    t.on_sync_state_set(frozenset({1, 2}), 12)        # back to two members
    assert t.is_acked(200, 200) and t.confirm_offset(200) == 200


# ------------------------------------------------------------------ stalled members (issue 32)

def _caught_up(t: SyncStateTracker, top: int, now: float) -> None:
    for b in (2, 3):
        t.on_ack(b, top, now, top)
    t.tick(now, top)


def test_a_member_behind_without_progress_leaves_at_the_stall_timeout_not_the_catch_up_one():
    t = tracker(slave_stall_timeout_s=3.0)
    t.on_connect(2, False, 0.0)
    t.on_connect(3, False, 0.0)
    # idle for a long time, caught up (heartbeats are acked): no stall clock runs
    for now in range(1, 21):
        _caught_up(t, 1000, float(now))
    assert t.tick(20.0, 1000) is None
    # writes arrive at 20.0: 2 keeps acking, 3 stops (its disk hangs, the connection stays)
    for i in range(1, 8):
        now, top = 20.0 + i * 0.5, 1000 + i * 100
        t.on_ack(2, top, now, top)
        p = t.tick(now, top)
        if i * 0.5 <= 3.0:
            assert p is None, f"dropped after {i * 0.5} s"
    assert p is not None and p.new_set == frozenset({1, 2}) and p.reasons == ((3, "stalled"),)


def test_a_slow_member_that_keeps_acking_stays():
    t = tracker(slave_stall_timeout_s=3.0)
    t.on_connect(2, False, 0.0)
    t.on_connect(3, False, 0.0)
    _caught_up(t, 1000, 0.5)
    for i in range(1, 20):
        now, top = 1.0 + i * 0.5, 1000 + i * 1000
        t.on_ack(2, top, now, top)
        t.on_ack(3, 1000 + i * 10, None, top)       # far behind, but moving
        assert t.tick(now, top) is None


def test_the_stall_rule_can_be_switched_off():
    t = tracker(slave_stall_timeout_s=0.0)
    t.on_connect(2, False, 0.0)
    t.on_connect(3, False, 0.0)
    _caught_up(t, 1000, 0.5)
    for i in range(1, 20):
        now, top = 1.0 + i * 0.5, 1000 + i * 100
        t.on_ack(2, top, now, top)
        assert t.tick(now, top) is None             # 3 is within the 15 s catch-up window


# ------------------------------------------------------------------ slow members (issue 32)

def _write_and_ack(t: SyncStateTracker, start: float, seconds: int, lag_s: dict[int, float],
                   step: float = 0.1) -> list:
    """Writes every ``step`` s for ``seconds``; each slave b acks each write ``lag_s[b]`` later.
    Returns the proposals the tracker made (each one accepted at once)."""
    proposals = []
    top, now, pending = max((m[0] for m in t._marks), default=1000), start, []
    end = start + seconds

    def take(p) -> None:
        if p is not None:
            proposals.append(p)
            t.on_proposal_accepted(p.new_set, t.sync_state_set_epoch + 1, now)

    while now < end:
        now = round(now + step, 6)
        top += 100
        pending.append((top, now))
        take(t.tick(now, top))                  # the master's log reached ``top`` at ``now``
        for b, lag in lag_s.items():
            acked = max((o for o, w in pending if w + lag <= now), default=None)
            if acked is not None:
                t.on_ack(b, acked, now if acked == top else None, top, now)
        take(t.tick(now, top))
    return proposals


def _slow_tracker(**kw) -> SyncStateTracker:
    t = tracker(slave_slow_ack_ms=500.0, slave_slow_windows=3, slave_recover_windows=4, **kw)
    t.on_connect(2, False, 0.0)
    t.on_connect(3, False, 0.0)
    return t


def test_a_member_whose_acks_trail_the_writes_leaves_as_slow_and_comes_back_once_fast():
    t = _slow_tracker()
    # 3's acks trail by 0.8 s (a slow disk): it still moves, so the stall rule never fires
    ps = _write_and_ack(t, 0.0, 8, {2: 0.0, 3: 0.8})
    assert [p.reasons for p in ps] == [((3, "slow"),)]
    assert t.sync_state_set == frozenset({1, 2})
    assert next(i for i in t.replica_infos(0) if i["brokerId"] == 3)["slow"]
    # still slow: it does not come back although it catches up now and then
    assert _write_and_ack(t, 8.0, 4, {2: 0.0, 3: 0.8}) == []
    # its disk is fast again: back after the recovery windows, not before
    ps = _write_and_ack(t, 12.0, 8, {2: 0.0, 3: 0.0})
    assert [p.new_set for p in ps] == [frozenset({1, 2, 3})]


def test_no_slave_is_slow_while_the_master_is_degraded_itself():
    t = _slow_tracker()
    t.self_degraded = True
    assert _write_and_ack(t, 0.0, 8, {2: 0.8, 3: 0.8}) == []


def test_the_slow_rule_keeps_min_in_sync_replicas():
    t = _slow_tracker(min_in_sync_replicas=3)
    assert _write_and_ack(t, 0.0, 8, {2: 0.0, 3: 0.8}) == []


def test_catching_up_on_old_writes_is_not_slowness():
    """A slave that connects late and replays the history acks offsets written long before: not
    measured (only writes made while it was connected count)."""
    t = tracker(sss=(1, 2), slave_slow_ack_ms=500.0, slave_slow_windows=2)
    t.on_connect(2, False, 0.0)
    for i in range(1, 50):
        t.tick(i * 0.1, 1000 + i * 100)
        t.on_ack(2, 1000 + i * 100, None, 1000 + i * 100, i * 0.1)
    t.on_connect(3, False, 5.0)
    for i in range(1, 30):
        now = 5.0 + i * 0.1
        t.on_ack(3, min(1000 + i * 200, 5900), None, 5900, now)   # replaying what 0.1-4.9 s wrote
        t.tick(now, 5900)
    assert not t.replicas[3].ack_latency or not t.replicas[3].ack_latency.slow


def test_the_stall_rule_waits_while_the_master_is_degraded_itself():
    t = tracker(slave_stall_timeout_s=3.0)
    t.on_connect(2, False, 0.0)
    t.on_connect(3, False, 0.0)
    _caught_up(t, 1000, 0.5)
    t.self_degraded = True
    for i in range(1, 20):
        now, top = 1.0 + i * 0.5, 1000 + i * 100
        t.on_ack(2, top, now, top)
        assert t.tick(now, top) is None             # 3's silence may be our own slowness
    t.self_degraded = False
    p = t.tick(11.0, 3000)
    assert p is not None and p.reasons == ((3, "stalled"),)


def test_a_set_other_than_the_refused_one_is_proposed_without_waiting_out_the_backoff():
    """bench-rolling, 2026-11-29: after a handover the new master's set was {1}; it proposed {1,3}
    (3, the old master, connected briefly while it shut down), the controller refused (3 not
    alive), and the backoff held every proposal for ~0.5 s although 2 had caught up meanwhile:
    ack mode all wrote nothing for 544 ms. The refused set waits; a new one goes at once."""
    t = tracker(sss=(1,), proposal_backoff_min_s=0.5, proposal_backoff_max_s=1.0)
    t.on_connect(3, False, 0.0)
    t.on_ack(3, 100, 0.0, 100)
    p = t.tick(0.0, 100)
    assert p is not None and p.new_set == frozenset({1, 3})
    t.on_proposal_failed(0.02)
    assert t.tick(0.05, 100) is None, "the refused set waits out its backoff"
    t.on_disconnect(3, 0.06)
    t.on_connect(2, False, 0.07)
    t.on_ack(2, 100, 0.07, 100)
    p = t.tick(0.08, 100)
    assert p is not None and p.new_set == frozenset({1, 2}), "a different set is news"
    t.on_proposal_failed(0.09)
    assert t.tick(0.2, 100) is None, "and waits in its turn once refused"
    p = t.tick(1.2, 100)
    assert p is not None and p.new_set == frozenset({1, 2})
    t.on_proposal_accepted(p.new_set, 3, 1.21)
    t.on_connect(3, False, 1.3)
    t.on_ack(3, 100, 1.3, 100)
    p = t.tick(1.31, 100)
    assert p is not None and p.new_set == frozenset({1, 2, 3}), "an accepted proposal clears the refusals"


def test_unresolved_proposals_are_capped_then_only_the_known_set_is_confirmed():
    """A controller that answers nothing while replicas flap: every failed proposal is kept (the
    controller may hold it) and counted for acks. At MAX_UNRESOLVED_PROPOSALS the master proposes
    its known set again (a confirm), never a new set; an accepted confirm resolves them all."""
    from autoswitch.base.limits import MAX_UNRESOLVED_PROPOSALS

    t = tracker(sss=(1,), proposal_backoff_min_s=0.01, proposal_backoff_max_s=0.01)
    now, proposed = 0.0, []
    for b in range(2, 2 + MAX_UNRESOLVED_PROPOSALS + 4):     # a new replica caught up each time
        t.on_connect(b, False, now)
        t.on_ack(b, 100, now, 100)
        now += 1.0
        p = t.tick(now, 100)
        assert p is not None
        proposed.append(p.new_set)
        t.on_proposal_failed(now)
        t.on_disconnect(b, now)
        assert len(t.unresolved) <= MAX_UNRESOLVED_PROPOSALS + 1, "new sets, and the known set's confirm"
    assert len(set(proposed[:MAX_UNRESOLVED_PROPOSALS])) == MAX_UNRESOLVED_PROPOSALS
    assert proposed[MAX_UNRESOLVED_PROPOSALS:] == [frozenset({1})] * 4, "only confirms past the cap"
    assert len(t.ack_set) == 1 + MAX_UNRESOLVED_PROPOSALS, "every set the controller may hold counts for acks"
    now += 1.0
    p = t.tick(now, 100)
    assert p is not None and p.new_set == frozenset({1})
    t.on_proposal_accepted(p.new_set, 11, now)
    assert not t.unresolved and t.ack_set == frozenset({1})


def test_acked_through_is_the_threshold_of_is_acked():
    """The master releases its waiters by ``acked_through`` (one look per ack); ``is_acked`` is
    the rule. Over random sets, proposals, zones and acks the two agree at every offset."""
    import random

    from autoswitch.ha.sync_state import Proposal

    rng = random.Random(20261129)
    for _ in range(3000):
        mode = rng.choice(["master", "all", "in_sync_replicas"])
        zones_needed = 0 if mode == "master" else rng.choice([0, 0, 1, 2])
        cfg = HAConfig(ack_mode=mode, in_sync_replicas=rng.randint(1, 4), min_in_sync_replicas=rng.randint(1, 3),
                       min_in_sync_zones=zones_needed).validate()
        sss = frozenset({1} | {b for b in range(2, 6) if rng.random() < 0.5})
        t = SyncStateTracker(1, 5, sss, 10, cfg, now=0.0)
        master_max = rng.randint(0, 12)
        for b in range(2, 7):
            if rng.random() < 0.8:
                t.on_connect(b, False, 0.0)
                t.replicas[b].ack_offset = rng.randint(-1, 14)     # a hostile slave may ack past our end
        for _ in range(rng.randint(0, 2)):
            t.unresolved[frozenset({1} | {b for b in range(2, 7) if rng.random() < 0.5})] = 10
        if rng.random() < 0.4:
            t.in_flight = Proposal(frozenset({1} | {b for b in range(2, 7) if rng.random() < 0.5}), 10, 5)
        for b in range(1, 7):
            if rng.random() < 0.7:
                t.set_zone(b, rng.choice("ab"))
        through = t.acked_through(master_max)
        for offset in range(0, 16):
            assert t.is_acked(offset, master_max) == (offset <= through), (mode, offset, through)


def test_admission_and_expansion_refusals():
    """The one rule for who counts as a replica (HAMaster, the replica registry, the data simulator)."""
    from autoswitch.ha.sync_state import admission_refusal, expansion_refusals

    reg = {2: "inc-a", 3: ""}
    assert admission_refusal(2, "inc-a", reg) is None
    assert admission_refusal(2, "", reg) is None              # not stated: not checkable, admitted
    assert admission_refusal(3, "anything", reg) is None      # none registered: admitted
    assert admission_refusal(2, "inc-b", reg) == "stale_incarnation"
    assert admission_refusal(4, "x", reg) == "unknown_replica"
    assert admission_refusal(2, "inc-a", None) == "registry_unavailable"
    assert expansion_refusals(frozenset({2, 3, 4}), {2: "inc-b", 3: "z"}, reg) == {
        2: "stale_incarnation", 4: "not_connected"}
    assert expansion_refusals(frozenset({2}), {2: "inc-a"}, reg) == {}
