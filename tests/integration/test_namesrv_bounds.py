"""The name server does not trust registrants: bounded names, TTLs and routes per peer, and (embedded
in a controller) no route outranks the controller's master and MasterEpoch. Real processes."""

from __future__ import annotations

import asyncio

import grpc
import pytest
from autoswitch.controller.client import ControllerClient

from autoswitch.proto import namesrv_pb2 as npb
from autoswitch.proto import namesrv_pb2_grpc as npbg
from tests.integration.controller_harness import Cluster, Heartbeater, register_brokers, wait_leader
from tests.procs import HOST, free_port, wait_port
from tests.waiting import until

pytestmark = pytest.mark.integration

BAD_REQUEST, LIMIT_REACHED = 1, 3


def route(bid: int, role: str, epoch: int, group: str = "g1") -> npb.BrokerRoute:
    return npb.BrokerRoute(cluster_name="c1", broker_name=group, broker_id=bid, address=f"{HOST}:{31000 + bid}",
                           role=role, master_epoch=epoch)


def test_standalone_namesrv_bounds_names_ttls_and_routes_per_peer(procs, tmp_path):
    port = free_port()
    p = procs.start("namesrv", ["namesrv", "--listen", f"{HOST}:{port}", "--route-ttl-s", "5"])
    wait_port(port, proc=p.popen)

    async def run():
        async with grpc.aio.insecure_channel(f"{HOST}:{port}") as ch:
            ns = npbg.NameServerStub(ch)
            reg = ns.RegisterRoute
            r = await reg(npb.RegisterRouteRequest(route=route(1, "slave", 0, group="x" * 1024)))
            assert r.header.code == BAD_REQUEST, "a 1 KB name is refused"
            r = await reg(npb.RegisterRouteRequest(route=route(1, "slave", 0, group="g/../etc")))
            assert r.header.code == BAD_REQUEST, "names are letters, digits and _ . % -"
            r = await reg(npb.RegisterRouteRequest(route=route(1, "slave", 0), ttl_ms=3_600_000))
            assert r.header.code == BAD_REQUEST and "ttl" in r.header.message, "a 1-hour TTL is refused"
            # One peer (this test, 127.0.0.1) holds at most 1024 routes; the next is refused, a
            # refresh of one it holds is not.
            for i in range(1024):
                r = await reg(npb.RegisterRouteRequest(route=route(i + 1, "slave", 0, group=f"fill{i % 8}"),
                                                       ttl_ms=60_000))
                assert r.header.code == 0, (i, r.header.message)
            r = await reg(npb.RegisterRouteRequest(route=route(5000, "slave", 0, group="real")))
            assert r.header.code == LIMIT_REACHED
            r = await reg(npb.RegisterRouteRequest(route=route(1, "slave", 0, group="fill0"), ttl_ms=60_000))
            assert r.header.code == 0
    asyncio.run(run())
    # 1,000+ refusals would have been 1,000+ lines: one per peer and reason per 10 s.
    log = p.log_path.read_text()
    assert log.count('"route_rejected"') <= 6, log.count('"route_rejected"')


def test_embedded_namesrv_route_cannot_outrank_the_controller(procs, tmp_path):
    cl = Cluster(procs, tmp_path, embedded={"n1"})
    cl.start_all()

    async def scenario():
        async with ControllerClient(cl.spec, deadline_s=30) as c, grpc.aio.insecure_channel(cl.addrs["n1"]) as ch:
            ns = npbg.NameServerStub(ch)
            await wait_leader(c)
            beats = Heartbeater(c)
            beats.start()
            try:
                await register_brokers(c, beats, list(cl.addrs.values()), check="k")
                async def elected():
                    from autoswitch.controller.codes import ControllerRpcError
                    try:           # refused until the controller has heard the brokers' heartbeats
                        return await c.elect_master("c1", "g1", 1, designate=True)
                    except ControllerRpcError:
                        return None
                epoch = (await until(elected, "master 1 elected")).master_epoch

                # The real master's route is accepted once n1 has applied the election.
                async def accepted():
                    r = await ns.RegisterRoute(npb.RegisterRouteRequest(route=route(1, "master", epoch)))
                    return r.accepted_as_master
                await until(accepted, "the elected master's route")

                # A forged route: another broker claims the group at MasterEpoch 2^62, 1-hour TTL
                # refused, so within the allowed TTL. Stored, never returned as the master.
                r = await ns.RegisterRoute(npb.RegisterRouteRequest(route=route(2, "master", 2**62), ttl_ms=60_000))
                assert r.header.code == 0 and not r.accepted_as_master
                m = await ns.LookupMaster(npb.LookupMasterRequest(broker_name="g1"))
                assert m.master.broker_id == 1 and m.master.master_epoch == epoch
                # Nor does the right broker with a made-up epoch.
                r = await ns.RegisterRoute(npb.RegisterRouteRequest(route=route(1, "master", epoch + 1)))
                assert not r.accepted_as_master
            finally:
                await beats.stop()
    asyncio.run(scenario())
