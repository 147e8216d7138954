"""Issue 58: the seams between the defences, each schedule driven through the product's own parts
(tests/integration/seams.py: real stores and files, HAMaster/HASlave over 127.0.0.1, the real
run marker, ReplicasManager core, controller state machine and election policy). Each test fails
on 6b60806 and names the item it covers.
"""

from __future__ import annotations

import asyncio
import logging

import pytest
from autoswitch.broker.replicas import replicas_manager as rmm
from autoswitch.broker.replicas.run_marker import DirectoryFiles, RunMarker
from autoswitch.ha.io.master import HAMaster
from autoswitch.ha.io.slave import HASlave
from autoswitch.ha.seams import LocalSyncStateProposer

from autoswitch.base.log import get_logger
from tests.integration.seams import (
    Controller,
    Core,
    CtlProposer,
    all_bytes,
    ha_config,
    live,
    live_info,
    messages,
    power_cut,
    record_starts,
    replace_record,
    store,
)
from tests.waiting import until

pytestmark = pytest.mark.integration
logging.getLogger("asyncio").setLevel(logging.ERROR)

H = "127.0.0.1"


def test_item1_a_crashed_durable_master_never_resumes_its_epoch(tmp_path):
    """A durable master ships each append before its own group fsync; its slave fsyncs before it
    acks. A power cut of the master then leaves the slave holding, on disk, a tail of the
    master's epoch that the master lost. Resumed at that epoch, the master would write new
    messages at those offsets; the slave's handshake (same epoch, same start) keeps its old bytes
    and its first ack counts for the new messages. Here: the restarted master is refused its old
    epoch by its own core and by the controllers, the group moves to a new MasterEpoch, and every
    replica ends with the same bytes, every acknowledged message in them."""
    log = get_logger("test")
    ctl = Controller()
    ctl.register(1, 2)

    async def first_run() -> tuple[int, int]:
        m, s = store(tmp_path / "b1"), store(tmp_path / "b2")
        marker = RunMarker(DirectoryFiles(tmp_path / "b1"), durable_acks=True, log=log)
        marker.arm("")
        marker.registered("inc1")              # run 1 of broker 1: durable, registered
        r = ctl.elect([live(1, m), live(2, s)], broker_id=1)
        assert r.ok and r.replica.master_broker_id == 1
        epoch = r.replica.master_epoch
        m.append_epoch(epoch, 0)
        master = HAMaster(m, ha_config(), 1, "g1", epoch, frozenset({1}), r.replica.sync_state_set_epoch,
                          LocalSyncStateProposer(), durable_own=True)
        await master.start(H, 0)
        slave = HASlave(s, ha_config(), 2, "g1", (H, master.port), sync_before_ack=True)
        await slave.start()
        try:
            m.append_messages(messages(30, "acked"))
            m.flush()
            master.notify_appended()
            await until(lambda: master.sync_state_set == frozenset({1, 2}), "the slave joined the set")
            assert ctl.alter({1, 2}).ok
            acked_end = m.max_offset
            await master.wait_for_replicas(acked_end, 10)       # acknowledged: on both disks
            # the next appends: shipped and fsynced by the slave, not yet by the master
            m.append_messages(messages(20, "unacked"))
            master.notify_appended()
            await until(lambda: master.replica_acked(2) == m.max_offset, "the slave acked the tail")
            assert not master.tracker.is_acked(m.max_offset, m.max_offset)    # never acknowledged
        finally:
            await slave.stop()
            await master.stop()
        s.close()
        before, after = power_cut(m)                       # the master's host loses power
        assert after == acked_end < before
        return acked_end, epoch

    acked_end, epoch = asyncio.run(first_run())

    # run 2 of broker 1: what its start reads from its data directory, then its core
    marker = RunMarker(DirectoryFiles(tmp_path / "b1"), durable_acks=True, log=log)
    intact, continues, crashed = marker.arm(marker.previous_incarnation())
    assert intact and continues == "inc1" and crashed      # durable: nothing acknowledged was lost
    m, s = store(tmp_path / "b1"), store(tmp_path / "b2")
    assert m.max_offset == acked_end < s.max_offset
    core = Core(ctl, 1, "127.0.0.1:9001")
    core.start(log_intact=intact, log_last_epoch=epoch, previous_incarnation=continues, crashed=crashed)
    for _ in range(5):
        core.tick()
    assert not [c for c in core.roles if isinstance(c, rmm.BecomeMaster) and c.epoch <= epoch], \
        f"the crashed master resumed MasterEpoch {epoch}: {core.roles}"
    assert core.registered[-1].crashed
    v = ctl.view()
    assert v.master_epoch > epoch and v.master_broker_id is None, v       # deposed at registration
    # the election that follows ranks both clean replicas: the slave's longer log wins
    r = ctl.elect([live(1, m), live(2, s)])
    assert r.ok and r.replica.master_broker_id == 2 and r.replica.master_epoch > v.master_epoch - 1
    new_epoch = r.replica.master_epoch
    core.learn(r.replica)
    assert isinstance(core.roles[-1], rmm.BecomeSlave) and core.roles[-1].epoch == new_epoch

    async def second_run() -> None:
        s.append_epoch(new_epoch, s.max_offset)
        master = HAMaster(s, ha_config(), 2, "g1", new_epoch, frozenset({2}), r.replica.sync_state_set_epoch,
                          LocalSyncStateProposer(), durable_own=True)
        await master.start(H, 0)
        slave = HASlave(m, ha_config(), 1, "g1", (H, master.port), sync_before_ack=True,
                        expect_master=(2, new_epoch))
        await slave.start()
        try:
            s.append_messages(messages(10, "after"))
            s.flush()
            master.notify_appended()
            await until(lambda: m.max_offset == s.max_offset, "the old master caught up")
            assert all_bytes(m) == all_bytes(s)
            assert m.epochs == s.epochs
        finally:
            await slave.stop()
            await master.stop()

    asyncio.run(second_run())
    for st in (m, s):
        st.close()


