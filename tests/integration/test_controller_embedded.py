"""A controller embedded in the name server works like a standalone one (mixed cluster: 1 embedded
+ 2 standalone); name server routes; the majority liveness rule against an asymmetric partition."""

from __future__ import annotations

import asyncio
import time

import grpc
import pytest
from autoswitch.controller.client import ControllerClient

from autoswitch.proto import controller_pb2 as pb
from autoswitch.proto import namesrv_pb2 as npb
from autoswitch.proto import namesrv_pb2_grpc as npbg
from tests.integration.controller_harness import (
    Cluster,
    Heartbeater,
    hb,
    register_brokers,
    wait_heard,
    wait_leader,
)
from tests.procs import HOST, free_port, wait_port

pytestmark = pytest.mark.integration


def route(bid: int, role: str, epoch: int) -> npb.BrokerRoute:
    return npb.BrokerRoute(cluster_name="c1", broker_name="g1", broker_id=bid, address=f"{HOST}:{31000 + bid}",
                           role=role, master_epoch=epoch)


def test_embedded_controller_in_mixed_cluster_and_asymmetric_liveness(procs, tmp_path):
    cl = Cluster(procs, tmp_path, embedded={"n1"})
    cl.start_all()

    async def scenario():
        # --- the name server on the embedded node's port
        ch = grpc.aio.insecure_channel(cl.addrs["n1"])
        ns = npbg.NameServerStub(ch)
        r = await ns.RegisterRoute(npb.RegisterRouteRequest(route=route(1, "master", 1)))
        assert r.header.code == 0 and r.accepted_as_master
        r = await ns.RegisterRoute(npb.RegisterRouteRequest(route=route(2, "master", 2)))
        assert r.accepted_as_master and r.group_master_epoch == 2
        r = await ns.RegisterRoute(npb.RegisterRouteRequest(route=route(1, "master", 1)))   # stale master
        assert r.header.code == 0 and not r.accepted_as_master and r.group_master_epoch == 2
        m = await ns.LookupMaster(npb.LookupMasterRequest(broker_name="g1"))
        assert m.master.broker_id == 2 and m.master.master_epoch == 2
        r = await ns.RegisterRoute(npb.RegisterRouteRequest(route=npb.BrokerRoute(broker_name="g1", broker_id=0)))
        assert r.header.code == 1   # BAD_REQUEST, typed, the server keeps serving
        await ch.close()

        async with ControllerClient(cl.spec, deadline_s=15) as c:
            leader = await wait_leader(c)
            others = [a for a in cl.addrs.values() if a != leader]
            beats = Heartbeater(c)
            beats.start()
            try:
                await register_brokers(c, beats, list(cl.addrs.values()), check="k")
                await wait_heard(c, "g1", {1, 2})
                info = await c.elect_master("c1", "g1", 1, designate=True)
                sss, sss_epoch = await c.alter_sync_state_set("g1", 1, info.master_epoch, [1, 2],
                                                              info.sync_state_set_epoch)
                assert sss == [1, 2]
                epoch = info.master_epoch

                # --- asymmetric partition: the leader stops hearing the master, the two others still do.
                # The leader's own opinion is "dead", the majority's is "alive": no failover (RocketMQ #4800).
                beats.targets[("g1", 1)] = others
                await asyncio.sleep(3.0 + 2.0)   # heartbeat timeout (3 s) + several scans (0.5 s)
                now = await c.get_replica_info("g1")
                assert now.master_broker_id == 1 and now.master_epoch == epoch
                meta = await c.call_node(leader, "GetSyncStateData", pb.GetSyncStateDataRequest(broker_names=["g1"]))
                me = {m.broker_id: m for m in meta.groups[0].members}
                assert not me[1].alive, "the leader itself must not hear the master in this test"

                # --- the master really dies (nobody hears it): a majority agrees, broker 2 takes over
                stream = c.watch_replica_info("g1", addr=others[0])
                await asyncio.wait_for(stream.read(), 30)
                del beats.targets[("g1", 1)]
                deadline = time.monotonic() + 15
                new = None
                while time.monotonic() < deadline:
                    ev = await asyncio.wait_for(stream.read(), 15)
                    if ev.replica_info.master_broker_id == 2:
                        new = ev.replica_info
                        break
                assert new is not None, "no failover notification"
                assert new.master_epoch == epoch + 1
                stream.cancel()
                info = await c.get_replica_info("g1")
                assert info.master_broker_id == 2 and info.master_epoch == epoch + 1

                # --- lease grants: the deposed master (old epoch) gets none from any node; the new one
                # gets them once the nodes have been up longer than the hold (3 x heartbeat timeout)
                for a in cl.addrs.values():
                    r = await c.call_node(a, "BrokerHeartbeat", hb("g1", 1, epoch=epoch))
                    assert r.header.code == 0 and not r.lease_granted

                async def all_grant():
                    rs = [await c.call_node(a, "BrokerHeartbeat", hb("g1", 2, epoch=epoch + 1))
                          for a in cl.addrs.values()]
                    return all(r.lease_granted and r.master_epoch == epoch + 1 and r.master_broker_id == 2
                               for r in rs)

                deadline = time.monotonic() + 12
                while not await all_grant():
                    assert time.monotonic() < deadline, "new master never granted a lease"
                    await asyncio.sleep(0.3)
            finally:
                await beats.stop()

    asyncio.run(scenario())
    # SIGTERM stops the embedded process cleanly
    cl.stop("n1")
    assert cl.proc["n1"].popen.returncode == 0


def test_standalone_namesrv_routes_expire(procs):
    port = free_port()
    p = procs.start("namesrv", ["namesrv", "--listen", f"{HOST}:{port}", "--route-ttl-s", "1"])
    wait_port(port, proc=p.popen)

    async def scenario():
        async with grpc.aio.insecure_channel(f"{HOST}:{port}") as ch:
            ns = npbg.NameServerStub(ch)
            await ns.RegisterRoute(npb.RegisterRouteRequest(route=route(1, "master", 3)))
            await ns.RegisterRoute(npb.RegisterRouteRequest(route=route(2, "slave", 3), ttl_ms=10_000))
            r = await ns.GetRoutes(npb.GetRoutesRequest(broker_name="g1"))
            assert [x.broker_id for x in r.routes] == [1, 2]
            await asyncio.sleep(1.5)
            m = await ns.LookupMaster(npb.LookupMasterRequest(broker_name="g1"))
            assert m.header.code == 2   # NOT_FOUND: the master route was not re-registered
            r = await ns.GetRoutes(npb.GetRoutesRequest(broker_name="g1"))
            assert [x.broker_id for x in r.routes] == [2]

    asyncio.run(scenario())
    p.stop()
    assert p.popen.returncode == 0
