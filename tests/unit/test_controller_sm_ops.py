"""Controller state machine: one test per operation and per response code.

Every write goes through the real Raft-log path (encode_request -> apply(index, bytes)).
"""

from __future__ import annotations

import json

import msgspec
import pytest
from autoswitch.controller.codes import Code
from autoswitch.controller.messages import (
    TRIGGER_ADMIN,
    TRIGGER_BROKER,
    TRIGGER_CONTROLLER,
    TRIGGER_HANDOVER,
    AlterSyncStateSetRequest,
    ApplyBrokerIdRequest,
    BrokerLiveInfo,
    CleanBrokerDataRequest,
    ElectMasterRequest,
    GetControllerConfigRequest,
    GetMetaDataRequest,
    GetNextBrokerIdRequest,
    GetReplicaInfoRequest,
    GetSyncStateDataRequest,
    MalformedRequest,
    RegisterBrokerRequest,
    UpdateControllerConfigRequest,
    check_request,
    encode_request,
)
from autoswitch.controller.state.history import encode_record
from autoswitch.controller.state.sm_config import SMConfig
from autoswitch.controller.state.statemachine import ControllerStateMachine

C, G = "DefaultCluster", "broker-a"


class Harness:
    """A state machine fed through bytes, with an index counter and the history it emitted."""

    def __init__(self, **cfg) -> None:
        # the history as events.jsonl holds it (plain JSON values; actor, trigger, crash only when set)
        self.history: list[dict] = []
        self.sm = ControllerStateMachine(SMConfig(**cfg),
                                         history_sink=lambda rec: self.history.append(msgspec.json.decode(encode_record(rec))))
        self.index = 0
        self.ts = 1_000_000

    def w(self, req):
        self.index += 1
        return self.sm.apply(self.index, encode_request(req))

    def q(self, req):
        return self.sm.query(req)

    def view(self, group=G):
        return self.sm.replica_view(group)

    def register(self, *ids, group=G):
        for bid in ids:
            r = self.w(ApplyBrokerIdRequest(C, group, bid, f"127.0.0.1:{9000 + bid};{bid}", ts_ms=self.ts))
            assert r.ok, r
            r = self.w(RegisterBrokerRequest(C, group, bid, f"127.0.0.1:{9000 + bid}", ts_ms=self.ts))
            assert r.ok, r

    def elect(self, alive, trigger=TRIGGER_BROKER, broker_id=0, designate=False, dead=(), group=G, ts=None):
        infos = tuple(a if isinstance(a, BrokerLiveInfo) else BrokerLiveInfo(a, max_offset=100) for a in alive)
        v = self.view(group)
        if trigger == TRIGGER_CONTROLLER and not dead and v is not None and v.master_broker_id is not None \
                and v.master_broker_id not in {i.broker_id for i in infos}:
            dead = (v.master_broker_id,)   # what the scan claims (ScanPlanner.plan does the same)
        return self.w(ElectMasterRequest(C, group, trigger, broker_id, designate, infos,
                                         ts_ms=self.ts if ts is None else ts, dead_broker_ids=tuple(dead)))

    def alter(self, new, master=None, epoch=None, sss_epoch=None, alive=None, group=G):
        v = self.view(group)
        return self.w(AlterSyncStateSetRequest(
            group, master if master is not None else v.master_broker_id,
            epoch if epoch is not None else v.master_epoch, tuple(new),
            sss_epoch if sss_epoch is not None else v.sync_state_set_epoch,
            tuple(alive if alive is not None else new), ts_ms=self.ts))


def group_with_master(**cfg) -> Harness:
    """Brokers 1,2,3 registered; 1 is master with SSS {1,2,3}."""
    h = Harness(**cfg)
    h.register(1, 2, 3)
    r = h.elect([BrokerLiveInfo(1, max_offset=500), BrokerLiveInfo(2, max_offset=400), BrokerLiveInfo(3, max_offset=300)])
    assert r.ok and r.replica.master_broker_id == 1
    assert h.alter([1, 2, 3]).ok
    return h


# --------------------------------------------------------------------------- broker ids


def test_get_next_broker_id_starts_at_one_and_follows_applied_ids():
    h = Harness()
    assert h.q(GetNextBrokerIdRequest(C, G)).broker_id == 1
    h.register(1, 2)
    assert h.q(GetNextBrokerIdRequest(C, G)).broker_id == 3


def test_apply_broker_id_is_idempotent_for_the_same_check_code():
    h = Harness()
    req = ApplyBrokerIdRequest(C, G, 1, "127.0.0.1:9001;42", ts_ms=1)
    assert h.w(req).ok
    n = len(h.history)
    again = h.w(req)
    assert again.ok and again.broker_id == 1
    assert len(h.history) == n, "an idempotent retry must not produce events"


