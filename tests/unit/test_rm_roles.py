"""Running ReplicasManager: role changes by MasterEpoch, elections, sync, proposals, lease fencing."""

from __future__ import annotations

import pytest
from autoswitch.broker.replicas.lease import LeaseConfig
from autoswitch.broker.replicas.replicas_manager import (
    AdoptControllers,
    AlterSyncStateSet,
    BecomeFenced,
    BecomeMaster,
    BecomeSlave,
    ElectMaster,
    FailKind,
    Failure,
    GetReplicaInfo,
    NotifyRoleChange,
    Phase,
    ProposalResult,
    RegisterBroker,
    ReplicaInfo,
    SendHeartbeat,
    SetFenced,
)
from autoswitch.controller.api import HeartbeatAnswer

from tests.unit.test_rm_fakes import CONTROLLERS, FakeController, Harness, make_config


def running(tmp_path, ctrl=None, **cfg) -> Harness:
    ctrl = ctrl or FakeController()
    h = Harness(tmp_path, ctrl, config=make_config(**cfg) if cfg else None)
    h.start()
    h.run_until(lambda: h.core.phase == Phase.RUNNING)
    h.drain()
    return h


def info(master_id, epoch, sss=None, sss_epoch=1, addr=None):
    return ReplicaInfo(master_id, addr if addr is not None else (f"10.0.0.{master_id}:10911" if master_id else ""),
                       epoch, frozenset(sss if sss is not None else ({master_id} if master_id else set())), sss_epoch)


def slave_of_2_at_epoch_3(tmp_path) -> Harness:
    ctrl = FakeController()
    ctrl.info["g1"] = info(2, 3, {1, 2})
    ctrl.applied[("g1", 2)] = "other"
    return running(tmp_path, ctrl)


# ----------------------------------------------------------------- MasterEpoch rule


def test_higher_epoch_switches_role(tmp_path):
    h = slave_of_2_at_epoch_3(tmp_path)
    # broker id is 1 (id 2 taken? no: next id is max+1 = 3) -- read it from the core
    me = h.core.broker_id
    assert h.of_type(BecomeSlave)[-1].epoch == 3 and h.core.role == "slave"
    h._push(h.core.on_replica_info(info(me, 4, {me, 2}), h.now))
    h.drain()
    bm = h.of_type(BecomeMaster)
    assert [(c.epoch, c.sync_state_set) for c in bm] == [(4, frozenset({me, 2}))]
    assert h.core.role == "master" and h.core.applied_epoch == 4


def test_equal_epoch_same_role_is_a_noop(tmp_path):
    h = slave_of_2_at_epoch_3(tmp_path)
    before = len(h.log)
    for _ in range(3):
        h._push(h.core.on_replica_info(info(2, 3, {1, 2}), h.now))
        h.drain()
    assert not [c for c in h.log[before:] if isinstance(c, BecomeMaster | BecomeSlave | BecomeFenced)]
    assert h.core.role == "slave" and h.core.applied_epoch == 3


def test_lower_epoch_is_ignored(tmp_path):
    h = slave_of_2_at_epoch_3(tmp_path)
    me = h.core.broker_id
    before = len(h.log)
    h._push(h.core.on_replica_info(info(me, 2, {me}), h.now))  # a delayed push from an old term
    h.drain()
    assert not [c for c in h.log[before:] if isinstance(c, BecomeMaster | BecomeSlave)]
    assert h.core.role == "slave" and h.core.applied_master_id == 2


def test_equal_epoch_different_master_is_refused(tmp_path):
    h = slave_of_2_at_epoch_3(tmp_path)
    me = h.core.broker_id
    before = len(h.log)
    h._push(h.core.on_replica_info(info(me, 3, {me}), h.now))
    h.drain()
    assert not [c for c in h.log[before:] if isinstance(c, BecomeMaster)]
    assert h.core.applied_master_id == 2


