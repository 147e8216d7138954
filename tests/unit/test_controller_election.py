"""Election policy: ranking, candidate pools, eligible replicas after failover (KIP-966-like)."""

from __future__ import annotations

from autoswitch.controller.codes import Code
from autoswitch.controller.messages import (
    TRIGGER_BROKER,
    TRIGGER_CONTROLLER,
    BrokerLiveInfo,
    RegisterBrokerRequest,
    UpdateControllerConfigRequest,
)
from autoswitch.controller.state import election

from tests.unit.test_controller_sm_ops import C, G, group_with_master

# --------------------------------------------------------------------------- pure ranking


def test_rank_orders_epoch_desc_offset_desc_priority_asc_id_asc():
    infos = [
        BrokerLiveInfo(1, epoch=3, max_offset=10, election_priority=0),
        BrokerLiveInfo(2, epoch=4, max_offset=1, election_priority=9),
        BrokerLiveInfo(3, epoch=4, max_offset=2**63 - 1, election_priority=9),
        BrokerLiveInfo(4, epoch=4, max_offset=2**63 - 1, election_priority=1),
        BrokerLiveInfo(5, epoch=4, max_offset=2**63 - 1, election_priority=1),
    ]
    assert [i.broker_id for i in election.rank(infos)] == [4, 5, 3, 2, 1]


def test_rank_offsets_differing_by_multiples_of_two_to_the_32():
    # (int)(o2 - o1) in Java is 0 for a difference of 2**32 and negative for 2**31.
    for delta in (2**31, 2**32, 2**32 + 1, 2**40):
        a = BrokerLiveInfo(1, epoch=1, max_offset=1000)
        b = BrokerLiveInfo(2, epoch=1, max_offset=1000 + delta, election_priority=5)
        assert election.best_candidate([a, b]).broker_id == 2, delta


def test_decide_pools_and_outcomes():
    alive = {i: BrokerLiveInfo(i, max_offset=i * 10) for i in (2, 3, 4)}
    common = dict(registered=frozenset({1, 2, 3, 4}), first_election=False)
    d = election.decide(master=1, sync_state_set=frozenset({1, 2}), eligible=frozenset({3}), alive=alive,
                        designated=None, unclean_enabled=False, **common)
    assert d.outcome is election.Outcome.ELECT and d.new_master == 3 and not d.unclean   # eligible, more data
    d = election.decide(master=1, sync_state_set=frozenset({1}), eligible=frozenset(), alive=alive,
                        designated=None, unclean_enabled=False, **common)
    assert d.outcome is election.Outcome.NONE
    d = election.decide(master=1, sync_state_set=frozenset({1}), eligible=frozenset(), alive=alive,
                        designated=None, unclean_enabled=True, **common)
    assert d.outcome is election.Outcome.ELECT and d.new_master == 4 and d.unclean
    d = election.decide(master=1, sync_state_set=frozenset({1, 2}), eligible=frozenset(), alive=alive,
                        designated=4, unclean_enabled=False, **common)
    assert d.outcome is election.Outcome.DESIGNATED_INVALID


def test_unclean_shutdown_replica_is_not_a_clean_candidate():
    alive = {2: BrokerLiveInfo(2, max_offset=99, clean_shutdown=False), 3: BrokerLiveInfo(3, max_offset=1)}
    d = election.decide(master=None, sync_state_set=frozenset({1, 2, 3}), eligible=frozenset(),
                        registered=frozenset({1, 2, 3}), alive=alive, first_election=False, designated=None,
                        unclean_enabled=False)
    assert d.new_master == 3


def test_eligible_rules():
    assert election.eligible_after_election(
        new_master=2, old_sync_state_set=frozenset({1, 2, 3}), old_eligible=frozenset(), unclean=False,
        min_in_sync_replicas=1, enabled=True) == frozenset()   # the new master may ack alone: nobody else is safe
    assert election.eligible_after_election(
        new_master=2, old_sync_state_set=frozenset({1, 2, 3}), old_eligible=frozenset({4}), unclean=False,
        min_in_sync_replicas=2, enabled=True, lost_data=frozenset({3})) == frozenset({1, 4})
    assert election.eligible_after_election(
        new_master=2, old_sync_state_set=frozenset({1, 2, 3}), old_eligible=frozenset(), unclean=True,
        min_in_sync_replicas=2, enabled=True) == frozenset()
    # Shrinking below minInSyncReplicas moves the dropped members to eligible; reaching it clears.
    assert election.eligible_after_alter(
        old_sync_state_set=frozenset({1, 2}), new_sync_state_set=frozenset({1}), old_eligible=frozenset({3}),
        min_in_sync_replicas=2, enabled=True) == frozenset({2, 3})
    assert election.eligible_after_alter(
        old_sync_state_set=frozenset({1}), new_sync_state_set=frozenset({1, 3}), old_eligible=frozenset({2, 3}),
        min_in_sync_replicas=2, enabled=True) == frozenset()


