"""Issue 30, item 1: a slave whose host lost its unsynced writes must not be electable until it has
fetched what it lost. Real processes: a 2-replica group (ack_mode all), the slave killed -9 and its
commit log cut back to what its checkpoint says was fsynced (what a power loss may leave), then
restarted while its master is frozen (SIGSTOP: the slave cannot fetch the tail back).

Before the fix the slave registered as cleanly stopped, saw itself in the SyncStateSet as soon as
it became slave and reported an intact log; when the frozen master was declared dead the
controller elected it, and the master, resumed, followed it and truncated the acked tail away."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
from autoswitch.broker.storage import checkpoint as ckpt
from autoswitch.broker.storage.segment import parse_segment_name

from tests.integration.failover_harness import (
    FailoverCluster,
    consume_all,
    read_ack_log,
    wait_until,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

HEARTBEAT_TIMEOUT_MS = 5000     # long enough for the slave to restart before the frozen master is declared dead


def _lose_unsynced_tail(data_dir: Path) -> tuple[int, int]:
    """Cut the commit log back to the checkpoint's log_synced (every byte past it was only in the
    page cache). Returns (bytes before, bytes after)."""
    cp = ckpt.load(data_dir / "checkpoint")
    assert cp is not None
    segs = sorted((parse_segment_name(p.name), p) for p in (data_dir / "commitlog").iterdir()
                  if parse_segment_name(p.name) is not None)
    before = max(base + p.stat().st_size for base, p in segs)
    for base, p in segs:
        if base >= cp.log_synced:
            os.truncate(p, 0)
        elif base + p.stat().st_size > cp.log_synced:
            os.truncate(p, cp.log_synced - base)
    return before, cp.log_synced


def _member(cluster: FailoverCluster, bid: int):
    g = cluster.replica_info()
    return g, next((m for m in g.members if m.broker_id == bid), None)


def test_unclean_slave_is_not_electable_before_it_fetched_what_it_lost(procs, tmp_path):
    c = FailoverCluster(procs, tmp_path, n_brokers=2, heartbeat_timeout_ms=HEARTBEAT_TIMEOUT_MS)
    # no periodic fsync: everything the slave receives after its start stays unsynced
    for name in ("b1", "b2"):
        c.broker_extra_args[name] = ["--flush", "async", "--flush-interval-ms", "60000"]
    c.start_all(("b1", "b2"))
    master_id, epoch = c.wait_master()
    c.wait_sync_state_set({1, 2})
    master = c.name_of_id(master_id)
    slave = "b2" if master == "b1" else "b1"
    slave_id = 3 - master_id

    ack_log = tmp_path / "acks.jsonl"
    p = c.producer("producer", ack_log, duration_s=60, count=300, interval_ms=1)
    wait_until(lambda: not p.alive(), 90, "the producer sent its 300 messages")
    acked = [a["msg_id"] for a in read_ack_log(ack_log)]
    assert len(acked) >= 250, len(acked)

    # freeze the master, then the slave's host loses power: unsynced bytes are gone
    os.kill(c.broker_proc[master].pid, signal.SIGSTOP)
    try:
        c.broker_proc[slave].kill9()
        before, after = _lose_unsynced_tail(tmp_path / f"broker-{slave}")
        assert after < before, (before, after)
        c.start_broker(slave)

        # registered and heard, stating an unclean restart (it stays in the SyncStateSet as a last
        # known holder, but its heartbeats keep it from a normal election)
        def registered_unclean() -> bool:
            _g, m = _member(c, slave_id)
            return m is not None and m.alive and c.status(slave)["replicas"]["logIntact"] is False
        wait_until(registered_unclean, 30, "the restarted slave heard, reporting an unclean restart")

        # the frozen master is declared dead: nobody holding all acked messages is alive, so no master
        wait_until(lambda: not _member(c, master_id)[1].alive, 30, "the frozen master declared dead")
        g, _ = _member(c, slave_id)
        assert g.replica_info.master_broker_id in (0, master_id), g.replica_info
    finally:
        os.kill(c.broker_proc[master].pid, signal.SIGCONT)

    # the master comes back, is master again, the slave catches up and is whole again
    new_id, _ = c.wait_master(timeout=60)
    assert new_id == master_id
    c.wait_sync_state_set({1, 2}, timeout=60)
    wait_until(lambda: c.status(slave)["replicas"]["logIntact"], 30, "the slave reports its log intact")
    got = {m.msg_id for m in consume_all(c.broker_addr(master))}
    missing = [m for m in acked if m not in got]
    assert not missing, f"{len(missing)} acked messages lost, e.g. {missing[:5]}"
