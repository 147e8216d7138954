"""Registration: RocketMQ's steps, resumable after a crash at any step, exactly one identity."""

from __future__ import annotations

import itertools

import pytest
from autoswitch.broker.replicas.identity import IdentityStore, TempIdentity
from autoswitch.broker.replicas.replicas_manager import (
    ApplyBrokerId,
    CommitIdentity,
    FailKind,
    Failure,
    FindLeader,
    GetNextBrokerId,
    Phase,
    RegisterBroker,
    WriteTempIdentity,
)

from tests.unit.test_rm_fakes import Crash, FakeController, Harness

STEP_TYPES = [FindLeader, GetNextBrokerId, WriteTempIdentity, ApplyBrokerId, CommitIdentity, RegisterBroker]


def _registered(h: Harness) -> bool:
    return h.core.phase == Phase.RUNNING


def _assert_exactly_one_identity(tmp_path, ctrl: FakeController, broker_id: int) -> None:
    loaded = IdentityStore(tmp_path).load("C", "g1")
    assert loaded.identity is not None and loaded.identity.broker_id == broker_id
    assert loaded.temp is None, "temp identity file left behind"
    assert list(ctrl.applied) == [("g1", broker_id)], f"controller holds {ctrl.applied}"
    assert ctrl.addresses == {("g1", broker_id): "127.0.0.1:10911"}


def test_fresh_registration_follows_rocketmq_steps(tmp_path):
    ctrl = FakeController()
    h = Harness(tmp_path, ctrl)
    h.start()
    h.run_until(lambda: _registered(h))
    steps = [type(c) for c in h.log if type(c) in STEP_TYPES]
    assert steps == STEP_TYPES
    assert h.core.broker_id == 1
    _assert_exactly_one_identity(tmp_path, ctrl, 1)


@pytest.mark.parametrize("crash_after", range(1, len(STEP_TYPES) + 1))
def test_crash_at_any_step_resumes_to_exactly_one_identity(tmp_path, crash_after):
    ctrl = FakeController()
    codes = (f"code-{i}" for i in itertools.count())  # shared: a restart draws a NEW code
    first = Harness(tmp_path, ctrl, crash_after=crash_after, codes=codes)
    first.start()
    with pytest.raises(Crash):
        first.run_until(lambda: _registered(first))
    crashed_in = type(first.log[-1]) if first.log else None
    second = Harness(tmp_path, ctrl, codes=codes)
    second.start()
    second.run_until(lambda: _registered(second))
    assert second.core.broker_id == 1, f"crash after {crashed_in}"
    _assert_exactly_one_identity(tmp_path, ctrl, 1)


def test_crash_twice_in_a_row_still_one_identity(tmp_path):
    ctrl = FakeController()
    codes = (f"code-{i}" for i in itertools.count())
    for crash_after in (4, 2, 5):  # after apply; then right after find-leader; then after commit
        h = Harness(tmp_path, ctrl, crash_after=crash_after, codes=codes)
        h.start()
        with pytest.raises(Crash):
            h.run_until(lambda h=h: _registered(h))
    h = Harness(tmp_path, ctrl, codes=codes)
    h.start()
    h.run_until(lambda: _registered(h))
    _assert_exactly_one_identity(tmp_path, ctrl, 1)


def test_resume_from_temp_reuses_its_check_code(tmp_path):
    ctrl = FakeController()
    ctrl.apply("g1", 1, "old-code")  # applied before the crash; identity file never written
    IdentityStore(tmp_path).write_temp(TempIdentity("C", "g1", 1, "old-code"))
    h = Harness(tmp_path, ctrl)
    h.start()
    h.run_until(lambda: _registered(h))
    applies = h.of_type(ApplyBrokerId)
    assert [(a.broker_id, a.register_check_code) for a in applies] == [(1, "old-code")]
    assert not h.of_type(GetNextBrokerId)
    _assert_exactly_one_identity(tmp_path, ctrl, 1)


def test_identity_file_wins_over_stale_temp(tmp_path):
    ctrl = FakeController()
    ctrl.apply("g1", 1, "x")
    store = IdentityStore(tmp_path)
    store.write_temp(TempIdentity("C", "g1", 1, "x"))
    store.commit(TempIdentity("C", "g1", 1, "x").identity())
    store.write_temp(TempIdentity("C", "g1", 1, "x"))  # crash between identity write and temp removal
    h = Harness(tmp_path, ctrl)
    h.start()
    h.run_until(lambda: _registered(h))
    assert not h.of_type(ApplyBrokerId) and not h.of_type(GetNextBrokerId)
    _assert_exactly_one_identity(tmp_path, ctrl, 1)