def test_newer_epoch_during_a_switch_is_applied_after_it(tmp_path):
    h = slave_of_2_at_epoch_3(tmp_path)
    me = h.core.broker_id
    h._push(h.core.on_replica_info(info(me, 4, {me}), h.now))
    cmd = next(c for c in h.queue if isinstance(c, BecomeMaster))  # in flight, not answered yet
    h.queue.remove(cmd)
    assert not h.core.on_replica_info(info(2, 5, {2}), h.now)  # one switch at a time
    h._push(h.core.on_reply(cmd.req, None, h.now))
    h.drain()
    assert [type(c) for c in h.log if isinstance(c, BecomeMaster | BecomeSlave)][-2:] == [BecomeMaster, BecomeSlave]
    assert h.core.role == "slave" and h.core.applied_epoch == 5


def test_failed_role_change_is_retried_after_backoff(tmp_path):
    ctrl = FakeController()
    ctrl.info["g1"] = info(5, 7, {5})
    h = Harness(tmp_path, ctrl)
    h.fail_next(BecomeSlave, Failure(FailKind.REJECTED, "HA_CONNECT_FAILED"))
    h.start()
    h.run_until(lambda: h.core.phase == Phase.RUNNING)
    h.drain()
    assert len(h.of_type(BecomeSlave)) == 1 and h.core.role == "fenced"
    assert h.core.may_acknowledge(h.now) is False
    h.run_until(lambda: h.core.role == "slave", dt=0.05)
    assert len(h.of_type(BecomeSlave)) == 2


def test_hooks_get_old_and_new_master(tmp_path):
    h = slave_of_2_at_epoch_3(tmp_path)
    me = h.core.broker_id
    h._push(h.core.on_replica_info(info(me, 4, {me, 2}), h.now))
    h.drain()
    changes = [c.change for c in h.of_type(NotifyRoleChange)]
    assert [(c.role, c.epoch, c.old_master_id, c.new_master_id) for c in changes] == [
        ("slave", 3, 0, 2), ("master", 4, 2, me)]
    assert changes[-1].old_master_addr == "10.0.0.2:10911"
    assert changes[-1].new_master_addr == "127.0.0.1:10911"
    assert changes[-1].sync_state_set == frozenset({me, 2})


# ----------------------------------------------------------------- elections


def test_election_requested_when_no_master(tmp_path):
    h = running(tmp_path)  # FakeController starts with no master
    me = h.core.broker_id
    assert [e.broker_id for e in h.of_type(ElectMaster)] == [me]
    assert h.core.role == "master" and h.core.applied_epoch == 1


def test_failed_election_retried_with_backoff_until_master(tmp_path):
    ctrl = FakeController()
    h = Harness(tmp_path, ctrl)
    for _ in range(3):
        h.fail_next(ElectMaster, Failure(FailKind.REJECTED, "CONTROLLER_MASTER_NOT_AVAILABLE"))
    h.start()
    h.run_until(lambda: h.core.phase == Phase.RUNNING)
    h.drain()
    assert len(h.of_type(ElectMaster)) == 1
    h.tick(0.001)
    h.drain()
    assert len(h.of_type(ElectMaster)) == 1, "asked again before the backoff"
    h.run_until(lambda: h.core.role == "master", max_rounds=400)
    assert len(h.of_type(ElectMaster)) == 4


def test_no_master_at_higher_epoch_fences_a_master_and_asks_for_election(tmp_path):
    h = running(tmp_path)
    assert h.core.role == "master"
    n_elect = len(h.of_type(ElectMaster))
    h._push(h.core.on_replica_info(info(0, 2, set()), h.now))
    assert h.core.may_acknowledge(h.now) is False  # deposed: no ack even before the switch lands
    h.drain()
    assert [c.epoch for c in h.of_type(BecomeFenced)] == [2]
    assert h.core.role == "fenced"
    assert len(h.of_type(ElectMaster)) == n_elect + 1


def test_slave_learning_no_master_asks_for_election_without_switching(tmp_path):
    h = slave_of_2_at_epoch_3(tmp_path)
    h._push(h.core.on_replica_info(info(0, 4, set()), h.now))
    h.drain()
    assert not h.of_type(BecomeFenced)
    assert h.of_type(ElectMaster)
    assert h.core.role == "slave"


