"""A running plaintext cluster moves to mutual TLS with authorization without downtime: "accept
both, then require TLS" (docs/security.md). Real processes on 127.0.0.1: 3 controllers, a name
server, 3 brokers (ack mode all), a producer that never stops.

Three rolling restarts, one process at a time, each waiting for the cluster to be whole again:

1. every process accepts plaintext and TLS on its ports and still dials plaintext;
2. every process dials TLS (still accepting plaintext); the clients switch to TLS;
3. TLS only, authorization on.

At every moment every process can reach every other one, so the cluster keeps a controller
majority and a serving master; the plaintext producer (steps 1-2) and the TLS producer (2-3)
are acknowledged throughout and lose nothing; afterwards plaintext is refused.
"""

from __future__ import annotations

import asyncio

import pytest
from autoswitch.broker.client.client import BrokerUnavailable, ProducerClient
from autoswitch.controller.client import ControllerClient

from tests.integration.failover_harness import (
    TOPIC,
    FailoverCluster,
    consume_all,
    read_ack_log,
    wait_until,
)
from tests.procs import wait_port

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]
BROKERS = ("b1", "b2", "b3")


def _leader_known_by_all(c: FailoverCluster) -> bool:
    async def go() -> bool:
        async with ControllerClient(c.controllers, deadline_s=3.0, rpc_timeout_s=1.0, tls=c.tls()) as cl:
            from autoswitch.proto import controller_pb2 as pb

            leaders = set()
            for addr in c.ctl_addrs.values():
                md = await cl.call_node(addr, "GetMetaData", pb.GetMetaDataRequest(), timeout_s=1.0)
                leaders.add(md.leader_id)
            return len(leaders) == 1 and "" not in leaders
    return asyncio.run(go())


def _whole(c: FailoverCluster) -> None:
    wait_until(lambda: _leader_known_by_all(c), 60, "one controller leader, known by every node")
    c.wait_master(timeout=60)
    c.wait_sync_state_set({1, 2, 3}, timeout=60)


def _rolling_restart(c: FailoverCluster, mode: str) -> None:
    c.tls_mode = mode
    for nid in c.ctl_ids:
        c.ctl_proc[nid].stop()
        c.start_controller(nid)
        _whole(c)
    ns = [p for p in c.procs.procs if p.name == "namesrv" and p.alive()]
    for p in ns:
        p.stop()
    c.start_namesrv()
    master = c.master_name()
    for name in [b for b in BROKERS if b != master] + [master]:     # slaves first, the master last
        c.broker_proc[name].stop()
        c.start_broker(name)
        wait_port(c.broker_port[name], timeout=60)
        _whole(c)


def test_plaintext_to_tls_with_auth_without_downtime(procs, tmp_path):
    c = FailoverCluster(procs, tmp_path)
    c.start_all()
    _whole(c)
    # Certificates name the brokerIds the brokers registered with.
    c.identity_override = {n: f"broker/g1/{c.status(n)['broker_id']}" for n in BROKERS}
    plain_acks, tls_acks = tmp_path / "acks-plain.jsonl", tmp_path / "acks-tls.jsonl"
    plain = c.producer("producer-plain", plain_acks, duration_s=400, count=200_000, interval_ms=10)
    wait_until(lambda: len(read_ack_log(plain_acks)) >= 20, 60, "plaintext acks before the migration")

    _rolling_restart(c, "accept-dial-plain")
    n1 = len(read_ack_log(plain_acks))
    _rolling_restart(c, "accept")
    assert len(read_ack_log(plain_acks)) > n1, "the plaintext producer kept being acknowledged"
    # The clients move to TLS while the servers still accept both.
    tls_prod = c.producer("producer-tls", tls_acks, duration_s=400, count=200_000, interval_ms=10)
    wait_until(lambda: len(read_ack_log(tls_acks)) >= 20, 60, "TLS acks")
    rc, forced = plain.stop(60)
    assert rc == 0 and not forced, plain.log_text()[-3000:]
    n2 = len(read_ack_log(tls_acks))
    _rolling_restart(c, "on")
    assert len(read_ack_log(tls_acks)) > n2, "the TLS producer kept being acknowledged"
    rc, forced = tls_prod.stop(60)
    assert rc == 0 and not forced, tls_prod.log_text()[-3000:]

    # Nothing acknowledged was lost, by either producer.
    master = c.master_name()
    have = {m.msg_id for m in consume_all(c.broker_addr(master), tls=c.tls("reader/ops"))}
    for path in (plain_acks, tls_acks):
        acks = read_ack_log(path)
        lost = [a["msg_id"] for a in acks if a["msg_id"] not in have]
        assert acks and not lost, f"{path.name}: {len(lost)} of {len(acks)} acked messages lost, e.g. {lost[:5]}"

    # Plaintext is refused now, and so is a caller without the role.
    async def refused() -> None:
        p = ProducerClient(c.broker_addr(master), timeout_s=3, max_retries=0)
        try:
            with pytest.raises(BrokerUnavailable):
                await p.produce(TOPIC, [b"plaintext"])
        finally:
            await p.close()
    asyncio.run(refused())
    logs = "".join(p.log_text() for p in c.procs.procs)
    assert '"accepting_plaintext_and_tls"' in logs      # the fronts did run in the middle steps
