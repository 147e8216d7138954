"""Issue 30, item 2: one process per brokerId. A broker's data directory (identity file included) is
copied and the copy started beside the original, as a move done once too often. Real processes.

Before the fix both processes registered as the same brokerId, the controller moved the id's
address to the copy, and both could act for it. Now the copy's registration and heartbeats are
refused while the original is alive (it waits, fenced); once the original is gone the copy
registers, but as an incarnation that does not follow the registered one it is out of the
SyncStateSet until it has caught up. Every acknowledged message is read back at the end."""

from __future__ import annotations

import shutil

import pytest

from tests.integration.failover_harness import (
    FailoverCluster,
    consume_all,
    read_ack_log,
    wait_until,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]


def _address_of(c: FailoverCluster, bid: int) -> str:
    g = c.replica_info()
    return next(m.address for m in g.members if m.broker_id == bid)


def test_a_copied_data_directory_started_beside_the_original_is_refused(procs, tmp_path):
    c = FailoverCluster(procs, tmp_path)
    c.start_all()
    master_id, _ = c.wait_master()
    c.wait_sync_state_set({1, 2, 3})
    slave_id = next(b for b in (1, 2, 3) if b != master_id)
    slave = c.name_of_id(slave_id)
    assert slave is not None

    ack_log = tmp_path / "acks.jsonl"
    producer = c.producer("producer", ack_log, duration_s=120, interval_ms=5)
    wait_until(lambda: len(read_ack_log(ack_log)) >= 50, 30, "acks before the copy")

    # a clean stop, the copy, and the original back (the "move" done once too often)
    c.broker_proc[slave].stop()
    shutil.copytree(tmp_path / f"broker-{slave}", tmp_path / "broker-copy")
    c.start_broker(slave)
    wait_until(lambda: c.status(slave)["role"] == "slave", 30, "the original is a slave again")
    c.wait_sync_state_set({1, 2, 3})
    original_addr = _address_of(c, slave_id)

    copy = c.start_broker("copy")
    wait_until(lambda: "broker_incarnation_conflict" in copy.log_text(), 30, "the copy is refused")
    # refused: the id's address stays the original's, the copy serves nothing, the original stays
    assert _address_of(c, slave_id) == original_addr
    st = c.status("copy")
    assert st["role"] == "fenced", st
    g = c.replica_info()
    assert slave_id in g.replica_info.sync_state_set and g.replica_info.master_broker_id == master_id
    wait_until(lambda: len(read_ack_log(ack_log)) >= 150, 30, "produce goes on beside the refused copy")

    # the original dies: the copy takes the id over, but must catch up first
    c.broker_proc[slave].kill9()
    wait_until(lambda: _address_of(c, slave_id) == c.broker_addr("copy"), 60, "the copy registered")
    wait_until(lambda: c.status("copy")["role"] == "slave", 30, "the copy follows the master")
    c.wait_sync_state_set({1, 2, 3}, timeout=60)      # back in the set once caught up

    producer.stop()
    acked = [a["msg_id"] for a in read_ack_log(ack_log)]
    got = {m.msg_id for m in consume_all(c.broker_addr(c.master_name()))}
    missing = [m for m in acked if m not in got]
    assert not missing, f"{len(missing)} acked messages lost, e.g. {missing[:5]}"



def test_a_session_of_another_incarnation_is_refused_and_its_end_is_no_evidence(procs, tmp_path):
    """Issue 30, item 2 (sessions): a crash-fast session's end is evidence that the broker died.
    A second process of the master's id (a copy) that opened a session and went away used to be
    tracked like the master's own, so its end looked like the live master's crash. Now a session
    must come from the live incarnation: another one is refused (2910) and nothing follows."""
    import asyncio

    import grpc

    from autoswitch.proto import controller_pb2 as cpb
    from autoswitch.proto import controller_pb2_grpc as cpbg

    c = FailoverCluster(procs, tmp_path)
    c.start_all()
    master_id, epoch = c.wait_master()
    c.wait_sync_state_set({1, 2, 3})

    async def clone_session(addr: str) -> cpb.BrokerSessionEvent:
        async with grpc.aio.insecure_channel(addr) as ch:
            stream = cpbg.ControllerServiceStub(ch).BrokerSession(cpb.BrokerSessionRequest(
                cluster_name="c1", broker_name="g1", broker_id=master_id, ack_mode="all", incarnation="c0ffee"))
            ev = await asyncio.wait_for(stream.read(), 10)
            stream.cancel()          # the copy goes away
            return ev

    for addr in c.controllers.split(","):
        ev = asyncio.run(clone_session(addr))
        assert ev.header.code == 2910 and not ev.tracked, ev
    # no crash-only election of the healthy master followed the copy's ended sessions: the group
    # keeps acknowledging in the same MasterEpoch
    ack_log = tmp_path / "acks.jsonl"
    c.producer("producer", ack_log, duration_s=60, interval_ms=5)
    wait_until(lambda: len(read_ack_log(ack_log)) >= 40, 30, "acks after the copy's sessions ended")
    assert c.wait_master() == (master_id, epoch)
    for name in ("n1", "n2", "n3"):
        log = c.ctl_proc[name].log_text()
        assert "incarnation_conflict" in log and "master_crashed" not in log, name


def test_the_master_admits_only_the_registered_process_of_a_slave_id(procs, tmp_path):
    """Issue 30, item 2 (the HA handshake): a second process of a slave's brokerId dials the master's
    HA port stating another incarnation (protocol version 3). The master asks the controllers
    which process is registered for that id and closes the connection without a handshake
    (`stale_incarnation`); the registered slave stays connected and in the SyncStateSet."""
    import socket

    from autoswitch.ha.codec import SlaveHandshake, encode

    c = FailoverCluster(procs, tmp_path)
    c.start_all()
    master_id, _ = c.wait_master()
    c.wait_sync_state_set({1, 2, 3})
    slave_id = next(b for b in (1, 2, 3) if b != master_id)
    master = c.master_name()
    with socket.create_connection(("127.0.0.1", c.broker_ha_port[master]), timeout=10) as s:
        s.sendall(encode(SlaveHandshake(slave_id, incarnation="c0ffee")))
        assert s.recv(1 << 16) == b"", "the master answers a stale process with nothing"
    wait_until(lambda: "stale_incarnation" in c.broker_proc[master].log_text(), 30, "the refusal logged")
    c.wait_sync_state_set({1, 2, 3})