# ----------------------------------------------------------------- sync, heartbeats


def test_replica_info_polled_every_sync_interval(tmp_path):
    h = slave_of_2_at_epoch_3(tmp_path)
    start = len(h.of_type(GetReplicaInfo))
    for _ in range(int(20 / 0.5)):  # 20 s of virtual time in 0.5 s ticks
        h.tick(0.5)
        h.drain()
    assert len(h.of_type(GetReplicaInfo)) - start == 4


def test_poll_discovers_a_change_the_push_missed(tmp_path):
    h = slave_of_2_at_epoch_3(tmp_path)
    me = h.core.broker_id
    h.ctrl.info["g1"] = info(me, 9, {me})
    h.run_until(lambda: h.core.role == "master", max_rounds=200, dt=0.5)
    assert h.core.applied_epoch == 9


def test_heartbeat_to_every_controller_each_interval_one_in_flight(tmp_path):
    h = slave_of_2_at_epoch_3(tmp_path)
    hb0 = len(h.of_type(SendHeartbeat))
    h.tick(1.0)
    sent = h.of_type(SendHeartbeat)[hb0:]
    assert sorted(c.controller for c in sent) == sorted(CONTROLLERS)
    assert all(c.epoch == 3 and c.broker_id == h.core.broker_id for c in sent)
    # c3 never answers: it is skipped while its heartbeat is in flight
    stuck = next(c for c in h.queue if isinstance(c, SendHeartbeat) and c.controller == "c3:9878")
    h.queue.remove(stuck)
    h.drain()
    h.tick(1.0)
    again = h.of_type(SendHeartbeat)[hb0 + 3:]
    assert sorted(c.controller for c in again) == ["c1:9878", "c2:9878"]


# ----------------------------------------------------------------- SyncStateSet proposals


def test_proposal_carried_to_controller_and_result_handed_back(tmp_path):
    h = running(tmp_path)
    me = h.core.broker_id
    out = h.core.propose(7, 1, 1, frozenset({me, 9}), h.now)
    assert [type(c) for c in out] == [AlterSyncStateSet]
    # a second proposal while the first is in flight is refused at once
    busy = h.core.propose(8, 1, 1, frozenset({me}), h.now)
    assert busy[0].proposal == 8 and busy[0].error.code == "PROPOSAL_IN_FLIGHT"
    h._push(out)
    h.drain()
    res = [c for c in h.of_type(ProposalResult) if c.proposal == 7]
    assert res and res[0].sync_state_set == frozenset({me, 9}) and res[0].sync_state_set_epoch == 2
    assert h.core.sync_state_set == frozenset({me, 9})


def test_proposal_failure_handed_back(tmp_path):
    h = running(tmp_path)
    me = h.core.broker_id
    h.fail_next(AlterSyncStateSet, Failure(FailKind.REJECTED, "CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH"))
    h._push(h.core.propose(1, 1, 0, frozenset({me}), h.now))
    h.drain()
    res = h.of_type(ProposalResult)[-1]
    assert res.error.code == "CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH" and res.sync_state_set is None
    # the slot is free again
    assert isinstance(h.core.propose(2, 1, 1, frozenset({me}), h.now)[0], AlterSyncStateSet)


@pytest.mark.parametrize("case", ["slave", "stale_epoch", "without_master"])
def test_bad_proposals_rejected_locally(tmp_path, case):
    if case == "slave":
        h = slave_of_2_at_epoch_3(tmp_path)
        out = h.core.propose(1, 3, 1, frozenset({1, 2}), h.now)
        code = "NOT_MASTER"
    else:
        h = running(tmp_path)
        me = h.core.broker_id
        if case == "stale_epoch":
            out, code = h.core.propose(1, 0, 1, frozenset({me}), h.now), "STALE_MASTER_EPOCH"
        else:
            out, code = h.core.propose(1, 1, 1, frozenset({me + 1}), h.now), "SET_WITHOUT_MASTER"
    assert len(out) == 1 and isinstance(out[0], ProposalResult) and out[0].error.code == code