def test_apply_broker_id_taken_by_another_check_code_is_broker_id_invalid():
    h = Harness()
    assert h.w(ApplyBrokerIdRequest(C, G, 1, "127.0.0.1:9001;1")).ok
    r = h.w(ApplyBrokerIdRequest(C, G, 1, "127.0.0.1:9002;2"))
    assert r.code == Code.CONTROLLER_BROKER_ID_INVALID


def test_certificate_named_ids_register_in_any_order():
    """A broker whose certificate names its id (broker/<group>/<id>) applies exactly that id, so a
    group may start at 2, and an id skipped so far (never assigned) stays free."""
    h = Harness()
    assert h.w(ApplyBrokerIdRequest(C, G, 3, "a:3;1")).ok
    assert h.q(GetNextBrokerIdRequest(C, G)).broker_id == 4
    assert h.w(ApplyBrokerIdRequest(C, G, 1, "a:1;1")).ok
    assert h.w(ApplyBrokerIdRequest(C, G, 2, "a:2;1")).ok


def test_cleaned_ids_stay_retired_across_a_snapshot():
    h = Harness()
    h.register(1, 3)
    assert h.w(CleanBrokerDataRequest(C, G, (3,), clean_living_broker=True)).ok
    snap = h.sm.snapshot()
    sm = ControllerStateMachine(SMConfig())
    sm.restore(snap)
    for m in (h.sm, sm):
        idx = m.last_applied_index + 1
        assert m.apply(idx, encode_request(ApplyBrokerIdRequest(C, G, 3, "b:3;2"))).code == \
            Code.CONTROLLER_BROKER_ID_INVALID, "a cleaned id is never applied again"
        assert m.apply(idx + 1, encode_request(ApplyBrokerIdRequest(C, G, 2, "b:2;2"))).ok, "a gap is free"


def test_broker_id_in_another_cluster_is_invalid_request():
    h = Harness()
    h.register(1)
    assert h.w(ApplyBrokerIdRequest("other", G, 2, "a;1")).code == Code.CONTROLLER_INVALID_REQUEST


def test_register_broker_records_address_change():
    h = Harness()
    h.register(1)
    n = len(h.history)
    assert h.w(RegisterBrokerRequest(C, G, 1, "127.0.0.1:9001")).ok
    assert len(h.history) == n, "same address: nothing to record"
    r = h.w(RegisterBrokerRequest(C, G, 1, "10.0.0.7:9001"))
    assert r.ok
    assert h.history[-1]["event"] == "RegisterBroker"
    data = h.q(GetSyncStateDataRequest((G,))).data
    assert data[G]["brokers"]["1"] == "10.0.0.7:9001"


def test_master_ha_address_is_what_the_master_registered():
    h = group_with_master()
    assert h.view().master_ha_address is None                    # registered without one
    n = len(h.history)
    assert h.w(RegisterBrokerRequest(C, G, 1, "127.0.0.1:9001", broker_ha_address="127.0.0.1:7001")).ok
    assert h.history[-1]["event"] == "RegisterBroker" and len(h.history) == n + 1
    assert h.view().master_ha_address == "127.0.0.1:7001" and h.view().master_address == "127.0.0.1:9001"
    assert h.w(RegisterBrokerRequest(C, G, 2, "127.0.0.1:9002", broker_ha_address="127.0.0.1:7002")).ok
    assert h.view().master_ha_address == "127.0.0.1:7001"       # a slave's own address is not the master's
    # kept across a snapshot
    sm2 = ControllerStateMachine(SMConfig())
    sm2.restore(h.sm.snapshot())
    assert sm2.replica_view(G) == h.view()
    # a new registration without it clears it (the broker no longer serves HA there)
    assert h.w(RegisterBrokerRequest(C, G, 1, "127.0.0.1:9001")).ok
    assert h.view().master_ha_address is None
    bad = RegisterBrokerRequest(C, G, 1, "a:1", broker_ha_address="x" * 10_000)
    with pytest.raises(MalformedRequest):
        encode_request(bad)


def test_register_unknown_group_or_id_needs_registration():
    h = Harness()
    assert h.w(RegisterBrokerRequest(C, G, 1, "a:1")).code == Code.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED
    h.register(1)
    assert h.w(RegisterBrokerRequest(C, G, 5, "a:1")).code == Code.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED


# --------------------------------------------------------------------------- elections


def test_first_election_is_data_aware_not_first_asker():
    h = Harness()
    h.register(1, 2, 3)
    alive = [BrokerLiveInfo(1, max_offset=10), BrokerLiveInfo(2, max_offset=5_000),
             BrokerLiveInfo(3, max_offset=300)]
    r = h.elect(alive, trigger=TRIGGER_BROKER, broker_id=1)   # broker 1 asks first
    assert r.ok and r.replica.master_broker_id == 2
    assert r.replica.master_epoch == 1 and r.replica.sync_state_set == (2,)
    assert r.replica.sync_state_set_epoch == 1