# --------------------------------------------------------------------------- through the state machine


def test_new_master_dies_before_slaves_rejoin_eligible_replica_still_electable():
    h = group_with_master(min_in_sync_replicas=2)      # SSS {1,2,3}, master 1
    infos = {i: BrokerLiveInfo(i, epoch=1, max_offset=1000) for i in (1, 2, 3)}
    r = h.elect([infos[2], infos[3]], trigger=TRIGGER_CONTROLLER)        # master 1 died
    assert r.ok and r.replica.master_broker_id == 2
    assert r.replica.sync_state_set == (2,) and r.replica.eligible_replicas == (1, 3)
    # 2 dies before 3 rejoins its SSS; RocketMQ would have no clean candidate left.
    r = h.elect([infos[3]], trigger=TRIGGER_CONTROLLER)
    assert r.ok and r.replica.master_broker_id == 3 and r.replica.master_epoch == 3
    assert h.history[-1]["unclean"] is False
    assert r.replica.eligible_replicas == (1, 2)


def test_without_eligible_replicas_rocketmq_behaviour_is_kept():
    h = group_with_master(min_in_sync_replicas=2, enable_eligible_replicas=False)
    infos = {i: BrokerLiveInfo(i, epoch=1, max_offset=1000) for i in (1, 2, 3)}
    assert h.elect([infos[2], infos[3]], trigger=TRIGGER_CONTROLLER).replica.eligible_replicas == ()
    assert h.elect([infos[3]], trigger=TRIGGER_CONTROLLER).code == Code.CONTROLLER_MASTER_NOT_AVAILABLE


def test_unclean_shutdown_eligible_replica_is_not_electable():
    h = group_with_master(min_in_sync_replicas=2)
    infos = {i: BrokerLiveInfo(i, epoch=1, max_offset=1000) for i in (1, 2, 3)}
    assert h.elect([infos[2], infos[3]], trigger=TRIGGER_CONTROLLER).ok
    # 3 crashed uncleanly meanwhile and reports it in its heartbeat (before its registration lands).
    lost = BrokerLiveInfo(3, epoch=1, max_offset=5000, clean_shutdown=False)
    r = h.elect([lost], trigger=TRIGGER_CONTROLLER)
    assert r.code == Code.CONTROLLER_MASTER_NOT_AVAILABLE
    assert h.view().master_broker_id is None


def test_unclean_registration_keeps_an_eligible_replica_as_a_holder_but_not_electable():
    h = group_with_master(min_in_sync_replicas=2)
    infos = {i: BrokerLiveInfo(i, epoch=1, max_offset=1000) for i in (1, 2, 3)}
    assert h.elect([infos[2], infos[3]], trigger=TRIGGER_CONTROLLER).replica.eligible_replicas == (1, 3)
    assert h.w(RegisterBrokerRequest(C, G, 3, "127.0.0.1:9003", clean_shutdown=False)).ok
    # it stays a last known holder (for the unclean recovery), but its heartbeats say unclean
    # until it caught up with a master, and an unclean replica is no clean candidate
    assert h.view().eligible_replicas == (1, 3)
    unclean3 = BrokerLiveInfo(3, epoch=1, max_offset=1000, clean_shutdown=False)
    assert h.elect([unclean3], trigger=TRIGGER_CONTROLLER).code == Code.CONTROLLER_MASTER_NOT_AVAILABLE


def test_eligible_set_clears_once_sss_reaches_min_in_sync_replicas():
    h = group_with_master(min_in_sync_replicas=2)
    infos = {i: BrokerLiveInfo(i, epoch=1, max_offset=1000) for i in (1, 2, 3)}
    assert h.elect([infos[2], infos[3]], trigger=TRIGGER_CONTROLLER).ok
    r = h.alter([2, 3])
    assert r.ok and r.replica.eligible_replicas == ()
    # Shrinking back below the minimum makes the dropped member eligible again.
    r = h.alter([2], alive=[2])
    assert r.ok and r.replica.eligible_replicas == (3,)