# ----------------------------------------------------------------- lease in the core


def _master_with_lease(tmp_path, **lease_kw) -> Harness:
    lease = LeaseConfig(**{"master_lease_ms": 6000, "heartbeat_timeout_ms": 10000, **lease_kw})
    h = running(tmp_path, lease=lease)
    assert h.core.role == "master"
    return h


def test_master_fences_when_controllers_stop_answering_and_unfences_on_renewal(tmp_path):
    h = _master_with_lease(tmp_path)
    assert h.core.may_acknowledge(h.now)
    # every controller goes silent: heartbeats are sent but never answered
    silent_since = h.now
    h.unreachable = lambda c: isinstance(c, SendHeartbeat)
    for _ in range(80):
        h.tick(0.1)
        h.drain()
        if h.of_type(SetFenced):
            break
    fences = h.of_type(SetFenced)
    assert fences == [SetFenced(True, "lease_expired")]
    assert h.now - silent_since <= 6.1  # expiry from the last answered SEND time
    assert not h.core.may_acknowledge(h.now)
    assert h.core.status(h.now)["fenced"] == "lease_expired"
    # controllers are back: the next answered round renews
    h.unreachable = lambda c: False
    h.run_until(lambda: h.core.may_acknowledge(h.now), dt=0.5)
    assert h.of_type(SetFenced)[-1] == SetFenced(False, None)
    assert h.core.role == "master"


def test_lease_disabled_master_keeps_serving_with_all_controllers_down(tmp_path):
    h = _master_with_lease(tmp_path, enabled=False)
    h.unreachable = lambda c: isinstance(c, SendHeartbeat | GetReplicaInfo)
    for _ in range(300):  # 30 s without a single reply
        h.tick(0.1)
        h.drain()
    assert h.core.may_acknowledge(h.now)
    assert not h.of_type(SetFenced)


def test_minority_of_controllers_cannot_keep_the_lease(tmp_path):
    h = _master_with_lease(tmp_path)
    h.unreachable = lambda c: isinstance(c, SendHeartbeat) and c.controller != "c1:9878"
    for _ in range(100):  # only c1 answers
        h.tick(0.1)
        h.drain()
    assert not h.core.may_acknowledge(h.now)
    assert h.of_type(SetFenced) == [SetFenced(True, "lease_expired")]


def test_newer_sss_for_our_epoch_is_handed_to_ha_once(tmp_path):
    from autoswitch.broker.replicas.replicas_manager import SyncStateSetLearned

    h = running(tmp_path)
    me = h.core.broker_id
    h._push(h.core.on_replica_info(info(me, 1, {me, 4}, sss_epoch=5), h.now))
    h._push(h.core.on_replica_info(info(me, 1, {me}, sss_epoch=3), h.now))  # older: ignored
    h.drain()
    assert h.of_type(SyncStateSetLearned) == [SyncStateSetLearned(frozenset({me, 4}), 5)]
    assert h.core.sync_state_set == frozenset({me, 4})


# ----------------------------------------------------------------- restarts: clean vs unclean


def _restarted(tmp_path, bid: int, sync_state_set: set[int], intact: bool) -> Harness:
    """Broker ``bid`` (its EpochFile ends with epoch 3) restarts while the controller still names
    broker 1 master of epoch 3 with ``sync_state_set``."""
    from autoswitch.broker.replicas.identity import BrokerIdentity, IdentityStore

    ctrl = FakeController()
    ctrl.applied[("g1", bid)] = "c"
    for other in sorted(sync_state_set - {bid}):
        ctrl.applied[("g1", other)] = "d"
        ctrl.addresses[("g1", other)] = f"10.0.0.{other}:10911"
    ctrl.info["g1"] = info(1, 3, sync_state_set, addr="127.0.0.1:10911")
    IdentityStore(tmp_path).commit(BrokerIdentity("C", "g1", bid))
    h = Harness(tmp_path, ctrl)
    h.start(log_intact=intact, log_last_epoch=3)
    h.run_until(lambda: h.core.phase == Phase.RUNNING)
    h.drain()
    return h


