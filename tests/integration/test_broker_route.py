"""RoutedProducer against the real name server (RouteTable + servicer) and scripted brokers on
127.0.0.1: follows a NOT_MASTER redirect, retries FLUSH_SLAVE_TIMEOUT with the same msg_ids,
resends only what was not acknowledged, writes only acked messages to the ack log, fails fast on
a non-retryable status and gives up after its deadline without a route."""

from __future__ import annotations

import asyncio
import json

import grpc
import pytest
from autoswitch.broker.client.route import ProduceRefused, RetriesExhausted, RetryPolicy, RoutedProducer
from autoswitch.controller.namesrv import NameServerServicer, RouteTable

from autoswitch.proto import broker_pb2 as pb
from autoswitch.proto import broker_pb2_grpc as pbg
from autoswitch.proto import namesrv_pb2 as ns
from autoswitch.proto import namesrv_pb2_grpc as nsg

pytestmark = pytest.mark.integration


class ScriptedBroker(pbg.BrokerServiceServicer):
    """Answers Produce from a script of statuses (then OK); records every msg_id it was sent."""

    def __init__(self, broker_id: int, script: list[int], redirect: str = "") -> None:
        self.broker_id = broker_id
        self.script = list(script)
        self.redirect = redirect
        self.seen: list[list[str]] = []
        self.offset = 0

    async def Produce(self, request, context):
        ids = [m.msg_id for m in request.messages]
        self.seen.append(ids)
        st = self.script.pop(0) if self.script else pb.OK
        reply = pb.ProduceReply(group="g", broker_id=self.broker_id, status=st)
        if st == pb.NOT_MASTER:
            reply.master_addr = self.redirect
        for i, mid in enumerate(ids):
            # A partial batch: the first message is acknowledged even when the batch is not.
            ok = st == pb.OK or (st == pb.FLUSH_SLAVE_TIMEOUT and i == 0 and len(ids) > 1)
            if ok:
                self.offset += 1
                reply.results.append(pb.ProduceResult(msg_id=mid, status=pb.OK, phy_offset=self.offset,
                                                      queue_offset=self.offset, epoch=2))
            else:
                reply.results.append(pb.ProduceResult(msg_id=mid, status=st, phy_offset=-1, queue_offset=-1))
        return reply