def test_first_election_waits_for_registered_replicas_until_grace_ends():
    h = Harness(first_election_grace_ms=5000)
    h.register(1, 2, 3)
    early = h.elect([BrokerLiveInfo(1, max_offset=10), BrokerLiveInfo(2, max_offset=20)], ts=h.ts + 100)
    assert early.code == Code.CONTROLLER_ELECT_MASTER_FAILED
    assert h.view().master_broker_id is None and h.view().master_epoch == 0
    late = h.elect([BrokerLiveInfo(1, max_offset=10), BrokerLiveInfo(2, max_offset=20)], ts=h.ts + 5000)
    assert late.ok and late.replica.master_broker_id == 2


def test_ranking_epoch_then_offset_then_priority_with_offsets_beyond_32_bits():
    h = group_with_master()
    # Master 1 dies. 2 and 3: same epoch; 3 has 2**33 more bytes — a 32-bit cast of the
    # difference (RocketMQ's comparator) would see 0 and fall through to priority, picking 2.
    alive = [BrokerLiveInfo(2, epoch=1, max_offset=2**40, election_priority=0),
             BrokerLiveInfo(3, epoch=1, max_offset=2**40 + 2**33, election_priority=9)]
    r = h.elect(alive, trigger=TRIGGER_CONTROLLER)
    assert r.ok and r.replica.master_broker_id == 3
    assert r.replica.master_epoch == 2


def test_ranking_prefers_higher_epoch_over_more_offset():
    h = group_with_master()
    alive = [BrokerLiveInfo(2, epoch=1, max_offset=10**15), BrokerLiveInfo(3, epoch=2, max_offset=1)]
    assert h.elect(alive, trigger=TRIGGER_CONTROLLER).replica.master_broker_id == 3


def test_ranking_ties_broken_by_priority_then_broker_id():
    h = group_with_master()
    alive = [BrokerLiveInfo(2, epoch=1, max_offset=7, election_priority=5),
             BrokerLiveInfo(3, epoch=1, max_offset=7, election_priority=1)]
    assert h.elect(alive, trigger=TRIGGER_CONTROLLER).replica.master_broker_id == 3


def test_old_master_alive_is_kept_with_master_still_exist():
    h = group_with_master()
    before = h.view()
    r = h.elect([1, 2, 3], trigger=TRIGGER_BROKER, broker_id=2)
    assert r.code == Code.CONTROLLER_MASTER_STILL_EXIST
    assert h.view() == before


def test_broker_trigger_cannot_replace_a_master_not_agreed_dead():
    h = group_with_master()
    r = h.elect([2, 3], trigger=TRIGGER_BROKER, broker_id=2)
    assert r.code == Code.CONTROLLER_ELECT_MASTER_FAILED
    assert h.view().master_broker_id == 1
    r = h.elect([2, 3], trigger=TRIGGER_BROKER, broker_id=2, dead=(1,))
    assert r.ok and r.replica.master_broker_id in (2, 3)


def test_stale_pipelined_election_cannot_depose_the_master_another_election_made():
    h = group_with_master()
    # The scan saw master 1 dead and proposed; before it applied, an admin switched to 3, which the
    # scan's (older) alive list did not contain.
    stale = ElectMasterRequest(C, G, TRIGGER_CONTROLLER, 0, False, (BrokerLiveInfo(2, max_offset=9),),
                               ts_ms=h.ts, dead_broker_ids=(1,))
    assert h.elect([1, 2, 3], trigger=TRIGGER_ADMIN, broker_id=3, designate=True).ok
    r = h.w(stale)
    assert r.code == Code.CONTROLLER_ELECT_MASTER_FAILED
    assert h.view().master_broker_id == 3


def test_designated_election_of_dead_broker_fails():
    h = group_with_master()
    r = h.elect([1, 2], trigger=TRIGGER_ADMIN, broker_id=3, designate=True)
    assert r.code == Code.CONTROLLER_ELECT_MASTER_FAILED
    assert h.view().master_broker_id == 1


def test_designated_election_of_current_master_is_master_still_exist():
    h = group_with_master()
    r = h.elect([1, 2, 3], trigger=TRIGGER_ADMIN, broker_id=1, designate=True)
    assert r.code == Code.CONTROLLER_MASTER_STILL_EXIST


def test_designated_election_switches_to_a_live_sss_member():
    h = group_with_master()
    r = h.elect([1, 2, 3], trigger=TRIGGER_ADMIN, broker_id=3, designate=True)
    assert r.ok and r.replica.master_broker_id == 3 and r.replica.master_epoch == 2