def _restarted_master(tmp_path, intact: bool) -> Harness:
    """Broker 1 was master of epoch 3 and restarts before the controller noticed."""
    return _restarted(tmp_path, 1, {1, 2}, intact)


def test_clean_restart_resumes_as_master_of_its_epoch(tmp_path):
    h = _restarted_master(tmp_path, intact=True)
    assert [c.epoch for c in h.of_type(BecomeMaster)] == [3]
    assert not h.of_type(ElectMaster)
    assert all(c.clean_shutdown for c in h.of_type(SendHeartbeat))


def test_unclean_restart_does_not_resume_and_asks_for_an_election(tmp_path):
    h = _restarted_master(tmp_path, intact=False)
    assert not h.of_type(BecomeMaster), "its log may lack acked messages the slaves hold"
    assert h.of_type(ElectMaster)
    assert h.core.status(h.now)["fenced"] == "unclean_restart"
    assert h.of_type(SendHeartbeat) and not any(c.clean_shutdown for c in h.of_type(SendHeartbeat))
    # The controller keeps answering "you are master" (say it has not seen the heartbeat yet):
    # election requests back off instead of spinning.
    for _ in range(20):
        h.tick(0.01)
        h.drain()
    assert len(h.of_type(ElectMaster)) <= 4
    assert h.core.next_deadline() > h.now
    # The controller elects broker 2 (a clean SyncStateSet member): we follow as slave. Seeing
    # ourselves in a SyncStateSet proves nothing (issue 30: a view older than our registration
    # still lists us, before we fetched a byte); reaching the master's confirmOffset does.
    h._push(h.core.on_replica_info(info(2, 4, {2}), h.now))
    h.drain()
    assert h.of_type(BecomeSlave)[-1].epoch == 4 and h.core.role == "slave"
    assert not h.core.log_intact
    h._push(h.core.on_replica_info(info(2, 4, {1, 2}, sss_epoch=2), h.now))
    h.drain()
    assert not h.core.log_intact
    h.core.on_caught_up(3, h.now)       # another epoch's master: not ours
    assert not h.core.log_intact
    h.core.on_caught_up(4, h.now)
    assert h.core.log_intact
    h.tick(1.0)
    assert h.of_type(SendHeartbeat)[-1].clean_shutdown


def test_unclean_slave_listed_in_the_sync_state_set_stays_unclean_until_caught_up(tmp_path):
    """Issue 30: a slave whose host lost its page cache came back, became slave of the same
    master and saw itself in the (not yet shrunk) SyncStateSet: it reported a clean log before
    fetching a byte, and was elected without the acked tail when the master died."""
    h = _restarted(tmp_path, 2, {1, 2}, intact=False)
    assert h.of_type(BecomeSlave)[-1].epoch == 3 and h.core.role == "slave"
    assert not h.core.log_intact
    assert not any(c.clean_shutdown for c in h.of_type(RegisterBroker)), "registration states the unclean stop"
    h.tick(1.0)
    h.drain()
    assert not h.of_type(SendHeartbeat)[-1].clean_shutdown
    h.core.on_caught_up(3, h.now)
    h.tick(1.0)
    h.drain()
    assert h.core.log_intact and h.of_type(SendHeartbeat)[-1].clean_shutdown


def test_unclean_restart_still_takes_a_new_epoch(tmp_path):
    h = _restarted_master(tmp_path, intact=False)
    # no clean candidate, the controller runs an unclean election and picks us with a NEW epoch
    h._push(h.core.on_replica_info(info(1, 4, {1}, addr="127.0.0.1:10911"), h.now))
    h.drain()
    assert [c.epoch for c in h.of_type(BecomeMaster)] == [4]
    assert h.core.log_intact