DIGESTS = dict(digest_interval_s=0.05, digest_range_bytes=2048, digest_history=64, min_in_sync_replicas=2)


async def _corrupt_and_wait_quarantine(master: HAMaster, m, victim_store, victim_id: int) -> tuple[int, int]:
    """Replace a record of ``victim_store`` well below the end (a valid CRC: only the digests find
    it); returns the record's range once the master quarantined the victim."""
    starts = record_starts(victim_store)
    bad = replace_record(victim_store, starts[len(starts) // 3])
    await until(lambda: victim_id in master.tracker.quarantined, "the digests found it and the master quarantined it")
    return bad


def test_item3_a_quarantined_replica_never_becomes_eligible(tmp_path):
    """min_in_sync_replicas = 2, SyncStateSet {1, 2}: the slave's digests differ, the master drops
    it from the set and tells it to repair (cut the range, fetch it again). Before the fix the
    controller recorded it as an eligible replica (it left a set below the minimum, so it
    "holds every acknowledged message"); the master died before the slave fetched the range again
    and the slave was elected with a log far below what was acknowledged. Now the master's
    proposal says why it leaves, the controller keeps it out of the eligible replicas and marks it
    as holding no acknowledged copy: it is not elected."""
    ctl = Controller(min_in_sync_replicas=2, enable_eligible_replicas=True)
    ctl.register(1, 2)

    async def main() -> None:
        m, s = store(tmp_path / "b1"), store(tmp_path / "b2")
        r = ctl.elect([live(1, m), live(2, s)], broker_id=1)
        epoch = r.replica.master_epoch
        m.append_epoch(epoch, 0)
        proposer = CtlProposer(ctl)
        cfg = ha_config(**DIGESTS)
        master = HAMaster(m, cfg, 1, "g1", epoch, frozenset({1}), r.replica.sync_state_set_epoch, proposer)
        await master.start(H, 0)
        slave = HASlave(s, cfg, 2, "g1", (H, master.port), expect_master=(1, epoch))
        await slave.start()
        try:
            await until(lambda: ctl.view().sync_state_set == (1, 2), "the slave joined the set")
            for i in range(20):
                m.append_messages(messages(10, f"acked{i}"))
                master.notify_appended()
                await master.wait_for_replicas(m.max_offset, 10)
            acked_end = m.max_offset
            await _corrupt_and_wait_quarantine(master, m, s, 2)
            await until(lambda: ctl.view().sync_state_set == (1,), "the set shrank")
            await until(lambda: s.max_offset < acked_end, "the slave cut its log to repair it")
            v = ctl.view()
            assert 2 not in v.eligible_replicas, v            # before the fix: eligible
            assert 2 in v.diverged, v
            assert proposer.sent[-1].leaving == ((2, "quarantined"),)
        finally:
            await master.stop()      # the master dies before the slave fetched the range again
            await slave.stop()
        # the election that follows: only the repairing slave is alive
        r = ctl.failover([live(2, s, diverged=s.divergence is not None)], dead=(1,))
        assert not r.ok and r.replica.master_broker_id != 2, r      # before the fix: 2 elected
        assert s.max_offset < acked_end         # what electing it would have lost
        m.close()
        s.close()

    asyncio.run(main())


def test_item4_a_divergence_survives_a_master_change_and_a_restart(tmp_path):
    """Three replicas; slave 3's digests find a replaced record; master 1 quarantines it and dies
    before the repair. The divergence is on slave 3's disk (it survives a restart: it keeps
    reporting itself diverged) and in the controllers' state (it survives the master change: 3
    is no candidate). Slave 3 follows the new master 2, whose digest book no longer holds that
    range (before the fix the bad bytes stayed for good): it cuts the range, fetches it again,
    and ends byte-identical to master 2; back in the set, the controllers' mark is gone."""
    ctl = Controller(min_in_sync_replicas=1)
    ctl.register(1, 2, 3)
    cfg = ha_config(**{**DIGESTS, "min_in_sync_replicas": 1})

    async def first() -> int:
        m, s2, s3 = store(tmp_path / "b1"), store(tmp_path / "b2"), store(tmp_path / "b3")
        r = ctl.elect([live(1, m), live(2, s2), live(3, s3)], broker_id=1)
        epoch = r.replica.master_epoch
        m.append_epoch(epoch, 0)
        master = HAMaster(m, cfg, 1, "g1", epoch, frozenset({1}), r.replica.sync_state_set_epoch, CtlProposer(ctl))
        await master.start(H, 0)
        slaves = [HASlave(st, cfg, b, "g1", (H, master.port), expect_master=(1, epoch)) for b, st in ((2, s2), (3, s3))]
        for sl in slaves:
            await sl.start()
        try:
            await until(lambda: ctl.view().sync_state_set == (1, 2, 3), "both slaves joined the set")
            for i in range(20):
                m.append_messages(messages(10, f"a{i}"))
                master.notify_appended()
                await master.wait_for_replicas(m.max_offset, 10)
            # the master keeps the repair back while any set it may hold names the replica: stopping
            # the master right at the quarantine is a master that dies before the repair
            await _corrupt_and_wait_quarantine(master, m, s3, 3)
            await until(lambda: s3.divergence is not None, "the divergence recorded on the slave's disk")
        finally:
            await master.stop()      # the master dies first: its last word to the controllers stands
            for sl in slaves:
                await sl.stop()
        d = s3.divergence
        for st in (m, s2, s3):
            st.close()
        return d.start

    bad_start = asyncio.run(first())
    s3 = store(tmp_path / "b3")                 # slave 3 restarts: it still knows
    assert s3.divergence is not None and s3.divergence.start == bad_start
    # the master may have sent the repair between the quarantine and its stop (the set shrank in
    # the meantime): then the slave cut the range before it stopped and the record says so. Either
    # way the range is not yet fetched again, and the record stays until it is.
    if s3.divergence.cut:
        assert s3.max_offset == bad_start, (s3.max_offset, bad_start)
    v = ctl.view()
    if 3 in v.sync_state_set:        # the master died before its proposal: the report says it
        assert live(3, s3, diverged=s3.divergence is not None).diverged
    m, s2 = store(tmp_path / "b1"), store(tmp_path / "b2")
    r = ctl.failover([live(2, s2), live(3, s3, diverged=True)], dead=(1,))
    assert r.ok and r.replica.master_broker_id == 2, r
    epoch2 = r.replica.master_epoch
    assert 3 not in r.replica.sync_state_set

    async def second() -> None:
        s2.append_epoch(epoch2, s2.max_offset)
        short = ha_config(**{**DIGESTS, "min_in_sync_replicas": 1, "digest_history": 2})
        master = HAMaster(s2, short, 2, "g1", epoch2, frozenset({2}), r.replica.sync_state_set_epoch, CtlProposer(ctl))
        await master.start(H, 0)
        for i in range(30):         # the bad range falls out of master 2's digest book
            s2.append_messages(messages(10, f"b{i}"))
        s2.flush()
        slave = HASlave(s3, short, 3, "g1", (H, master.port), expect_master=(2, epoch2))
        await slave.start()
        try:
            master.notify_appended()
            await until(lambda: s3.max_offset == s2.max_offset and s3.divergence is None,
                        "slave 3 cut the range, fetched it again and cleared the record")
            assert all_bytes(s3) == all_bytes(s2)
            await until(lambda: 3 in ctl.view().sync_state_set, "back in the set")
            assert 3 not in ctl.view().diverged
        finally:
            await slave.stop()
            await master.stop()

    asyncio.run(second())
    for st in (m, s2, s3):
        st.close()


def test_item5_an_unclean_recovery_never_deposes_a_master_elected_after_its_plan(tmp_path):
    """The operator reads the plan (no master, MasterEpoch E), and while it is computed or read a
    clean replica comes back and is elected at E + 1. Before the fix the confirmed election, whose
    token only the CLI compared with its own re-plan, deposed that live master: its acknowledged
    writes were not on the designated replica, and it kept acknowledging until it learned. Now the
    controllers check the plan's state when the election commits. And no unclean designation
    deposes a live master, with or without a plan."""
    from autoswitch.controller.messages import (
        TRIGGER_ADMIN,
        BrokerLiveInfo,
        ElectMasterRequest,
        UpdateControllerConfigRequest,
    )

    from autoswitch.app.unclean_plan import token_of

    ctl = Controller(min_in_sync_replicas=1)
    ctl.register(1, 2, 3)
    alive = [BrokerLiveInfo(b, 1, 1000, 900) for b in (1, 2, 3)]
    assert ctl.elect(alive, broker_id=1).ok
    assert ctl.alter({1, 3}).ok
    # master 1 and in-sync slave 3 die: no master
    r = ctl.failover([BrokerLiveInfo(2, 1, 800, 800)], dead=(1,))
    v = ctl.view()
    assert v.master_broker_id is None
    token = token_of("g1", v.master_epoch, 900, {}, v.sync_state_set_epoch)       # the plan, as read
    # slave 3 comes back clean and is elected while the operator reads the plan
    r = ctl.elect([BrokerLiveInfo(2, 1, 800, 800), BrokerLiveInfo(3, 1, 1000, 900)])
    assert r.ok and r.replica.master_broker_id == 3
    live_now = (BrokerLiveInfo(2, 1, 800, 800), BrokerLiveInfo(3, 2, 1000, 900))
    r = ctl.write(ElectMasterRequest("c1", "g1", TRIGGER_ADMIN, 2, True, live_now, ts_ms=ctl.ts,
                                     unclean_recovery=token))
    assert not r.ok and r.replica.master_broker_id == 3, r           # before the fix: 2, unclean
    assert "plan again" in r.remark
    # without a plan (unclean elections on): an unclean designation never deposes a live master
    assert ctl.write(UpdateControllerConfigRequest({"enable_elect_unclean_master": "true"})).ok
    r = ctl.write(ElectMasterRequest("c1", "g1", TRIGGER_ADMIN, 2, True, live_now, ts_ms=ctl.ts))
    assert not r.ok and r.replica.master_broker_id == 3, r
    assert "never deposes a live master" in r.remark


def test_item6_the_feature_level_check_is_part_of_the_committed_entry():
    """Before the fix, finalize-features asked the members and then proposed: a member rolled back
    in between applied a level it does not run and silenced itself (two of them stop the cluster).
    Now each member's level is in the replicated state and the FinalizeFeatures entry names the
    voters: the state machine refuses, when the entry commits, a level a voter's record lacks."""
    from autoswitch.controller.messages import FinalizeFeaturesRequest, RecordMemberLevelRequest

    from autoswitch.base.features import OPERATOR_LEVEL, SAFETY_LEVEL

    ctl = Controller(level=OPERATOR_LEVEL)
    ctl.register(1)
    assert ctl.elect([live_info(1)], broker_id=1).ok        # an upgraded cluster: not pristine
    for n in ("n1", "n2", "n3"):
        assert ctl.write(RecordMemberLevelRequest(node_id=n, level=SAFETY_LEVEL)).ok
    # the leader asked at this point: everyone runs level 3; then n3 is rolled back, and says so
    assert ctl.write(RecordMemberLevelRequest(node_id="n3", level=OPERATOR_LEVEL)).ok
    r = ctl.write(FinalizeFeaturesRequest(level=SAFETY_LEVEL, voters=("n1", "n2", "n3")))
    assert not r.ok and "n3 (supports 2)" in r.remark, r
    assert ctl.sm.state.feature_level == OPERATOR_LEVEL
    # a voter with no record at all is refused too
    r = ctl.write(FinalizeFeaturesRequest(level=SAFETY_LEVEL, voters=("n1", "n2", "n4")))
    assert not r.ok and "n4 (no level recorded)" in r.remark, r
    assert ctl.write(RecordMemberLevelRequest(node_id="n3", level=SAFETY_LEVEL)).ok
    assert ctl.write(FinalizeFeaturesRequest(level=SAFETY_LEVEL, voters=("n1", "n2", "n3"))).ok
    assert ctl.sm.state.feature_level == SAFETY_LEVEL


def test_a_new_cluster_starts_at_the_newest_level_and_an_upgraded_one_stays():
    """Issue 64, item 3 (with issue 58, item 6's records): a bootstrap level applies only to a
    pristine state; a cluster that elected masters at a lower level keeps it."""
    from autoswitch.controller.messages import FinalizeFeaturesRequest

    from autoswitch.base.features import BASELINE_LEVEL, SUPPORTED_LEVEL

    new = Controller(level=BASELINE_LEVEL)
    new.register(1, 2)                          # registrations only: still a new cluster
    assert new.write(FinalizeFeaturesRequest(level=SUPPORTED_LEVEL, bootstrap=True)).ok
    assert new.sm.state.feature_level == SUPPORTED_LEVEL
    old = Controller(level=BASELINE_LEVEL)
    old.register(1)
    assert old.elect([live_info(1)], broker_id=1).ok
    r = old.write(FinalizeFeaturesRequest(level=SUPPORTED_LEVEL, bootstrap=True))
    assert "not a new cluster" in r.remark and old.sm.state.feature_level == BASELINE_LEVEL