def test_unclean_registration_of_sss_slave_stays_in_the_set_but_is_not_electable():
    h = group_with_master()
    v = h.view()
    assert h.w(RegisterBrokerRequest(C, G, 3, "127.0.0.1:9003", clean_shutdown=False)).ok
    nv = h.view()
    # the master shrinks it if it does not catch up; the controller keeps it as a known holder
    assert nv.sync_state_set == (1, 2, 3) and nv.master_epoch == v.master_epoch
    r = h.elect([BrokerLiveInfo(2, epoch=1, max_offset=10),
                 BrokerLiveInfo(3, epoch=1, max_offset=10**6, clean_shutdown=False)], trigger=TRIGGER_CONTROLLER)
    assert r.ok and r.replica.master_broker_id == 2


def test_unclean_registration_of_master_records_no_master_and_next_election_avoids_it():
    h = group_with_master()
    v = h.view()
    assert h.w(RegisterBrokerRequest(C, G, 1, "127.0.0.1:9001", clean_shutdown=False)).ok
    nv = h.view()
    assert nv.master_broker_id is None and nv.master_epoch == v.master_epoch + 1
    # without a master the set stays the last known holders (for the unclean recovery); 1's
    # unclean heartbeats keep it from a normal election
    assert nv.sync_state_set == (1, 2, 3)
    assert h.history[-1]["event"] == "NoMaster"
    # 1's heartbeats state its unclean restart until it caught up (ReplicasManager.log_intact)
    r = h.elect([BrokerLiveInfo(1, epoch=1, max_offset=10**6, clean_shutdown=False),
                 BrokerLiveInfo(2, epoch=1, max_offset=10)], trigger=TRIGGER_BROKER, broker_id=1)
    assert r.ok and r.replica.master_broker_id == 2


def test_sss_whose_members_all_restarted_unclean_is_not_a_first_election():
    h = group_with_master()
    assert h.alter([1, 2]).ok                                   # 3 lags: outside the SSS
    r = h.elect([BrokerLiveInfo(3, epoch=1, max_offset=10)], trigger=TRIGGER_CONTROLLER)   # 1 and 2 died
    assert r.code == Code.CONTROLLER_MASTER_NOT_AVAILABLE and h.view().sync_state_set == (1, 2)
    for bid in (1, 2):                                          # both come back having lost their tails
        assert h.w(RegisterBrokerRequest(C, G, bid, f"127.0.0.1:{9000 + bid}", clean_shutdown=False)).ok
    v = h.view()
    # no master: the set stays the last known holders of the acked messages
    assert v.master_broker_id is None and v.sync_state_set == (1, 2) and v.eligible_replicas == ()
    # Only 1 of them is back: 3 (which never held the acked data) is not elected as if it were
    # clean, and 1 is not elected while 2, which may hold more, has not reported.
    alive = [BrokerLiveInfo(1, 1, 50, clean_shutdown=False), BrokerLiveInfo(3, 1, 10**9)]
    assert h.elect(alive, trigger=TRIGGER_BROKER, broker_id=3).code == Code.CONTROLLER_MASTER_NOT_AVAILABLE
    assert h.elect(alive, trigger=TRIGGER_BROKER, broker_id=1).code == Code.CONTROLLER_MASTER_NOT_AVAILABLE
    # The operator's unclean election takes any alive replica, the one with the most data first.
    h2 = group_with_master()
    assert h2.alter([1, 2]).ok
    assert h2.elect([BrokerLiveInfo(3, epoch=1, max_offset=10)], trigger=TRIGGER_CONTROLLER).code \
        == Code.CONTROLLER_MASTER_NOT_AVAILABLE
    assert h2.w(UpdateControllerConfigRequest({"enable_elect_unclean_master": "true"})).ok
    r = h2.elect(alive, trigger=TRIGGER_BROKER, broker_id=3)
    assert r.ok and r.replica.master_broker_id == 3 and h2.history[-1]["unclean"] is True


def test_unclean_recovery_elects_the_longest_log_once_the_whole_set_is_back():
    """Found by the data simulator's power cuts: every member of the set restarted uncleanly
    (the whole group lost power with async flush) used to leave the group without a master for
    ever. Once every member is back, the longest log is elected (KIP-966's balanced recovery):
    nothing better can come, and it loses the least."""
    h = group_with_master()
    assert h.alter([1, 2]).ok
    assert h.elect([BrokerLiveInfo(3, epoch=1, max_offset=10)], trigger=TRIGGER_CONTROLLER).code \
        == Code.CONTROLLER_MASTER_NOT_AVAILABLE
    for bid in (1, 2):
        assert h.w(RegisterBrokerRequest(C, G, bid, f"127.0.0.1:{9000 + bid}", clean_shutdown=False)).ok
    alive = [BrokerLiveInfo(1, 1, 50, clean_shutdown=False), BrokerLiveInfo(2, 1, 70, clean_shutdown=False),
             BrokerLiveInfo(3, 1, 10**9)]
    r = h.elect(alive, trigger=TRIGGER_BROKER, broker_id=3)
    assert r.ok and r.replica.master_broker_id == 2 and r.replica.sync_state_set == (2,)
    assert "unclean_recovery_whole_set" in h.history[-1]["reason"]