def test_unclean_restart_alone_in_sss_never_resumes_the_epoch(tmp_path):
    """Issue 30: alone in the set it used to resume the same epoch and write at offsets it lost;
    a replica outside the set holding the old bytes of that epoch would keep them. It waits for
    the new epoch the controller gives a lone unclean master when it registers."""
    h = _restarted(tmp_path, 1, {1}, intact=False)
    assert not h.of_type(BecomeMaster)
    assert not any(c.clean_shutdown for c in h.of_type(RegisterBroker))
    h._push(h.core.on_replica_info(info(1, 4, {1}, addr="127.0.0.1:10911"), h.now))
    h.drain()
    assert [c.epoch for c in h.of_type(BecomeMaster)] == [4]
    assert h.core.log_intact


def test_the_core_adopts_the_membership_a_heartbeat_answer_names_and_refuses_a_bad_one(tmp_path):
    """Issue 31 (item 3): the adapter hands the answer over as it came; adopting the controllers'
    voters it names is the core's decision, checked like any network input."""
    h = slave_of_2_at_epoch_3(tmp_path)
    h.hb_answer = lambda cmd: HeartbeatAnswer(is_leader=False, lease_granted=True, master_epoch=3,
                                              controllers=("not an address",), controllers_index=5)
    h.tick(1.0)
    h.drain()
    assert h.core.controllers_index == 0 and not h.of_type(AdoptControllers), "a malformed list is refused"
    new = ("c4:9878", "c5:9878", "c6:9878")
    h.hb_answer = lambda cmd: HeartbeatAnswer(is_leader=False, lease_granted=True, master_epoch=3,
                                              controllers=new, controllers_index=5)
    h.tick(1.0)
    h.drain()
    assert h.of_type(AdoptControllers) == [AdoptControllers(new, 5)]
    assert h.core.config.controllers == new and h.core.controllers_index == 5
    h.hb_answer = lambda cmd: HeartbeatAnswer(is_leader=False, lease_granted=True, master_epoch=3,
                                              controllers=CONTROLLERS, controllers_index=4)
    h.tick(1.0)
    h.drain()
    assert h.core.config.controllers == new, "an older membership from a follower is not adopted"
    n = len(h.of_type(SendHeartbeat))
    h.tick(1.0)
    sent = h.of_type(SendHeartbeat)[n:]
    assert sorted(c.controller for c in sent) == sorted(new)
    assert all(c.controllers_index == 5 and c.lease_quorum == 2 for c in sent)


def test_an_answer_without_the_grant_does_not_count_for_the_lease(tmp_path):
    """The core, not the adapter, refuses to count a reply whose controller withheld the grant
    (a DEAD report on us, a newer MasterEpoch applied): sim seed 200 was a master that kept
    acknowledging on such replies."""
    h = slave_of_2_at_epoch_3(tmp_path)
    h.hb_answer = lambda cmd: HeartbeatAnswer(is_leader=False, lease_granted=False, master_epoch=3)
    before = h.core.lease.expires_at()
    for _ in range(5):
        h.tick(1.0)
        h.drain()
    assert h.core.lease.expires_at() == before
    h.hb_answer = None
    h.tick(1.0)
    h.drain()
    assert h.core.lease.expires_at() is not None and (before is None or h.core.lease.expires_at() > before)



def test_a_master_told_of_a_feature_level_it_does_not_run_stops_acknowledging(tmp_path):
    """Issue 34: the cluster finalized a level above this build's (it joined, or was downgraded,
    afterwards): the others may write what it cannot read, so it fences its writes, once."""
    from autoswitch.broker.replicas.replicas_manager import FEATURE_FENCE

    from autoswitch.base.features import SUPPORTED_LEVEL

    h = _master_with_lease(tmp_path)
    assert h.core.may_acknowledge(h.now)
    h.hb_answer = lambda cmd: HeartbeatAnswer(is_leader=cmd.controller == "c1:9878", lease_granted=True,
                                             master_epoch=0, feature_level=SUPPORTED_LEVEL + 1)
    h.run_until(lambda: h.of_type(SetFenced), dt=0.5)
    for _ in range(10):       # more answers saying the same: no second fence, no second log line
        h.tick(0.5)
        h.drain()
    assert h.of_type(SetFenced) == [SetFenced(True, FEATURE_FENCE)]
    assert not h.core.may_acknowledge(h.now)
    assert h.core.status(h.now)["fenced"] == FEATURE_FENCE
    assert h.core.feature_unsupported == SUPPORTED_LEVEL + 1


