"""The HA port of a controller-mode master trusts nobody by default. Real processes on 127.0.0.1.

- A handshake claiming a brokerId the controller never registered gets nothing, not even the
  master's handshake (which names its epochs).
- A second connection claiming a connected SyncStateSet member is refused; the member's own
  connection stays and is the only one whose acks count.
- Idle sockets that never handshake cannot keep a restarted real slave out, and their
  rejections do not flood the log.
"""

from __future__ import annotations

import os
import signal
import socket

import pytest
from autoswitch.ha.codec import Ack, SlaveHandshake, encode_ack, encode_slave_handshake

from tests.integration.failover_harness import FailoverCluster, wait_until
from tests.procs import HOST

pytestmark = pytest.mark.integration


def _claim(port: int, broker_id: int) -> bytes:
    """Handshake as ``broker_id`` and ack offset 0; returns everything the master sent until it closed."""
    got = b""
    with socket.create_connection((HOST, port), timeout=60) as s:
        s.sendall(encode_slave_handshake(SlaveHandshake(broker_id)) + encode_ack(Ack(0)))
        while True:
            chunk = s.recv(1 << 16)
            if not chunk:
                return got
            got += chunk


def _rejections(c: FailoverCluster, name: str, reason: str) -> int:
    return sum(1 for line in c.broker_proc[name].log_path.read_text().splitlines()
               if '"slave_connection_rejected"' in line and f'"reason":"{reason}"' in line)


def _in_sync_cluster(procs, tmp_path) -> tuple[FailoverCluster, int, str]:
    """A controller-mode group with all three brokers in the SyncStateSet: (cluster, master
    brokerId, master's name)."""
    c = FailoverCluster(procs, tmp_path)
    c.start_all()
    master_id, _epoch = c.wait_master()
    c.wait_sync_state_set({1, 2, 3})
    return c, master_id, c.master_name()


def test_unknown_and_duplicate_replicas_are_refused(procs, tmp_path):
    c, master_id, master = _in_sync_cluster(procs, tmp_path)
    port = c.broker_ha_port[master]

    assert _claim(port, 999) == b"", "an unregistered brokerId gets no bytes"
    wait_until(lambda: _rejections(c, master, "unknown_replica") >= 1, 60, "unknown_replica logged")

    member = next(b for b in (1, 2, 3) if b != master_id)
    assert _claim(port, member) == b"", "a connected member is not displaced"
    wait_until(lambda: _rejections(c, master, "replica_already_connected") >= 1, 60, "duplicate logged")
    assert set(c.replica_info().replica_info.sync_state_set) == {1, 2, 3}, "the real member is still in sync"


def test_idle_sockets_do_not_keep_a_restarted_slave_out(procs, tmp_path):
    c, master_id, master = _in_sync_cluster(procs, tmp_path)
    slave = next(n for n in ("b1", "b2", "b3") if n != master)
    slave_id = c.status(slave)["broker_id"]
    idle = [socket.create_connection((HOST, c.broker_ha_port[master]), timeout=60) for _ in range(40)]
    try:
        os.kill(c.broker_proc[slave].pid, signal.SIGKILL)
        c.broker_proc[slave].popen.wait(60)
        c.wait_sync_state_set({1, 2, 3} - {slave_id} | {master_id})
        c.start_broker(slave)
        # It gets back in sync (readiness), while the 40 idle sockets are still open.
        wait_until(lambda: c.status(slave)["role"] == "slave", 60, "slave restarted")
        c.wait_sync_state_set({1, 2, 3})
    finally:
        for s in idle:
            s.close()
    # 40 evictions/timeouts from one host and reason: a handful of lines, not one each.
    log = c.broker_proc[master].log_path.read_text()
    assert log.count('"slave_connection_rejected"') <= 10, log.count('"slave_connection_rejected"')
