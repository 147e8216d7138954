"""A broker group on mutual TLS end to end (real processes, real handshakes on 127.0.0.1): TLS
controllers (the first one embedding the name server), two TLS brokers in controller mode. They
register, one is elected, the other replicates over the TLS HA port; a routed producer with a
client certificate gets acks under ack mode `all` (so the slave really holds the message), while
a plaintext producer cannot even reach the broker."""

from __future__ import annotations

import asyncio

import pytest
from autoswitch.broker.client.client import BrokerUnavailable, ProducerClient
from autoswitch.broker.client.route import RetryPolicy, RoutedProducer
from autoswitch.controller.client import ControllerClient

from autoswitch.app.certs import init_dev_ca
from autoswitch.base.tls import TLSConfig
from tests.integration.controller_harness import Cluster, wait_leader
from tests.procs import HOST, free_port, wait_port
from tests.waiting import until

pytestmark = pytest.mark.integration


def test_a_broker_group_on_mutual_tls(procs, tmp_path):
    d = tmp_path / "tls"
    ids = init_dev_ca(d, ["controller/n1", "controller/n2", "controller/n3", "broker/g1/a", "broker/g1/b",
                          "producer"])
    cl = Cluster(procs, tmp_path, embedded={"n1"}, tls_dir=d)
    cl.start_all()
    namesrv = cl.addrs["n1"]
    ports = {}
    for name in ("a", "b"):
        ports[name] = (free_port(), free_port())
        port, ha = ports[name]
        ident = ids[f"broker/g1/{name}"]
        procs.start(f"broker-{name}", [
            "broker", "--cluster", "c1", "--group", "g1", "--listen", f"{HOST}:{port}", "--ha-listen", f"{HOST}:{ha}",
            "--data-dir", str(tmp_path / f"broker-{name}"), "--controllers", cl.spec, "--namesrv", namesrv,
            "--heartbeat-timeout-ms", "1000", "--master-lease-ms", "600", "--ack-mode", "all",
            "--tls-ca", ident["ca"], "--tls-cert", ident["cert"], "--tls-key", ident["key"]])
    for name in ("a", "b"):
        wait_port(ports[name][0], timeout=60)
    tls = TLSConfig(ca=ids["producer"]["ca"], cert=ids["producer"]["cert"], key=ids["producer"]["key"]).validate()

    async def scenario():
        async with ControllerClient(cl.spec, deadline_s=30, tls=tls) as c:
            await wait_leader(c, 60)

            async def both_in_sync():
                groups = await c.get_sync_state_data(["g1"])
                return groups and groups[0].replica_info.master_broker_id and \
                    len(groups[0].replica_info.sync_state_set) == 2
            await until(both_in_sync, "a master elected and both brokers in its SyncStateSet (HA over TLS)")
        p = RoutedProducer(namesrv, "g1", policy=RetryPolicy(retry_deadline_s=60, rpc_timeout_s=5), tls=tls)
        try:
            results = await p.produce("t", [b"over-tls"] * 5)
            assert len(results) == 5 and all(r.epoch >= 1 for r in results)
            master = p.master
        finally:
            await p.close()
        plain = ProducerClient(master, timeout_s=3, max_retries=0)
        try:
            with pytest.raises(BrokerUnavailable):
                await plain.produce("t", [b"plaintext"])
        finally:
            await plain.close()

    asyncio.run(asyncio.wait_for(scenario(), 240))