def handover(h, to, frm=1, epoch=None, alive=(1, 2, 3), sss_epoch=None):
    infos = tuple(BrokerLiveInfo(a, max_offset=100) for a in alive)
    return h.w(ElectMasterRequest(C, G, TRIGGER_HANDOVER, to, True, infos, ts_ms=h.ts, handover_from=frm,
                                  expect_master_epoch=h.view().master_epoch if epoch is None else epoch,
                                  expect_sync_state_set_epoch=h.view().sync_state_set_epoch if sss_epoch is None
                                  else sss_epoch))


def test_handover_is_a_compare_and_set_on_master_and_epoch():
    h = group_with_master()
    r = handover(h, 3)
    assert r.ok and r.replica.master_broker_id == 3 and r.replica.master_epoch == 2
    assert r.replica.sync_state_set == (3,) and h.history[-1]["reason"] == "handover:designated"
    # Broker 1 is no longer the master: its (repeated or late) handover is refused, nothing changes.
    r = handover(h, 2, frm=1, epoch=1)
    assert r.code == Code.CONTROLLER_FENCED_MASTER_EPOCH and h.view().master_broker_id == 3
    # The right master but a stale epoch (an admin election raced it and the master was re-elected).
    assert h.elect([1, 2, 3], trigger=TRIGGER_ADMIN, broker_id=3, designate=True).code == \
        Code.CONTROLLER_MASTER_STILL_EXIST
    r = handover(h, 2, frm=3, epoch=1)
    assert r.code == Code.CONTROLLER_FENCED_MASTER_EPOCH and h.view().master_epoch == 2


def test_a_confirmed_sync_state_set_cancels_a_pending_handover_for_good():
    """The master that got no answer bumps syncStateSetEpoch (an unchanged-set confirm): a handover
    entry that commits after it can never pass."""
    h = group_with_master()
    pending_sss_epoch = h.view().sync_state_set_epoch
    assert h.alter([1, 2, 3]).ok                  # the confirm
    r = handover(h, 2, sss_epoch=pending_sss_epoch)
    assert r.code == Code.CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH and h.view().master_broker_id == 1


def test_handover_target_must_be_in_sync_and_alive():
    h = group_with_master()
    assert h.alter([1, 2]).ok                     # 3 left the SyncStateSet
    r = handover(h, 3)
    assert r.code == Code.CONTROLLER_ELECT_MASTER_FAILED and h.view().master_broker_id == 1
    r = handover(h, 2, alive=(1, 3))              # 2 is not seen alive by a majority
    assert r.code == Code.CONTROLLER_ELECT_MASTER_FAILED and h.view().master_broker_id == 1
    assert handover(h, 2).ok


def test_handover_never_elects_unclean():
    h = group_with_master(enable_elect_unclean_master=True)
    assert h.alter([1, 2]).ok
    assert handover(h, 3).code == Code.CONTROLLER_ELECT_MASTER_FAILED


@pytest.mark.parametrize("kw", [dict(handover_from=0), dict(designate=False), dict(broker_id=1),
                                dict(expect_master_epoch=0), dict(expect_sync_state_set_epoch=0),
                                dict(trigger=TRIGGER_ADMIN)])
def test_malformed_handover_requests_are_refused(kw):
    base = dict(cluster_name=C, broker_name=G, trigger=TRIGGER_HANDOVER, broker_id=2, designate=True,
                handover_from=1, expect_master_epoch=1, expect_sync_state_set_epoch=1)
    with pytest.raises(MalformedRequest):
        check_request(ElectMasterRequest(**{**base, **kw}))


def test_no_candidate_controller_trigger_records_no_master_and_bumps_epoch():
    h = group_with_master()
    assert h.alter([1]).ok                       # SSS shrank to the master alone
    r = h.elect([2, 3], trigger=TRIGGER_CONTROLLER)   # master dead, 2/3 outside SSS
    assert r.code == Code.CONTROLLER_MASTER_NOT_AVAILABLE
    v = h.view()
    assert v.master_broker_id is None and v.master_epoch == 2 and v.sync_state_set == (1,)
    assert h.history[-1]["event"] == "NoMaster"
    # The old master comes back: it is the only SSS member and gets elected again.
    r = h.elect([1, 2, 3], trigger=TRIGGER_BROKER, broker_id=1)
    assert r.ok and r.replica.master_broker_id == 1 and r.replica.master_epoch == 3


def test_no_candidate_broker_trigger_changes_nothing():
    h = group_with_master()
    assert h.alter([1]).ok
    before = h.view()
    r = h.elect([2], trigger=TRIGGER_BROKER, broker_id=2, dead=(1,))
    assert r.code == Code.CONTROLLER_MASTER_NOT_AVAILABLE
    assert h.view() == before


