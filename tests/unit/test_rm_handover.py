"""The graceful handover as a sub-machine of the ReplicasManager core (rm_handover.py): hold
writes, drain to the target, the compare-and-set election, step down, release the writes; an
answer that never came is cancelled for good, and the write fence holds the epoch until then."""

from __future__ import annotations

from autoswitch.broker.replicas.replicas_manager import (
    AlterSyncStateSet,
    BecomeSlave,
    DrainTo,
    FailKind,
    Failure,
    HandoverDone,
    HandoverElect,
    PauseWrites,
    ReplicaInfo,
    ResumeWrites,
    SetFenced,
)

from tests.unit.test_rm_fakes import FakeController, Harness, make_config


def master_of_1_and_2(tmp_path) -> Harness:
    """This broker (id 1) is master of epoch 3 with broker 2 in its SyncStateSet."""
    ctrl = FakeController()
    h = Harness(tmp_path, ctrl, config=make_config())
    h.start()
    h.run_until(lambda: h.core.broker_id == 1 and h.core.role == "master")
    ctrl.applied[("g1", 2)] = "other"
    ctrl.addresses[("g1", 2)] = "10.0.0.2:10911"
    ctrl.info["g1"] = ReplicaInfo(1, ctrl.addresses[("g1", 1)], 3, frozenset({1, 2}), 4)
    h._push(h.core.on_replica_info(ctrl.info["g1"], h.now))
    h.drain()
    assert h.core.role == "master" and h.core.applied_epoch == 3 and h.core.sync_state_set == frozenset({1, 2})
    h.log.clear()
    return h


def start(h: Harness, to=None, acked=None, timeout_s=5.0, leaving=False) -> None:
    h._push(h.core.start_handover(h.now, to, acked if acked is not None else {1: -1, 2: 90}, 100, timeout_s,
                                  leaving))


def drained(h: Harness, ok=True, at=100) -> None:
    h._push(h.core.on_handover_drained(h.now, ok, at))


def done(h: Harness):
    results = h.of_type(HandoverDone)
    assert len(results) == 1, results
    return results[0].result


def test_a_handover_holds_writes_drains_elects_steps_down_and_releases(tmp_path):
    h = master_of_1_and_2(tmp_path)
    start(h)
    h.drain()
    assert h.of_type(PauseWrites) and h.of_type(DrainTo) == [DrainTo(2, 100, 5.0)]
    assert not h.of_type(HandoverElect), "no election before the target holds the log"
    h.tick(0.5)
    drained(h)
    while h.step():
        if h.of_type(HandoverDone):
            assert h.core.role == "slave", "done (and the writes released) only once the role switched"
    elect = h.of_type(HandoverElect)
    assert [(e.from_id, e.to_id, e.expect_master_epoch, e.expect_sync_state_set_epoch) for e in elect] == [(1, 2, 3, 4)]
    assert h.of_type(BecomeSlave)[-1].epoch == 4 and h.core.role == "slave"
    assert h.of_type(BecomeSlave)[-1].replicate, "a handover asked for at run time: the old master replicates"
    res = done(h)
    assert res.ok and res.reason == "handed_over" and (res.target, res.master_id, res.master_epoch) == (2, 2, 4)
    assert res.waited_ms == 500 and h.of_type(ResumeWrites)
    assert h.log.index(h.of_type(ResumeWrites)[0]) > h.log.index(h.of_type(BecomeSlave)[-1]), \
        "held writes go only after the step-down (they get NOT_MASTER with the new master)"


def test_refusals_before_anything_is_held(tmp_path):
    h = master_of_1_and_2(tmp_path)
    start(h, to=3)
    assert "not in the SyncStateSet" in done(h).reason and not h.of_type(PauseWrites)
    h.log.clear()
    start(h, acked={2: -1})
    assert "no connected in-sync slave" in done(h).reason
    h.log.clear()
    start(h)
    start(h)
    assert [d.result.reason for d in h.of_type(HandoverDone)] == ["a handover is already running"]


def test_a_target_that_does_not_catch_up_in_time_keeps_the_master(tmp_path):
    h = master_of_1_and_2(tmp_path)
    start(h, timeout_s=1.0)
    h.drain()
    drained(h, ok=False, at=40)
    h.drain()
    res = done(h)
    assert not res.ok and "did not acknowledge offset 100 in time (at 40)" in res.reason
    assert h.of_type(ResumeWrites) and h.core.role == "master" and h.core.may_acknowledge(h.now)


def test_a_compare_and_set_the_controller_refuses_keeps_the_master(tmp_path):
    h = master_of_1_and_2(tmp_path)
    h.ctrl.info["g1"] = ReplicaInfo(1, "x", 3, frozenset({1, 2}), 5)     # the set moved on meanwhile
    start(h)
    h.drain()
    drained(h)
    h.drain()
    res = done(h)
    assert not res.ok and res.reason.startswith("controller refused: CONTROLLER_ELECT_MASTER_FAILED")
    assert h.core.role == "master" and h.core.may_acknowledge(h.now) and not h.of_type(SetFenced)


def test_no_answer_is_cancelled_for_good_before_writes_are_acknowledged_again(tmp_path):
    h = master_of_1_and_2(tmp_path)
    h.fail_next(HandoverElect, Failure(FailKind.RETRY, "TIMEOUT", "no answer"))
    start(h)
    h.drain()
    drained(h)
    h.drain()
    cancel = [c for c in h.of_type(AlterSyncStateSet) if c.new_set == frozenset({1, 2})]
    assert cancel and cancel[0].sync_state_set_epoch == 4, "the set confirmed unchanged at the epoch it expected"
    res = done(h)
    assert not res.ok and "the handover is cancelled" in res.reason
    assert h.core.role == "master" and h.core.may_acknowledge(h.now)
    assert h.core.roles.sync_state_set_epoch == 5, "its epoch moved: the compare-and-set can never pass"