async def _server(servicer, add) -> tuple[grpc.aio.Server, str]:
    server = grpc.aio.server()
    add(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    return server, f"127.0.0.1:{port}"


def test_redirect_retry_same_ids_and_ack_log(tmp_path):
    async def run() -> None:
        table = RouteTable()
        ns_srv, ns_addr = await _server(NameServerServicer(table), nsg.add_NameServerServicer_to_server)
        new = ScriptedBroker(2, [pb.FLUSH_SLAVE_TIMEOUT])
        new_srv, new_addr = await _server(new, pbg.add_BrokerServiceServicer_to_server)
        old = ScriptedBroker(1, [pb.NOT_MASTER] * 10, redirect=new_addr)
        old_srv, old_addr = await _server(old, pbg.add_BrokerServiceServicer_to_server)
        # The name server still names the old master (one registration period behind).
        stub = nsg.NameServerStub(grpc.aio.insecure_channel(ns_addr))
        await stub.RegisterRoute(ns.RegisterRouteRequest(route=ns.BrokerRoute(
            cluster_name="c", broker_name="g", broker_id=1, address=old_addr, role="master", master_epoch=1)))
        ack_log = tmp_path / "acks.jsonl"
        p = RoutedProducer(ns_addr, "g", ack_log=ack_log, policy=RetryPolicy(retry_deadline_s=10))
        try:
            res = await p.produce("t", [b"a", b"b", b"c"], ["m1", "m2", "m3"])
        finally:
            await p.close()
            for s in (ns_srv, new_srv, old_srv):
                await s.stop(None)
        assert [r.msg_id for r in res] == ["m1", "m2", "m3"]
        assert old.seen == [["m1", "m2", "m3"]]
        # FLUSH_SLAVE_TIMEOUT acked m1 only: the retry resends m2, m3 with the same ids.
        assert new.seen == [["m1", "m2", "m3"], ["m2", "m3"]]
        lines = [json.loads(x) for x in ack_log.read_text().splitlines()]
        assert [x["msg_id"] for x in lines] == ["m1", "m2", "m3"]
        assert {x["broker_id"] for x in lines} == {2}
        assert set(lines[0]) == {"msg_id", "group", "broker_id", "topic", "queue_offset", "phy_offset", "epoch",
                                 "ack_ts_ms"}
        assert p.stats.statuses == {"NOT_MASTER": 1, "FLUSH_SLAVE_TIMEOUT": 1}

    asyncio.run(run())


def test_not_retryable_fails_fast_and_no_route_gives_up(tmp_path):
    async def run() -> None:
        table = RouteTable()
        ns_srv, ns_addr = await _server(NameServerServicer(table), nsg.add_NameServerServicer_to_server)
        bad = ScriptedBroker(1, [pb.BAD_REQUEST])
        bad_srv, bad_addr = await _server(bad, pbg.add_BrokerServiceServicer_to_server)
        p = RoutedProducer(ns_addr, "g", policy=RetryPolicy(retry_deadline_s=0.3, backoff_max_s=0.05))
        try:
            with pytest.raises(RetriesExhausted, match="no master route"):
                await p.produce("t", [b"x"])
            stub = nsg.NameServerStub(grpc.aio.insecure_channel(ns_addr))
            await stub.RegisterRoute(ns.RegisterRouteRequest(route=ns.BrokerRoute(
                cluster_name="c", broker_name="g", broker_id=1, address=bad_addr, role="master", master_epoch=1)))
            with pytest.raises(ProduceRefused, match="BAD_REQUEST") as refused:
                await p.produce("t", [b"x"], ["only-once"])
            assert refused.value.code == "BAD_REQUEST"
            assert bad.seen == [["only-once"]]
        finally:
            await p.close()
            for s in (ns_srv, bad_srv):
                await s.stop(None)

    asyncio.run(run())


def test_several_name_servers_highest_epoch_wins_and_a_silent_one_costs_little(tmp_path):
    """A client given three name servers: the master route with the highest MasterEpoch among
    the answers wins (one still names the old master), a stopped name server and one that accepts
    connections but never answers do not fail the lookup or hold it for the RPC timeout."""
    import socket

    from autoswitch.broker.client.route import NAMESRV_RPC_TIMEOUT_S, NameServerClient

    async def run() -> None:
        behind, ahead = RouteTable(), RouteTable()
        s1, a1 = await _server(NameServerServicer(behind), nsg.add_NameServerServicer_to_server)
        s2, a2 = await _server(NameServerServicer(ahead), nsg.add_NameServerServicer_to_server)
        s3, a3 = await _server(NameServerServicer(RouteTable()), nsg.add_NameServerServicer_to_server)
        await s3.stop(None)          # nothing listens there any more
        silent = socket.socket()     # a black hole: connects (backlog) but never speaks HTTP/2
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        a4 = f"127.0.0.1:{silent.getsockname()[1]}"
        for addr, epoch in ((a1, 3), (a2, 4)):
            stub = nsg.NameServerStub(grpc.aio.insecure_channel(addr))
            await stub.RegisterRoute(ns.RegisterRouteRequest(route=ns.BrokerRoute(
                cluster_name="c", broker_name="g", broker_id=epoch, address=f"b{epoch}:1", role="master",
                master_epoch=epoch)))
        client = NameServerClient(f"{a1},{a3},{a4},{a2}")
        try:
            assert await client.lookup_master_route("g") == ("b4:1", 4)
            # the silent one did not hold the lookup: it was cut at the grace after the answers
            # ("no answer in time"), not at the RPC deadline (that would say DEADLINE_EXCEEDED)
            answers, errors = await client._ask_all(lambda stub: stub.LookupMaster(
                ns.LookupMasterRequest(broker_name="g"), timeout=NAMESRV_RPC_TIMEOUT_S))
            assert len(answers) == 2 and f"{a4}: no answer in time" in errors, errors
            assert await client.master_routes() == [("g", "b4:1", 4)]
            assert await client.lookup_master_route("other") is None
        finally:
            await client.close()
            silent.close()
            for s in (s1, s2):
                await s.stop(None)

    asyncio.run(run())


def test_name_server_list_is_checked():
    from autoswitch.broker.client.route import NameServerClient

    from autoswitch.base.addr import AddressError

    for bad in ("", "h:1,h:1", ",".join(f"h:{i}" for i in range(1, 10)), "h:1,nope"):
        with pytest.raises(AddressError):
            NameServerClient(bad)