def _new_master_with_slave_rounds_in_flight(tmp_path) -> tuple[Harness, list[SendHeartbeat]]:
    """A slave of epoch 3 with one heartbeat round in flight (sent with epoch 3) is elected master
    of epoch 4: its own first round skips every controller that round is still out to."""
    h = slave_of_2_at_epoch_3(tmp_path)
    # Like the controllers: a grant only for the master of the epoch they know (here: 4, later).
    h.hb_answer = lambda cmd: HeartbeatAnswer(is_leader=False, lease_granted=cmd.epoch == 4, master_epoch=3)
    for _ in range(8):      # what the fake granted the slave before has run out
        h.tick(1.0)
        h.drain()
    h.hb_answer = lambda cmd: HeartbeatAnswer(is_leader=False, lease_granted=cmd.epoch == 4, master_epoch=4)
    h.tick(1.0)
    slave_round = [c for c in h.queue if isinstance(c, SendHeartbeat)]
    assert len(slave_round) == len(CONTROLLERS) and all(c.epoch == 3 for c in slave_round)
    for c in slave_round:
        h.queue.remove(c)
    me = h.core.broker_id
    h._push(h.core.on_replica_info(info(me, 4, {me}), h.now))
    h.drain()
    assert h.core.role == "master" and not h.core.may_acknowledge(h.now)
    assert not [c for c in h.queue if isinstance(c, SendHeartbeat)], "all three were skipped (in flight)"
    return h, slave_round


def test_a_new_master_asks_again_at_once_when_its_slave_round_is_refused(tmp_path):
    """The refusals of a round sent as a slave are not a heartbeat period of refused writes
    (bench-rolling: up to 200 ms after a handover): the master asks as the master at once."""
    h, slave_round = _new_master_with_slave_rounds_in_flight(tmp_path)
    for c in slave_round:
        h._push(h.core.on_reply(c.req, h.hb_answer(c), h.now))
    h.tick(0.0)
    again = [c for c in h.queue if isinstance(c, SendHeartbeat)]
    assert sorted(c.controller for c in again) == sorted(CONTROLLERS) and all(c.epoch == 4 for c in again)
    h.drain()
    assert h.core.may_acknowledge(h.now), "granted without waiting for the next period"


def test_refusals_for_other_reasons_wait_for_the_period(tmp_path):
    """A controller that refuses the master of the epoch it knows (a DEAD report) is not asked
    faster than the heartbeat period; one still behind is asked again only a bounded number of times."""
    from autoswitch.broker.replicas.lease import MAX_LEASE_REASKS

    h, slave_round = _new_master_with_slave_rounds_in_flight(tmp_path)
    h.hb_answer = lambda cmd: HeartbeatAnswer(is_leader=False, lease_granted=False, master_epoch=4)
    for c in slave_round:
        h._push(h.core.on_reply(c.req, h.hb_answer(c), h.now))
    h.tick(0.0)     # the round asked at once ...
    h.drain()       # ... refused again, at epoch 4, by controllers at epoch 4
    h.tick(0.05)
    assert not [c for c in h.queue if isinstance(c, SendHeartbeat)], "no faster re-ask"
    # Controllers that never apply the election (answer with epoch 3) get at most the bounded re-asks.
    h.hb_answer = lambda cmd: HeartbeatAnswer(is_leader=False, lease_granted=False, master_epoch=3)
    sent0 = len(h.of_type(SendHeartbeat))
    t0 = h.now
    for _ in range(100):
        h.tick(0.01)
        h.drain()
    rounds = (len(h.of_type(SendHeartbeat)) - sent0) / len(CONTROLLERS)
    period_rounds = (h.now - t0) / (make_config().heartbeat_interval_ms / 1000) + 1
    assert rounds <= period_rounds + MAX_LEASE_REASKS
