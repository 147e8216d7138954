"""Acceptance (issue 4): kill -9 the master under continuous acked produce; the old master
restarts as a slave, truncates its divergent tail and rejoins; a broker restarted on a new port
keeps its brokerId. One cluster (3 controller processes, 1 name server, 3 brokers in controller
mode) is shared by the steps, in order, because each step starts from the state the previous
one left (that is the point: a cluster that keeps failing over)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time

import pytest

from tests.integration.failover_harness import (
    TOPIC,
    FailoverCluster,
    consume_routed,
    log_digest,
    read_ack_log,
    wait_until,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]


def _acked_in_order(acks: list[dict], consumed_ids: list[str]) -> None:
    """Every acked msg_id is readable, and first occurrences keep the ack order (the producer has
    one request in flight, so ack order = send order). Duplicates from retries are allowed."""
    first: dict[str, int] = {}
    for i, mid in enumerate(consumed_ids):
        first.setdefault(mid, i)
    missing = [a["msg_id"] for a in acks if a["msg_id"] not in first]
    assert not missing, f"{len(missing)} acked messages lost, e.g. {missing[:5]}"
    positions = [first[a["msg_id"]] for a in acks]
    assert positions == sorted(positions), "acked messages read out of order"


@pytest.mark.parametrize(("secure", "backend"), [(False, "raft"), (True, "raft"), (False, "sqlite"),
                                                 (False, "postgresql"), (False, "mariadb"), (False, "etcd"),
                                                 (False, "zookeeper")],
                         ids=["plaintext", "tls-auth", "sqlite-backend", "postgresql-backend", "mariadb-backend",
                              "etcd-backend", "zookeeper-backend"])
def test_master_kill_restart_and_new_port(procs, tmp_path, secure, backend, store_url):
    """``secure``: the same with every process on mutual TLS and authorization (issue 12);
    ``backend``: the controllers keep their log in a SQL database instead of Raft (issue 14)."""
    c = FailoverCluster(procs, tmp_path, secure=secure, store_url=store_url)
    c.start_all()
    m1_id, e1 = c.wait_master(timeout=30)
    g = c.wait_sync_state_set({1, 2, 3}, timeout=30)
    sss_before = set(g.replica_info.sync_state_set)
    m1 = c.master_name()

    # ---- (1) kill -9 the master under continuous acked produce
    ack_log = tmp_path / "acks.jsonl"
    prod = c.producer("producer", ack_log, duration_s=6)
    wait_until(lambda: len(read_ack_log(ack_log)) >= 50, 20, "50 acks before the kill")
    c.broker_proc[m1].kill9()
    t_kill = time.time()
    m2_id, e2 = c.wait_master(timeout=20, not_id=m1_id, min_epoch=e1 + 1)
    assert m2_id in sss_before, "the new master must come from the SyncStateSet"
    prod.popen.wait(40)
    summary = prod.log_text()
    assert prod.popen.returncode == 0, summary[-3000:]
    acks = read_ack_log(ack_log)
    # The producer stamps an ack when it reads the answer: one the old master sent just before
    # the kill may be read after it. From the first ack of the new epoch on (one request in
    # flight: the log is in send order), every ack is the new master's.
    first_new = next((i for i, a in enumerate(acks) if a["epoch"] >= e2), None)
    assert first_new is not None, "the producer continued on the new master"
    after = acks[first_new:]
    assert all(a["epoch"] >= e2 for a in after), "an ack of the old epoch after the new master's first"
    assert {a["broker_id"] for a in after} == {m2_id}
    late = [a for a in acks[:first_new] if a["ack_ts_ms"] > t_kill * 1000]
    assert all(a["broker_id"] == m1_id and a["epoch"] == e1 for a in late), late
    # What an application sees through the name server: the new master's committed log.
    consumed = consume_routed(c.namesrv, tls_args=c.tls_args("reader/ops"))
    _acked_in_order(acks, [m["msg_id"] for m in consumed])
    assert all(m["topic"] == TOPIC for m in consumed)

    # ---- (2a) the old master restarts: slave, catches up, rejoins the SyncStateSet
    c.start_broker(m1)
    st = wait_until(lambda: (s := c.status(m1))["role"] == "slave" and s, 20, "old master became slave")
    assert st["broker_id"] == m1_id and st["master_epoch"] >= e2
    c.wait_sync_state_set({m1_id, m2_id}, timeout=30)

    # ---- (2b) a divergent tail: the master appends data its slaves never get, dies; after the
    # failover it restarts and must truncate that tail. The slaves are SIGSTOPped and the master
    # is sent far more than the kernel socket buffers hold, so most of it stays on the master.
    m2 = c.master_name()
    slaves = [n for n in ("b1", "b2", "b3") if n != m2]
    for n in slaves:
        os.kill(c.broker_proc[n].pid, signal.SIGSTOP)
    try:
        import asyncio

        from autoswitch.broker.client.client import ProducerClient

        async def put_unreplicated() -> None:
            p = ProducerClient(c.broker_addr(m2), max_retries=0, timeout_s=1.0, tls=c.tls("producer/app"))
            body = b"d" * (1024 * 1024)

            async def one(i: int) -> None:
                with contextlib.suppress(Exception):  # never acknowledged: the slaves are stopped
                    await p.produce(TOPIC, [body], [f"divergent-{i}"])

            try:
                await asyncio.gather(*(one(i) for i in range(48)))
            finally:
                await p.close()

        asyncio.run(put_unreplicated())
        m2_max_with_tail = c.status(m2)["max_offset"]
        c.broker_proc[m2].kill9()
    finally:
        for n in slaves:
            os.kill(c.broker_proc[n].pid, signal.SIGCONT)
    m3_id, e3 = c.wait_master(timeout=20, not_id=m2_id, min_epoch=e2 + 1)
    m3 = c.master_name()
    assert c.status(m3)["max_offset"] < m2_max_with_tail
    c.start_broker(m2)
    wait_until(lambda: c.status(m2)["role"] == "slave", 20, "second old master became slave")
    c.wait_sync_state_set({m2_id, m3_id}, timeout=30)
    # Caught up: the same bytes as the new master, and the divergent message is gone.
    def same_log() -> bool:
        hi = c.status(m3)["max_offset"]
        return c.status(m2)["max_offset"] == hi and log_digest(c.broker_addr(m2), hi, c.tls()) == log_digest(
            c.broker_addr(m3), hi, c.tls())

    wait_until(same_log, 20, "restarted replica byte-identical to the master")
    log = c.broker_proc[m2].log_text()
    handshakes = [json.loads(line) for line in log.splitlines() if '"ha_slave_handshake_done"' in line]
    assert any(h["truncatedTo"] is not None and h["truncatedTo"] < m2_max_with_tail for h in handshakes), handshakes

    # ---- (3) a broker restarted on a new port keeps its brokerId; the controller shows the new address
    mover = next(n for n in ("b1", "b2", "b3") if n != m3)
    mover_id = c.status(mover)["broker_id"]
    old_addr = c.broker_addr(mover)
    c.broker_proc[mover].stop()
    c.start_broker(mover, new_port=True)
    assert c.broker_addr(mover) != old_addr
    wait_until(lambda: c.status(mover)["role"] == "slave", 20, "moved broker back as slave")
    assert c.status(mover)["broker_id"] == mover_id

    def shows_new_address() -> bool:
        members = {m.broker_id: m.address for m in c.replica_info().members}
        return members.get(mover_id) == c.broker_addr(mover)

    wait_until(shows_new_address, 20, "controller shows the new address")
    members = [m.broker_id for m in c.replica_info().members]
    assert sorted(members) == [1, 2, 3], members  # no second identity for the moved broker