def test_unclean_election_off_and_on():
    h = group_with_master()
    assert h.alter([1]).ok
    assert h.elect([3], trigger=TRIGGER_CONTROLLER).code == Code.CONTROLLER_MASTER_NOT_AVAILABLE
    assert h.w(UpdateControllerConfigRequest({"enable_elect_unclean_master": "true"})).ok
    r = h.elect([3], trigger=TRIGGER_BROKER, broker_id=3)
    assert r.ok and r.replica.master_broker_id == 3
    assert h.history[-1]["event"] == "ElectMaster" and h.history[-1]["unclean"] is True


def test_elect_unregistered_group():
    h = Harness()
    assert h.elect([1]).code == Code.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED


# --------------------------------------------------------------------------- AlterSyncStateSet


def test_alter_sync_state_set_success_bumps_sss_epoch():
    h = group_with_master()
    v = h.view()
    r = h.alter([1, 2])
    assert r.ok and r.replica.sync_state_set == (1, 2)
    assert r.replica.sync_state_set_epoch == v.sync_state_set_epoch + 1
    assert r.replica.master_epoch == v.master_epoch


def test_alter_sync_state_set_unchanged_set_confirms_and_fences_older_proposals():
    """A master unsure whether its last proposal committed re-sends its current set: the epoch
    moves on, so the older proposal (same base epoch) can no longer commit."""
    h = group_with_master()
    assert h.alter([1, 2]).ok
    v = h.view()
    r = h.alter([1, 2])
    assert r.ok and r.replica.sync_state_set == (1, 2)
    assert r.replica.sync_state_set_epoch == v.sync_state_set_epoch + 1
    stale = h.alter([1, 2, 3], sss_epoch=v.sync_state_set_epoch)
    assert stale.code == Code.CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH


@pytest.mark.parametrize("case,code", [
    ("unknown_group", Code.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED),
    ("wrong_master", Code.CONTROLLER_INVALID_MASTER),
    ("stale_master_epoch", Code.CONTROLLER_FENCED_MASTER_EPOCH),
    ("stale_sss_epoch", Code.CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH),
    ("unregistered_member", Code.CONTROLLER_INVALID_REPLICAS),
    ("dead_member", Code.CONTROLLER_BROKER_NOT_ALIVE),
    ("without_master", Code.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED),
])
def test_alter_sync_state_set_rejections(case, code):
    h = group_with_master()
    assert h.alter([1, 2]).ok
    before = h.view()
    v = before
    if case == "unknown_group":
        r = h.w(AlterSyncStateSetRequest("nope", 1, 1, (1,), 1, (1,)))
    elif case == "wrong_master":
        r = h.alter([1, 2, 3], master=2)
    elif case == "stale_master_epoch":
        r = h.alter([1, 2, 3], epoch=v.master_epoch - 1)
    elif case == "stale_sss_epoch":
        r = h.alter([1, 2, 3], sss_epoch=v.sync_state_set_epoch - 1)
    elif case == "unregistered_member":
        r = h.alter([1, 2, 7])
    elif case == "dead_member":
        r = h.alter([1, 2, 3], alive=[1, 2])
    else:
        assert case == "without_master"
        r = h.alter([2, 3])
    assert r.code == code, r
    assert h.view() == before, "a rejected request must change nothing"


# --------------------------------------------------------------------------- CleanBrokerData


def test_clean_broker_data_refuses_a_living_broker():
    h = group_with_master()
    r = h.w(CleanBrokerDataRequest(C, G, (3,), alive_broker_ids=(1, 2, 3)))
    assert r.code == Code.CONTROLLER_INVALID_CLEAN_BROKER_METADATA
    r = h.w(CleanBrokerDataRequest(C, G, (), alive_broker_ids=(2,)))
    assert r.code == Code.CONTROLLER_INVALID_CLEAN_BROKER_METADATA
    assert h.view().sync_state_set == (1, 2, 3)


def test_clean_broker_data_listed_ids_leaves_sss_and_registry():
    h = group_with_master()
    v = h.view()
    r = h.w(CleanBrokerDataRequest(C, G, (3,), alive_broker_ids=(1, 2)))
    assert r.ok
    nv = h.view()
    assert nv.sync_state_set == (1, 2) and nv.sync_state_set_epoch == v.sync_state_set_epoch + 1
    assert "3" not in h.q(GetSyncStateDataRequest((G,))).data[G]["brokers"]
    # Ids are never reused.
    assert h.q(GetNextBrokerIdRequest(C, G)).broker_id == 4
    assert h.w(ApplyBrokerIdRequest(C, G, 3, "x;9")).code == Code.CONTROLLER_BROKER_ID_INVALID