def test_unclean_registration_of_a_lone_master_moves_it_to_a_new_epoch():
    """Issue 30: alone in its SyncStateSet, an unclean master used to resume the same MasterEpoch
    and write new records at offsets it had lost; a slave outside the set that still held the old
    bytes of that epoch kept them at its handshake. It stays master (the only copy) at a new epoch."""
    h = group_with_master()
    assert h.alter([1]).ok
    v = h.view()
    assert h.w(RegisterBrokerRequest(C, G, 1, "127.0.0.1:9001", clean_shutdown=False)).ok
    nv = h.view()
    assert nv.master_broker_id == 1 and nv.master_epoch == v.master_epoch + 1 and nv.sync_state_set == (1,)
    assert h.history[-1]["event"] == "ElectMaster" and "unclean_shutdown_new_epoch" in h.history[-1]["reason"]
    # a clean registration changes nothing
    assert h.w(RegisterBrokerRequest(C, G, 1, "127.0.0.1:9001", clean_shutdown=True)).ok
    assert h.view().master_epoch == nv.master_epoch



def test_unclean_lone_master_does_not_outrank_an_eligible_replica():
    """Found by the power-loss rounds' review: min_in_sync_replicas 2, the set shrank to the master
    alone, so 2 and 3 stayed eligible (they hold everything acknowledged). A master that then lost
    its unsynced tail must not be elected again at a new epoch: 2 and 3 would truncate to it."""
    h = group_with_master(min_in_sync_replicas=2)
    assert h.alter([1]).ok
    assert h.view().eligible_replicas == (2, 3)
    assert h.w(RegisterBrokerRequest(C, G, 1, "127.0.0.1:9001", clean_shutdown=False)).ok
    nv = h.view()
    assert nv.master_broker_id is None and nv.eligible_replicas == (2, 3)
    r = h.elect([BrokerLiveInfo(1, epoch=1, max_offset=10, clean_shutdown=False),
                 BrokerLiveInfo(2, epoch=1, max_offset=1000)], trigger=TRIGGER_BROKER, broker_id=1)
    assert r.ok and r.replica.master_broker_id == 2 and h.history[-1]["unclean"] is False

def test_a_master_stating_a_smaller_min_in_sync_replicas_keeps_no_eligible_replica():
    """Issue 30: the controller's min_in_sync_replicas (3) and the brokers' (1) disagreed. The
    controller took a shrink to {1, 2} for "below min: the master acknowledges nothing", kept 3
    eligible, and could elect it after the master acknowledged writes 3 never got. The master
    states its rule in heartbeats; the smaller one decides."""
    from autoswitch.controller.messages import AlterSyncStateSetRequest

    def shrink(stated: int):
        h = group_with_master(min_in_sync_replicas=3)
        v = h.view()
        r = h.w(AlterSyncStateSetRequest(G, 1, v.master_epoch, (1, 2), v.sync_state_set_epoch, (1, 2),
                                         ts_ms=h.ts, master_min_in_sync_replicas=stated))
        assert r.ok, r
        return h.view()

    assert shrink(0).eligible_replicas == (3,), "not stated: the setting decides, as before"
    assert shrink(3).eligible_replicas == (3,)
    assert shrink(2).eligible_replicas == (), "the master acknowledges with {1, 2}: 3 may lack acked messages"
    assert election.effective_min_in_sync(3, 1) == 1 and election.effective_min_in_sync(1, 3) == 1
    assert election.effective_min_in_sync(2, 0) == 2


def test_a_new_master_stating_min_one_leaves_no_eligible_replica():
    h = group_with_master(min_in_sync_replicas=2)
    r = h.elect([BrokerLiveInfo(2, epoch=1, max_offset=400, min_in_sync_replicas=2), BrokerLiveInfo(3, 1, 300)],
                trigger=TRIGGER_CONTROLLER, dead=(1,))
    assert r.ok and r.replica.master_broker_id == 2 and set(r.replica.eligible_replicas) == {1, 3}
    h = group_with_master(min_in_sync_replicas=2)
    r = h.elect([BrokerLiveInfo(2, epoch=1, max_offset=400, min_in_sync_replicas=1), BrokerLiveInfo(3, 1, 300)],
                trigger=TRIGGER_CONTROLLER, dead=(1,))
    assert r.ok and r.replica.master_broker_id == 2 and r.replica.eligible_replicas == (), \
        "it acknowledges alone at once: nobody else is sure to hold what it acknowledges"


