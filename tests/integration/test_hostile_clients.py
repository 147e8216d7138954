"""What one client with a valid certificate can still do to a server (issue 29, round two), tried
against real processes with mutual TLS and authorization on: a broker subprocess (its own CA,
broker/producer/reader certificates)."""

from __future__ import annotations

import asyncio

import grpc
import pytest
from autoswitch.broker.client import ProducerClient
from autoswitch.broker.fetch_client import FetchClient, FetchRefused
from grpc_health.v1 import health_pb2, health_pb2_grpc

from autoswitch.app.certs import init_dev_ca, issue_token, revoke_token
from autoswitch.base.tls import TLSConfig, grpc_channel_credentials
from tests.procs import HOST, free_port, wait_port

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]


def _tls(ident: dict) -> TLSConfig:
    return TLSConfig(ca=ident["ca"], cert=ident["cert"], key=ident["key"]).validate()


@pytest.fixture
def secure_broker(procs, tmp_path):
    ids = init_dev_ca(tmp_path / "tls", ["broker/g1/1", "producer/app", "reader/app"])
    tokens = tmp_path / "tokens.toml"
    reader_token = issue_token(tokens, "ops-reader", ["reader"])
    me = ids["broker/g1/1"]
    port, ha, fetch = free_port(), free_port(), free_port()
    cfg = tmp_path / "broker.toml"
    cfg.write_text("max_concurrent_rpcs = 64\n")
    procs.start("b1", ["broker", "--config", str(cfg), "--role", "master", "--epoch", "1", "--group", "g1",
                       "--listen", f"{HOST}:{port}", "--ha-listen", f"{HOST}:{ha}", "--fetch-listen", f"{HOST}:{fetch}",
                       "--ack-mode", "master", "--data-dir", str(tmp_path / "b1"),
                       "--tls-ca", me["ca"], "--tls-cert", me["cert"], "--tls-key", me["key"], "--auth",
                       "--auth-tokens-file", str(tokens)])
    wait_port(port, timeout=60)
    return {"addr": f"{HOST}:{port}", "fetch": f"{HOST}:{fetch}", "ids": ids, "tmp": tmp_path,
            "tokens": tokens, "reader_token": reader_token}


def test_a_producer_cannot_fill_the_servers_calls_with_health_watch_streams(secure_broker):
    """Item 3: a producer certificate opened Health/Watch streams until gRPC's concurrent-call limit
    was full, and every Produce failed with RESOURCE_EXHAUSTED. Streams are budgeted now: the
    producer gets some, is refused the rest, and produce keeps working while they stay open."""
    addr, ids = secure_broker["addr"], secure_broker["ids"]
    producer = _tls(ids["producer/app"])

    async def scenario() -> None:
        ch = grpc.aio.secure_channel(addr, grpc_channel_credentials(producer))
        stub = health_pb2_grpc.HealthStub(ch)
        opened, refused, calls = 0, 0, []
        try:
            for _ in range(80):                     # more than the broker's 64 concurrent calls
                call = stub.Watch(health_pb2.HealthCheckRequest(service=""))
                calls.append(call)
                try:
                    await asyncio.wait_for(call.read(), 10)
                    opened += 1
                except grpc.aio.AioRpcError as e:
                    assert e.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, e
                    refused += 1
            assert refused > 0 and 0 < opened <= 32, (opened, refused)
            p = ProducerClient(addr, max_retries=0, timeout_s=10, tls=producer)
            try:
                for i in range(5):
                    out = await p.produce("t", [f"m{i}".encode()])
                    assert out.ok, out
            finally:
                await p.close()
        finally:
            for c in calls:
                c.cancel()
            await ch.close()

    asyncio.run(asyncio.wait_for(scenario(), 120))


def test_a_token_revoked_while_its_fetch_connection_is_open_reads_no_more(secure_broker):
    """Item 4: the fetch port checked a token at HELLO only; a connection opened before the
    revocation kept reading. Every FETCH looks the token up again now."""
    addr, fetch, ids = secure_broker["addr"], secure_broker["fetch"], secure_broker["ids"]

    async def scenario() -> None:
        p = ProducerClient(addr, max_retries=0, timeout_s=10, tls=_tls(ids["producer/app"]))
        await p.produce("t", [b"secret"] * 3)
        await p.close()
        async with FetchClient(fetch, tls=_tls(ids["producer/app"]), token=secure_broker["reader_token"]) as f:
            assert len((await f.fetch("t", 0, 10)).runs) == 1
            assert revoke_token(secure_broker["tokens"], "ops-reader")
            with pytest.raises(FetchRefused, match="revoked"):
                await f.fetch("t", 0, 10)

    asyncio.run(asyncio.wait_for(scenario(), 120))