def test_clean_whole_group_then_recreate_keeps_epochs_increasing():
    h = group_with_master()
    v = h.view()
    assert h.w(CleanBrokerDataRequest(C, G, ())).ok
    assert h.q(GetReplicaInfoRequest(G)).code == Code.CONTROLLER_BROKER_METADATA_NOT_EXIST
    nxt = h.q(GetNextBrokerIdRequest(C, G)).broker_id
    assert nxt == 4
    assert h.w(ApplyBrokerIdRequest(C, G, nxt, "a:1;1", ts_ms=h.ts)).ok
    r = h.elect([BrokerLiveInfo(nxt)])
    assert r.ok and r.replica.master_epoch == v.master_epoch + 1


def test_clean_living_broker_flag_overrides_liveness():
    h = group_with_master()
    assert h.w(CleanBrokerDataRequest(C, G, (3,), clean_living_broker=True, alive_broker_ids=(3,))).ok


def test_clean_unknown_group_or_id():
    h = group_with_master()
    assert h.w(CleanBrokerDataRequest(C, "nope")).code == Code.CONTROLLER_INVALID_CLEAN_BROKER_METADATA
    assert h.w(CleanBrokerDataRequest(C, G, (9,))).code == Code.CONTROLLER_INVALID_CLEAN_BROKER_METADATA


def test_clean_dead_master_records_no_master():
    h = group_with_master()
    v = h.view()
    assert h.w(CleanBrokerDataRequest(C, G, (1,), alive_broker_ids=(2, 3))).ok
    nv = h.view()
    assert nv.master_broker_id is None and nv.master_epoch == v.master_epoch + 1
    assert nv.sync_state_set == (2, 3)


# --------------------------------------------------------------------------- config and reads


def test_update_controller_config_blacklist_unknown_and_bad_values():
    h = Harness()
    assert h.w(UpdateControllerConfigRequest({"data_dir": "/tmp/x"})).code == Code.NO_PERMISSION
    assert h.w(UpdateControllerConfigRequest({"no_such_key": "1"})).code == Code.CONTROLLER_INVALID_REQUEST
    assert h.w(UpdateControllerConfigRequest({"min_in_sync_replicas": "0"})).code == Code.CONTROLLER_INVALID_REQUEST
    assert h.w(UpdateControllerConfigRequest({"enable_elect_unclean_master": "maybe"})).code == \
        Code.CONTROLLER_INVALID_REQUEST
    r = h.w(UpdateControllerConfigRequest({"min_in_sync_replicas": "2", "scan_interval_ms": "1000"}))
    assert r.ok and r.data["min_in_sync_replicas"] == "2"
    cfg = h.q(GetControllerConfigRequest()).data
    assert cfg["min_in_sync_replicas"] == "2" and cfg["scan_interval_ms"] == "1000"
    assert h.history[-1]["event"] == "UpdateConfig" and h.history[-1]["group"] == ""


def test_reads():
    h = group_with_master()
    ri = h.q(GetReplicaInfoRequest(G))
    assert ri.ok and ri.replica.master_broker_id == 1 and ri.replica.master_address == "127.0.0.1:9001"
    assert h.q(GetReplicaInfoRequest("nope")).code == Code.CONTROLLER_BROKER_METADATA_NOT_EXIST
    data = h.q(GetSyncStateDataRequest()).data
    assert set(data) == {G} and data[G]["syncStateSet"] == [1, 2, 3]
    md = h.q(GetMetaDataRequest()).data
    assert md == {"groups": 1, "lastAppliedIndex": h.index, "featureLevel": 1}
    json.dumps(h.q(GetSyncStateDataRequest()).to_dict())   # JSON-able for --json


# --------------------------------------------------------------------------- bad input


@pytest.mark.parametrize("data", [
    b"\xff\xfe", b"[]", b"{}", b'{"t":"Nope"}',  b'{"v":2,"t":"ApplyBrokerId"}',
    b'{"t":"ApplyBrokerId","cluster_name":"c","broker_name":"g"}',
    b'{"t":"ApplyBrokerId","cluster_name":"c","broker_name":"g","applied_broker_id":true,'
    b'"register_check_code":"x"}',
    b'{"t":"ElectMaster","cluster_name":"c","broker_name":"g","alive":[[1,0,-5,0,0,true]]}',
    b'{"t":"ElectMaster","cluster_name":"c","broker_name":"g","alive":[[1,0,5,0,0,1.0]]}',
    b'{"t":"ElectMaster","cluster_name":"c","broker_name":"g","alive":[[1,0,5.5,0,0,true]]}',
    b'{"t":"ElectMaster","cluster_name":"c","broker_name":"g","alive":[[1,0,5,0,0,true]],"extra":1}',
    b'{"t":"AlterSyncStateSet","broker_name":"g","master_broker_id":1,"master_epoch":1,'
    b'"new_sync_state_set":[1,1],"sync_state_set_epoch":1}',
    b'{"t":"ApplyBrokerId","cluster_name":"c","broker_name":"\\ud800","applied_broker_id":1,'
    b'"register_check_code":"x"}',
    b"[" * 100_000,
    b" " * (2 << 20),
])
def test_malformed_entries_answer_invalid_request_and_change_nothing(data):
    h = group_with_master()
    snap = h.sm.snapshot()
    h.index += 1
    r = h.sm.apply(h.index, data)
    assert r.code == Code.CONTROLLER_INVALID_REQUEST
    assert h.sm.last_applied_index == h.index
    h2 = ControllerStateMachine()
    h2.restore(snap)
    assert h2.state.groups.keys() == h.sm.state.groups.keys()
    assert h.view() == h2.replica_view(G)


