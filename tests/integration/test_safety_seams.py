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
from autoswitch.broker.replicas.run_marker import RunMarker
from autoswitch.ha.master import HAMaster
from autoswitch.ha.seams import LocalSyncStateProposer
from autoswitch.ha.slave import HASlave

from autoswitch.base.log import get_logger
from tests.integration.seams import (
    Controller,
    Core,
    all_bytes,
    ha_config,
    live,
    messages,
    power_cut,
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
        marker = RunMarker(tmp_path / "b1", durable_acks=True, log=log)
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
    marker = RunMarker(tmp_path / "b1", durable_acks=True, log=log)
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
