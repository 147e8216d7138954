"""Acceptance (issue 13, graceful handover): a rolling restart of every broker of a group under
continuous acked produce loses nothing and surfaces no error to the producer; the admin
`transfer-master` moves mastership on demand; a handover whose MasterEpoch was raced refuses.
Real processes: 3 controllers, a name server, 3 brokers in controller mode, the produce CLI."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys

import pytest

from autoswitch.proto import broker_pb2 as pb
from tests.integration.failover_harness import (
    FailoverCluster,
    consume_routed,
    read_ack_log,
    wait_until,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]


def _cli(c: FailoverCluster, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "autoswitch", *args, *c.tls_args("admin")], capture_output=True,
                          text=True, timeout=60)


def _routed_master(c: FailoverCluster) -> str | None:
    import asyncio

    from autoswitch.broker.client.route import NameServerClient

    async def run() -> str | None:
        ns = NameServerClient(c.namesrv, c.tls("admin"))
        try:
            return await ns.lookup_master("g1")
        finally:
            await ns.close()

    return asyncio.run(run())


def test_rolling_restart_under_produce_loses_nothing_and_surfaces_no_error(procs, tmp_path):
    c = FailoverCluster(procs, tmp_path)
    c.start_all()
    c.wait_master(timeout=30)
    c.wait_sync_state_set({1, 2, 3}, timeout=30)
    for name in ("b1", "b2", "b3"):
        # The broker's own lines name the id the controller gave it, or none before registration
        # (the config's unused default, 1, once tagged every broker's start).
        own = c.status(name)["broker_id"]
        ids = {json.loads(line).get("brokerId", "-") for line in c.broker_proc[name].log_text().splitlines()
               if line.startswith("{") and '"component":"broker"' in line}
        assert ids <= {own, None}, (name, own, ids)
    ack_log = tmp_path / "acks.jsonl"
    prod = c.producer("producer", ack_log, duration_s=600, count=10**9, interval_ms=2)
    wait_until(lambda: len(read_ack_log(ack_log)) >= 50, 20, "50 acks before the first restart")

    handovers = []
    for name in ("b1", "b2", "b3"):       # every broker once, the master whenever it comes up
        ids_before = c.replica_info().replica_info
        was_master = c.master_name() == name
        acks_before = len(read_ack_log(ack_log))
        code, forced = c.broker_proc[name].stop(wait_s=30)
        assert code == 0 and not forced, c.broker_proc[name].log_text()[-3000:]
        if was_master:
            # The controller moved mastership while the old master was still up (no failover).
            ri = c.replica_info().replica_info
            assert ri.master_epoch == ids_before.master_epoch + 1 and ri.master_broker_id != ids_before.master_broker_id
            text = c.broker_proc[name].log_text()
            assert "handover_done" in text
            # On its way out it names the new master to clients but replicates from nobody.
            leaving = text[text.index('"broker_stopping"'):]
            assert '"replicating":false' in leaving and "ha_slave_handshake_done" not in leaving, leaving[-3000:]
            handovers.append(name)
        c.start_broker(name)
        st = wait_until(lambda n=name: (s := c.status(n))["role"] == "slave" and s, 30, f"{name} back as slave")
        c.wait_sync_state_set({1, 2, 3}, timeout=30)
        wait_until(lambda n=acks_before: len(read_ack_log(ack_log)) >= n + 50, 20, "acks after the restart")
        assert st["fenced_reason"] in (None, "")
    assert handovers, "one of the restarted brokers was the master"

    code, _ = prod.stop(wait_s=30)
    out = prod.log_text()
    # exit 0 = every message it sent was acked (a message given up on ends the run with exit 1)
    assert code == 0 and "failed" in out and 'RETRIES_EXHAUSTED' not in out, out[-3000:]
    acks = read_ack_log(ack_log)
    consumed = {m["msg_id"] for m in consume_routed(c.namesrv)}
    missing = [a["msg_id"] for a in acks if a["msg_id"] not in consumed]
    assert not missing, f"{len(missing)} acked messages lost, e.g. {missing[:5]}"


def test_transfer_master_on_demand_and_refusals(procs, tmp_path):
    c = FailoverCluster(procs, tmp_path)
    c.start_all()
    m_id, epoch = c.wait_master(timeout=30)
    c.wait_sync_state_set({1, 2, 3}, timeout=30)
    to = next(b for b in (1, 2, 3) if b != m_id)

    master = c.master_name()
    r = _cli(c, "admin", "transfer-master", "--broker", c.broker_addr(master), "--to", str(to), "--json")
    assert r.returncode == 0, r.stderr
    env = json.loads(r.stdout)
    assert env["ok"] and env["command"] == "admin transfer-master", env
    out = env["result"]
    assert out["handed_over"] and out["master_id"] == to and out["master_epoch"] == epoch + 1
    assert c.wait_master(timeout=30, min_epoch=epoch + 1) == (to, epoch + 1)

    # The old master is a slave now: asking it again is NOT_MASTER, naming where the master is.
    old = c.name_of_id(m_id)
    assert old is not None
    r = _cli(c, "admin", "transfer-master", "--broker", c.broker_addr(old), "--json")
    assert r.returncode == 1 and json.loads(r.stdout)["error"]["code"] == "NOT_MASTER"
    # Through the name server, once it routes to the new master: the master itself as the target
    # is refused, and the master keeps its role.
    wait_until(lambda: _routed_master(c) == c.broker_addr(c.master_name()), 20, "name server routes the new master")
    r = _cli(c, "admin", "transfer-master", "--namesrv", c.namesrv, "--group", "g1", "--to", str(to), "--json")
    assert r.returncode == 1 and json.loads(r.stdout)["error"]["code"] == "HANDOVER_FAILED", r.stdout
    assert c.wait_master(timeout=30) == (to, epoch + 1)

    master_addr = c.broker_addr(c.master_name())

    async def absurd():
        from autoswitch.broker.client.client import AdminClient

        a = AdminClient(master_addr, timeout_s=30)
        try:
            return [await a.transfer_master(-5, 0), await a.transfer_master(0, 300_001),
                    await a.transfer_master(2**62, 100), await a.transfer_master(0, 100, "x" * 129),
                    await a.transfer_master(0, 100, "gray\nforged log line")]
        finally:
            await a.close()

    neg, long_wait, unknown, long_reason, newline = asyncio.run(absurd())
    assert neg.status == pb.BAD_REQUEST and long_wait.status == pb.BAD_REQUEST
    # the reason is logged and audited: too long or not printable (a forged log line) is refused
    assert long_reason.status == pb.BAD_REQUEST and newline.status == pb.BAD_REQUEST
    assert unknown.status == pb.HANDOVER_FAILED and "not in the SyncStateSet" in unknown.error_message
    assert c.wait_master(timeout=30) == (to, epoch + 1)


def test_handover_with_the_controllers_frozen_never_leaves_two_masters_or_a_stuck_group(procs, tmp_path):
    """The compare-and-set gets no answer (every controller SIGSTOPped): the master does not resume
    writes on a guess; once the controllers run again the group has one master and serves writes
    with nothing lost (the request committed, was cancelled by the master's SyncStateSet confirm,
    or a failover followed)."""
    c = FailoverCluster(procs, tmp_path)
    c.start_all()
    m_id, epoch = c.wait_master(timeout=30)
    c.wait_sync_state_set({1, 2, 3}, timeout=30)
    master = c.master_name()
    to = next(b for b in (1, 2, 3) if b != m_id)
    frozen = [p for p in c.ctl_proc.values() if p.alive()]

    async def transfer_while_frozen():
        from autoswitch.broker.client.client import AdminClient

        # Connected before the freeze, so the call reaches the master within its lease (a CLI
        # process would need its start-up time, which on a busy machine can outlast a 600 ms lease).
        a = AdminClient(c.broker_addr(master), timeout_s=30)
        try:
            assert (await a.get_status()).role == "master"
            for p in frozen:
                os.kill(p.pid, signal.SIGSTOP)
            return await a.transfer_master(to, 2000)
        finally:
            await a.close()

    try:
        r = asyncio.run(transfer_while_frozen())
        assert r.status == pb.HANDOVER_FAILED, r
        assert "no answer from the controller" in r.error_message, r.error_message
        # No acknowledgement while the outcome is open (the lease or the handover fence holds writes).
        assert c.status(master)["fenced_reason"], c.status(master)
    finally:
        for p in frozen:
            os.kill(p.pid, signal.SIGCONT)
    # Any SyncStateSet member may be master now: besides the handover committing or being
    # cancelled, the controllers' liveness view went stale while they were frozen, so a failover
    # after they resume is also correct. What must hold: one master, writes acked, nothing lost.
    new_id, new_epoch = c.wait_master(timeout=30)
    assert new_id in (1, 2, 3) and new_epoch >= epoch
    ack_log = tmp_path / "acks.jsonl"
    prod = c.producer("producer", ack_log, duration_s=2, count=200, interval_ms=5)
    prod.popen.wait(60)
    assert prod.popen.returncode == 0, prod.log_text()[-2000:]
    acks = read_ack_log(ack_log)
    assert acks and {a["epoch"] for a in acks} <= {new_epoch, new_epoch + 1}
    consumed = {m["msg_id"] for m in consume_routed(c.namesrv)}
    assert not [a for a in acks if a["msg_id"] not in consumed]