def test_an_operator_may_not_depose_a_live_master_that_acknowledges_without_its_successor():
    """Issue 30: an admin-designated election deposed a live master whose lease was valid; in ack
    mode quorum it went on acknowledging (with the third replica's ack) until it learned, while the
    new master acknowledged too. Refused there, with the handover named; allowed in ack mode all."""
    from autoswitch.controller.messages import TRIGGER_ADMIN

    for mode, ok in (("quorum", False), ("master", False), ("all", True), ("", True)):
        h = group_with_master()
        v = h.view()
        alive = [BrokerLiveInfo(1, epoch=v.master_epoch, max_offset=500, ack_mode=mode),
                 BrokerLiveInfo(2, epoch=v.master_epoch, max_offset=500, ack_mode=mode)]
        r = h.elect(alive, trigger=TRIGGER_ADMIN, broker_id=2, designate=True)
        assert r.ok == ok, (mode, r)
        if not ok:
            assert r.code == Code.CONTROLLER_ELECT_MASTER_FAILED and "transfer-master" in r.remark, r
    # a dead master (not alive) may be replaced by an operator whatever its mode
    h = group_with_master()
    v = h.view()
    r = h.elect([BrokerLiveInfo(2, epoch=v.master_epoch, max_offset=500, ack_mode="quorum")], trigger=TRIGGER_ADMIN,
                broker_id=2, designate=True, dead=(1,))
    assert r.ok and r.replica.master_broker_id == 2


def test_an_out_of_range_stamped_min_in_sync_is_malformed():
    import pytest
    from autoswitch.controller.messages import (
        AlterSyncStateSetRequest,
        MalformedRequest,
        check_request,
        encode_request,
    )

    for bad in (-1, 65, "2"):
        req = AlterSyncStateSetRequest(G, 1, 1, (1, 2), 1, (1, 2), master_min_in_sync_replicas=bad)
        with pytest.raises(MalformedRequest, match="master_min_in_sync_replicas"):
            check_request(req)
        with pytest.raises(MalformedRequest, match="master_min_in_sync_replicas"):
            encode_request(req)
    check_request(AlterSyncStateSetRequest(G, 1, 1, (1, 2), 1, (1, 2), master_min_in_sync_replicas=64))


def test_a_diverged_replica_is_not_a_clean_candidate_and_loses_unclean_elections():
    """Issue 32: a slave whose range digests found other bytes than its master's is quarantined for
    elections too, even while the SyncStateSet still names it (before the shrink commits)."""
    alive = {2: BrokerLiveInfo(2, max_offset=99, diverged=True), 3: BrokerLiveInfo(3, max_offset=1)}
    common = dict(registered=frozenset({1, 2, 3}), first_election=False, designated=None)
    d = election.decide(master=None, sync_state_set=frozenset({1, 2, 3}), eligible=frozenset(), alive=alive,
                        unclean_enabled=False, **common)
    assert d.outcome is election.Outcome.ELECT and d.new_master == 3 and not d.unclean
    # the diverged one alone in the set: no clean election ...
    d = election.decide(master=None, sync_state_set=frozenset({1, 2}), eligible=frozenset(), alive=alive,
                        unclean_enabled=False, **common)
    assert d.outcome is election.Outcome.NONE
    # ... and an unclean one prefers the intact replica over the longer diverged log
    d = election.decide(master=None, sync_state_set=frozenset({1, 2}), eligible=frozenset(), alive=alive,
                        unclean_enabled=True, **common)
    assert d.new_master == 3 and d.unclean
    # with nothing else alive, the operator's unclean election still has a candidate
    d = election.decide(master=None, sync_state_set=frozenset({1, 2}), eligible=frozenset(), alive={2: alive[2]},
                        unclean_enabled=True, **common)
    assert d.new_master == 2 and d.unclean


def test_the_diverged_flag_travels_in_the_log_entry():
    import msgspec

    info = BrokerLiveInfo(2, max_offset=5, diverged=True)
    assert msgspec.msgpack.decode(msgspec.msgpack.encode(info), type=BrokerLiveInfo) == info
    # an entry written before the field existed decodes as not diverged
    old = msgspec.msgpack.encode([2, 0, 5, 0, 0, True, 0, "", ""])
    assert msgspec.msgpack.decode(old, type=BrokerLiveInfo).diverged is False