def test_id_taken_by_another_broker_gets_a_fresh_id(tmp_path):
    ctrl = FakeController()
    IdentityStore(tmp_path).write_temp(TempIdentity("C", "g1", 1, "mine"))
    ctrl.apply("g1", 1, "someone-else")  # another replica won id 1 while we were down
    h = Harness(tmp_path, ctrl)
    h.start()
    h.run_until(lambda: _registered(h))
    assert h.core.broker_id == 2
    loaded = IdentityStore(tmp_path).load()
    assert loaded.identity is not None and loaded.identity.broker_id == 2 and loaded.temp is None
    assert ctrl.applied[("g1", 2)] != "mine"  # a fresh code was drawn for the fresh id


def test_two_brokers_racing_get_distinct_ids(tmp_path):
    ctrl = FakeController()
    a = Harness(tmp_path / "a", ctrl, codes=iter(f"a{i}" for i in range(9)))
    b = Harness(tmp_path / "b", ctrl, codes=iter(f"b{i}" for i in range(9)))
    a.start()
    b.start()
    for _ in range(200):  # interleave one command at a time
        a.step()
        b.step()
        if _registered(a) and _registered(b):
            break
        if not a.queue:
            a.tick(0.05)
        if not b.queue:
            b.tick(0.05)
    assert {a.core.broker_id, b.core.broker_id} == {1, 2}


def test_not_leader_with_hint_retries_same_step_same_code(tmp_path):
    ctrl = FakeController()
    h = Harness(tmp_path, ctrl)
    h.fail_next(ApplyBrokerId, Failure(FailKind.NOT_LEADER, "CONTROLLER_NOT_LEADER", "", "c2:9878"))
    h.start()
    h.run_until(lambda: _registered(h))
    applies = h.of_type(ApplyBrokerId)
    assert len(applies) == 2 and applies[0].register_check_code == applies[1].register_check_code
    assert len(h.of_type(GetNextBrokerId)) == 1
    assert len(h.of_type(FindLeader)) == 1, "a redirect names the leader: no new search"
    _assert_exactly_one_identity(tmp_path, ctrl, 1)


def test_unavailable_controller_refinds_leader_then_resumes(tmp_path):
    ctrl = FakeController()
    h = Harness(tmp_path, ctrl)
    h.fail_next(RegisterBroker, Failure(FailKind.RETRY, "CONTROLLER_UNAVAILABLE"))
    h.fail_next(FindLeader, Failure(FailKind.RETRY, "TIMEOUT"))  # the first find fails too
    h.start()
    h.drain()
    assert h.core.phase == Phase.FIND_LEADER  # waiting out the backoff
    retry_at = h.core.next_deadline()
    assert retry_at is not None and retry_at > h.now
    h.tick(0.0)
    assert not h.queue, "retried before the backoff elapsed"
    ctrl.leader = "c3:9878"  # leadership moved while we were retrying
    h.run_until(lambda: _registered(h))
    kinds = [type(c) for c in h.log if type(c) in STEP_TYPES]
    assert kinds == [FindLeader, FindLeader, GetNextBrokerId, WriteTempIdentity, ApplyBrokerId,
                     CommitIdentity, RegisterBroker, FindLeader, RegisterBroker]
    assert h.core.leader == "c3:9878"
    _assert_exactly_one_identity(tmp_path, ctrl, 1)


def test_backoff_is_capped(tmp_path):
    ctrl = FakeController()
    h = Harness(tmp_path, ctrl)
    for _ in range(30):
        h.fail_next(FindLeader, Failure(FailKind.RETRY, "CONTROLLER_UNAVAILABLE"))
    h.start()
    gaps = []
    for _ in range(30):
        h.drain()
        deadline = h.core.next_deadline()
        gaps.append(deadline - h.now)
        h.tick(deadline - h.now)
    assert max(gaps) <= h.config.backoff_max_ms / 1000.0
    assert gaps[-1] == pytest.approx(h.config.backoff_max_ms / 1000.0)
    assert gaps[0] < gaps[5]


def test_identity_for_another_group_is_refused(tmp_path):
    from autoswitch.broker.replicas.identity import IdentityMismatch

    IdentityStore(tmp_path).commit(TempIdentity("C", "other", 3, "x").identity())
    with pytest.raises(IdentityMismatch) as e:
        IdentityStore(tmp_path).load("C", "g1")
    assert "brokerIdentity" in str(e.value)


def test_answers_after_shutdown_change_nothing(tmp_path):
    ctrl = FakeController()
    h = Harness(tmp_path, ctrl)
    h.start()
    for _ in range(50):
        if h.queue and isinstance(h.queue[0], RegisterBroker):
            break
        if not h.step():
            h.tick(0.05)
    reg = h.queue.popleft()
    assert isinstance(reg, RegisterBroker)
    assert h.core.shutdown(h.now) == []
    assert h.core.on_reply(reg.req, ctrl.register("g1", reg.broker_id, reg.broker_addr), h.now) == []
    assert h.core.phase == Phase.STOPPED
    assert h.core.tick(h.now + 10) == []