def test_encode_refuses_invalid_requests_before_proposing():
    with pytest.raises(MalformedRequest):
        encode_request(ApplyBrokerIdRequest(C, G, 0, "x"))
    with pytest.raises(MalformedRequest):
        encode_request(ElectMasterRequest(C, G, "bogus-trigger"))
    with pytest.raises(MalformedRequest):
        encode_request(ElectMasterRequest(C, G, TRIGGER_ADMIN, 0, designate=True))
    with pytest.raises(MalformedRequest):
        encode_request(GetReplicaInfoRequest(G))   # reads are not proposed


def test_noop_and_duplicate_entries():
    h = Harness()
    assert h.sm.apply(1, b"") is None and h.sm.last_applied_index == 1
    assert h.sm.apply(1, encode_request(ApplyBrokerIdRequest(C, G, 1, "a;1"))).code == \
        Code.CONTROLLER_INVALID_REQUEST
    assert h.q(GetReplicaInfoRequest(G)).code == Code.CONTROLLER_BROKER_METADATA_NOT_EXIST


def test_history_record_format():
    h = group_with_master()
    rec = h.history[-1]
    assert set(rec) == {"ts_ms", "index", "group", "event", "master_broker_id", "master_epoch",
                        "sync_state_set", "sync_state_set_epoch", "reason", "unclean", "decision"}
    assert rec["event"] == "AlterSyncStateSet" and rec["index"] == h.index and rec["ts_ms"] == h.ts
    assert json.loads(rec["decision"])["outcome"] == "sync_state_set"
    assert rec["sync_state_set"] == [1, 2, 3] and rec["master_broker_id"] == 1
    elect = [r for r in h.history if r["event"] == "ElectMaster"][0]
    assert elect["master_epoch"] == 1 and elect["unclean"] is False
    json.dumps(h.history)


# --------------------------------------------------------------------------- invariants


def test_invariant_violation_rejects_the_entry_with_2015_and_changes_nothing():
    h = group_with_master()
    g = h.sm.state.groups[G]
    g.eligible = frozenset({2})          # corrupt in memory: 2 is also in the SSS
    before = h.view()
    r = h.w(RegisterBrokerRequest(C, G, 3, "10.9.9.9:1"))
    assert r.code == Code.CONTROLLER_JRAFT_INTERNAL_ERROR
    assert h.view() == before and h.sm.state.groups[G].brokers[3].address == "127.0.0.1:9003"
    assert h.sm.last_applied_index == h.index


def test_check_group_invariants_rules():
    import dataclasses

    from autoswitch.controller.state.sm_state import InvariantViolation, check_group_invariants

    h = group_with_master()
    good = h.sm.state.groups[G]
    check_group_invariants(good, good.copy())
    bad_cases = [
        dict(master_broker_id=7),                                      # not registered / outside SSS
        dict(sync_state_set=frozenset({2, 3})),                        # master outside SSS (and no epoch bump)
        dict(eligible=frozenset({9})),                                 # unregistered eligible
        dict(next_assign_broker_id=3),                                 # not above every id
        dict(master_epoch=good.master_epoch - 1),                      # epoch backwards
        dict(master_broker_id=2),                                      # new master, same MasterEpoch
        dict(sync_state_set=frozenset({1, 2})),                        # new SSS, same syncStateSetEpoch
    ]
    for change in bad_cases:
        after = dataclasses.replace(good.copy(), **change)
        with pytest.raises(InvariantViolation):
            check_group_invariants(good, after)
    ok = dataclasses.replace(good.copy(), master_broker_id=2, master_epoch=good.master_epoch + 1)
    check_group_invariants(good, ok)


def test_a_failing_history_sink_does_not_undo_or_break_apply():
    h = Harness()

    def broken(_rec):
        raise OSError("disk full")

    h.sm.history_sink = broken
    r = h.w(ApplyBrokerIdRequest(C, G, 1, "a:1;1"))
    assert r.ok and h.view() is not None