def test_an_unknown_outcome_fences_the_epoch_until_a_later_cancel_settles_it(tmp_path):
    h = master_of_1_and_2(tmp_path)
    h.fail_next(HandoverElect, Failure(FailKind.RETRY, "TIMEOUT", "no answer"))
    h.fail_next(AlterSyncStateSet, Failure(FailKind.RETRY, "TIMEOUT", "no answer"))
    h.fail_next(AlterSyncStateSet, Failure(FailKind.RETRY, "TIMEOUT", "no answer"))
    start(h)
    h.drain()
    drained(h)
    h.drain()
    res = done(h)
    assert not res.ok and "writes stay fenced" in res.reason and h.of_type(ResumeWrites)
    assert h.core.fenced_reason(h.now) == "handover outcome unknown" and not h.core.may_acknowledge(h.now)
    assert SetFenced(True, "handover outcome unknown") in h.log
    h.run_until(lambda: h.core.may_acknowledge(h.now), dt=0.2)    # background retries, with backoff
    assert h.core.role == "master" and h.of_type(SetFenced)[-1] == SetFenced(False, None)
    assert len([c for c in h.of_type(AlterSyncStateSet) if c.new_set == frozenset({1, 2})]) == 3


def test_a_cancel_that_finds_the_master_deposed_fences_until_the_step_down(tmp_path):
    h = master_of_1_and_2(tmp_path)
    h.fail_next(HandoverElect, Failure(FailKind.RETRY, "TIMEOUT", "no answer"))
    h.fail_next(AlterSyncStateSet, Failure(FailKind.REJECTED, "CONTROLLER_FENCED_MASTER_EPOCH", "epoch 4 now"))
    start(h)
    h.drain()
    drained(h)
    h.drain()
    assert not h.of_type(HandoverDone), "the handover passed: it waits for the step-down"
    assert h.core.fenced_reason(h.now) == "deposed by the handover"
    # the controller's view arrives (the election did commit): the role follows, the handover is done
    h.ctrl.info["g1"] = ReplicaInfo(2, "10.0.0.2:10911", 4, frozenset({2}), 5)
    h._push(h.core.on_replica_info(h.ctrl.info["g1"], h.now))
    h.drain()
    res = done(h)
    assert res.ok and res.reason == "handed_over" and h.core.role == "slave"
    assert h.of_type(SetFenced)[-1] == SetFenced(False, None)


def test_a_cancel_still_unanswered_at_the_deadline_goes_on_in_the_background(tmp_path):
    h = master_of_1_and_2(tmp_path)
    h.fail_next(HandoverElect, Failure(FailKind.RETRY, "TIMEOUT", "no answer"))
    start(h, timeout_s=2.0)
    h.drain()
    drained(h)
    while not h.of_type(AlterSyncStateSet):      # up to the cancel, which stays in flight
        assert h.step()
    cancel = h.queue.popleft()
    assert isinstance(cancel, AlterSyncStateSet)
    h.tick(2.5)                                   # the caller's time is up first
    res = done(h)
    assert not res.ok and "writes stay fenced" in res.reason and h.of_type(ResumeWrites)
    assert h.core.fenced_reason(h.now) == "handover outcome unknown"
    assert h.core.next_deadline() is not None
    h.queue.append(cancel)                        # its answer comes late: it settles the handover
    h.drain()
    assert h.core.may_acknowledge(h.now) and h.of_type(SetFenced)[-1] == SetFenced(False, None)
    assert len([c for c in h.of_type(AlterSyncStateSet) if c.new_set == frozenset({1, 2})]) == 1


def test_a_lapsed_lease_does_not_refuse_a_handover_but_a_deposed_master_does(tmp_path):
    """A slow master's lease lapses often and it is the one that must hand over (gray failover):
    the drain and the compare-and-set election keep the move safe without the lease. A master that
    knows of a newer epoch, or has a handover in doubt, must not start one."""
    h = master_of_1_and_2(tmp_path)
    h._push(h.core.handover.start(h.now, None, {1: -1, 2: 90}, 100, "lease_expired", 5.0))
    h.drain()
    assert h.of_type(PauseWrites) and h.of_type(DrainTo) == [DrainTo(2, 100, 5.0)]
    h2 = master_of_1_and_2(tmp_path / "b")
    for reason in ("deposed", "handover outcome unknown"):
        h2.log.clear()
        h2._push(h2.core.handover.start(h2.now, None, {1: -1, 2: 90}, 100, reason, 5.0))
        assert not h2.of_type(PauseWrites) and f"fenced: {reason}" in done(h2).reason


def test_a_handover_on_shutdown_steps_down_without_replicating(tmp_path):
    """SIGTERM: the stopping master names the new master to clients but opens no HA connection
    (it joined the new master's SyncStateSet on its way out once, and the controller refused
    that set after its farewell); so does any later step-down of the stopping broker."""
    h = master_of_1_and_2(tmp_path)
    start(h, leaving=True)
    h.drain()
    h.tick(0.1)
    drained(h)
    while h.step():
        pass
    assert done(h).ok and h.core.role == "slave"
    assert [c.replicate for c in h.of_type(BecomeSlave)] == [False]