def test_handle_is_pure_and_matches_apply():
    from autoswitch.controller.state.statemachine import handle

    h = group_with_master()
    snap = h.sm.snapshot()
    req = ElectMasterRequest(C, G, TRIGGER_CONTROLLER, 0, False, (BrokerLiveInfo(2, 1, 50),), ts_ms=h.ts,
                             dead_broker_ids=(1, 3))
    events, reply = handle(req, h.sm.state)
    assert h.sm.snapshot() == snap, "handle must not touch the state"
    assert [type(e).__name__ for e in events] == ["ElectMasterEvent"] and reply.replica.master_broker_id == 2
    applied = h.w(req)
    # the applied decision differs only in the Raft index it was applied at (a dry run has none)
    assert applied.decision.index == h.index and reply.decision.index == 0
    assert applied == msgspec.structs.replace(reply, decision=msgspec.structs.replace(reply.decision, index=h.index))


def test_request_kinds_cover_every_request_type():
    """``WriteRequest`` (stamped with ``ts_ms``) and ``GroupRequest`` (about one ``broker_name``)
    name exactly the request types with those fields: a new request cannot be left out."""
    from autoswitch.controller import messages as msgs

    every = [*msgs.WRITE_REQUESTS.values(), *msgs.READ_REQUESTS.values()]
    assert set(msgs.WriteRequest.__args__) == {c for c in every if "ts_ms" in c.__struct_fields__} \
        == set(msgs.WRITE_REQUESTS.values())
    assert set(msgs.GroupRequest.__args__) == {c for c in every if "broker_name" in c.__struct_fields__}


# --------------------------------------------------------------------------- a restored (older) state


def test_an_operators_election_moves_a_group_past_the_epoch_its_brokers_report():
    """Issue 29: after restoring an older snapshot the controllers think 1 is master at MasterEpoch
    2 while the brokers moved on (2 is master at 5). The documented fix, `elect-master`, was
    refused ("master 1 is still alive") or elected at an epoch the brokers never follow. Now an
    operator's election takes the replica that holds the most of the newest epoch, at an epoch
    above every reported one; one naming a replica that may lack data is refused."""
    h = group_with_master()
    assert h.view().master_epoch == 1
    stale = [BrokerLiveInfo(1, epoch=5, max_offset=900), BrokerLiveInfo(2, epoch=5, max_offset=1000),
             BrokerLiveInfo(3, epoch=4, max_offset=1200)]
    r = h.elect(stale, trigger=TRIGGER_ADMIN, broker_id=1, designate=True)
    assert r.code == Code.CONTROLLER_ELECT_MASTER_FAILED and "older than the brokers" in r.remark, r
    r = h.elect(stale, trigger=TRIGGER_ADMIN)
    assert r.ok, r
    v = h.view()
    assert v.master_broker_id == 2 and v.master_epoch == 6 and v.sync_state_set == (2,)
    # a broker's own election is not an operator's: the stale-view path is the operator's only
    h2 = group_with_master()
    r = h2.elect([BrokerLiveInfo(2, epoch=5, max_offset=1000)], trigger=TRIGGER_CONTROLLER)
    assert h2.view().master_epoch != 6 or not r.ok
    # an implausible claim (one broker says 2^40) is refused, not followed
    h3 = group_with_master()
    r = h3.elect([BrokerLiveInfo(2, epoch=1 << 40, max_offset=1)], trigger=TRIGGER_ADMIN)
    assert not r.ok and "implausibly" in r.remark


def test_a_new_group_starts_above_the_epochs_its_brokers_report():
    # RocketMQ brokers that ran under another controller: their epoch files end at 17. A broker
    # refuses a role at a lower epoch (and its ReplicasManager ignores the refusal), so the first
    # master here takes 18 (issue 62). Without the safety level the old rule (epoch 1) stands.
    from autoswitch.controller.messages import FinalizeFeaturesRequest

    for level, want in ((3, 18), (0, 1)):
        h = Harness()
        if level:
            assert h.w(FinalizeFeaturesRequest(level)).ok
        h.register(1, 2)
        r = h.elect([BrokerLiveInfo(1, epoch=17, max_offset=50), BrokerLiveInfo(2, epoch=16, max_offset=90)])
        assert r.ok and r.replica.master_broker_id == 1 and r.replica.master_epoch == want, (level, r)
        # a failover of a group the controllers ran all along: nobody reports above, the usual +1
        r = h.elect([BrokerLiveInfo(2, epoch=want, max_offset=60)], trigger=TRIGGER_CONTROLLER, dead=(1,))
        assert r.code in (Code.SUCCESS, Code.CONTROLLER_MASTER_NOT_AVAILABLE)
        if r.ok:
            assert r.replica.master_epoch == want + 1


def test_an_implausible_reported_epoch_does_not_move_the_group():
    from autoswitch.controller.messages import FinalizeFeaturesRequest

    h = Harness()
    assert h.w(FinalizeFeaturesRequest(3)).ok
    h.register(1)
    r = h.elect([BrokerLiveInfo(1, epoch=2**30, max_offset=5)])
    assert r.ok and r.replica.master_epoch == 1
