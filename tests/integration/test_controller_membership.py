"""Replacing a controller on a running cluster (issue 13, controller membership), real processes:
start 3, add a 4th (a learner until caught up, then a voter), remove one of the originals, kill
the leader, and the cluster keeps electing masters; the admin CLI shows voters and learners."""

from __future__ import annotations

import asyncio
import json

import pytest
from autoswitch.controller.client import ControllerClient
from autoswitch.controller.codes import Code, ControllerRpcError

from autoswitch.proto import controller_pb2 as pb
from tests.integration.controller_harness import (
    Cluster,
    Heartbeater,
    admin,
    hb,
    register_brokers,
    wait_heard,
    wait_leader,
)
from tests.integration.failover_harness import wait_until
from tests.procs import free_port
from tests.waiting import until

pytestmark = pytest.mark.integration


def test_replace_a_controller_and_keep_electing_masters(procs, tmp_path):
    cl = Cluster(procs, tmp_path)
    cl.start_all()
    md = admin("get-controller-metadata", "--controller", cl.spec)
    assert md["ok"] and md["result"]["voters"] == ["n1", "n2", "n3"] and md["result"]["learners"] == []
    cluster_id = md["result"]["cluster_id"]
    assert len(cluster_id) == 16

    cl.add_member("n4")
    cl.start("n4", join=True, cluster_id=cluster_id)
    added = admin("add-controller", "--controller", cl.spec, "--id", "n4", "--address", cl.addrs["n4"],
                  "--raft-address", cl.raft_addrs["n4"], "--timeout-s", "60", timeout=90)
    assert added["ok"], added
    assert added["result"]["voters"] == ["n1", "n2", "n3", "n4"] and added["result"]["learners"] == []
    # the member table agrees with the lists (it said "learner" beside voters [..., n4])
    assert {m["node_id"]: m["role"] for m in added["result"]["members"]} == dict.fromkeys(
        ["n1", "n2", "n3", "n4"], "voter")
    assert added["result"]["join_with"] == f"--join --cluster-id {cluster_id}"
    # a second add of the same id is refused, and so is a malformed address
    again = admin("add-controller", "--controller", cl.spec, "--id", "n4", "--address", cl.addrs["n4"])
    assert not again["ok"] and "already a member" in again["error"]["message"]

    async def malformed():
        async with ControllerClient(cl.spec, deadline_s=30) as c:
            for req in (pb.ChangeMembershipRequest(action="zap", node_id="n5"),
                        pb.ChangeMembershipRequest(action="add", node_id="n5", address="no-port"),
                        pb.ChangeMembershipRequest(action="add", node_id="", address="127.0.0.1:1"),
                        pb.ChangeMembershipRequest(action="add", node_id="n5" * 200, address="127.0.0.1:1")):
                with pytest.raises(ControllerRpcError) as e:
                    await c.call("ChangeMembership", req)
                assert e.value.reply_code == Code.CONTROLLER_MALFORMED_REQUEST, (req, e.value)
    asyncio.run(malformed())

    async def scenario():
        async with ControllerClient(cl.spec, deadline_s=30) as c:
            leader_addr = await wait_leader(c)
            leader = next(n for n, a in cl.addrs.items() if a == leader_addr)
            beats = Heartbeater(c)
            beats.start()
            try:
                await register_brokers(c, beats, list(cl.addrs.values()), port_base=31000)
                await wait_heard(c, "g1", {1, 2})
                info = await c.elect_master("c1", "g1", 1, designate=True)
                assert info.master_broker_id == 1
                sss, _ = await c.alter_sync_state_set("g1", 1, info.master_epoch, [1, 2], info.sync_state_set_epoch)
                assert sss == [1, 2]
                # the new member serves reads like any other (it applied the whole log)
                r = await c.call_node(cl.addrs["n4"], "GetMetaData", pb.GetMetaDataRequest())
                assert r.cluster_id == cluster_id and {p.node_id: p.role for p in r.peers}["n4"] == "voter"
                # lease grants name the configuration (docs/controller.md "Controller membership"):
                # a heartbeat counting the bootstrap list gets none, and learns the new one
                stale = await c.call_node(leader_addr, "BrokerHeartbeat", hb("g9", 1))
                assert not stale.lease_granted and stale.controllers_index > 0
                assert sorted(stale.controllers) == sorted(cl.addrs[n] for n in ("n1", "n2", "n3", "n4"))
                named = hb("g9", 1)
                named.controllers_index, named.lease_quorum = stale.controllers_index, 3
                assert (await c.call_node(leader_addr, "BrokerHeartbeat", named)).lease_granted
                named.lease_quorum = 1        # 1 + majority(4) is no more than 4: misses a majority
                assert not (await c.call_node(leader_addr, "BrokerHeartbeat", named)).lease_granted
            finally:
                await beats.stop()
        return leader

    leader = asyncio.run(asyncio.wait_for(scenario(), 120))
    # remove an original that is not the leader, then stop it
    gone = next(n for n in ("n1", "n2", "n3") if n != leader)
    removed = admin("remove-controller", "--controller", cl.spec, "--id", gone)
    assert removed["ok"] and gone not in removed["result"]["voters"], removed
    assert len(removed["result"]["voters"]) == 3
    cl.stop(gone)
    # kill the leader: the two voters left (one original and n4) elect a new one
    cl.kill9(leader)
    left = [n for n in ("n1", "n2", "n3", "n4") if n not in (gone, leader)]
    spec = ",".join(cl.addrs[n] for n in left)

    async def after():
        async with ControllerClient(spec, deadline_s=60) as c:
            new_addr = await wait_leader(c, 60)
            assert new_addr in [cl.addrs[n] for n in left]
            beats = Heartbeater(c)
            beats.targets[("g1", 2)] = [cl.addrs[n] for n in left]
            beats.start()
            try:
                # broker 1 (the master) stops heartbeating: the controllers elect broker 2
                async def elected():
                    ri = await c.get_replica_info("g1")
                    return ri.master_broker_id == 2 and ri
                info = await until(elected, "a new master elected by the new membership", 60)
                assert info.master_epoch >= 2
            finally:
                await beats.stop()

    asyncio.run(asyncio.wait_for(after(), 150))
    md = admin("get-controller-metadata", "--controller", spec)
    # the killed leader is still a voter (a crash changes no membership), the removed one is not
    assert md["ok"] and set(md["result"]["voters"]) == {"n1", "n2", "n3", "n4"} - {gone}
    # it restarts with today's member list and the cluster's id: its log tells it the membership
    cl.start(leader, cluster_id=cluster_id)
    full = ",".join(cl.addrs[n] for n in ("n1", "n2", "n3", "n4") if n != gone)

    def caught_up():
        m = admin("get-controller-metadata", "--controller", full)
        nodes = m["result"]["nodes"] if m["ok"] else []
        return len(nodes) == 3 and all("error" not in n and n["lag"] == 0 for n in nodes) and m
    m = wait_until(caught_up, 60, "the restarted member caught up")
    assert set(m["result"]["voters"]) == {"n1", "n2", "n3", "n4"} - {gone}


def test_removing_the_leader_moves_leadership_first(procs, tmp_path):
    cl = Cluster(procs, tmp_path)
    cl.start_all()
    md = admin("get-controller-metadata", "--controller", cl.spec)
    leader = next(n["node_id"] for n in md["result"]["nodes"] if n.get("is_leader"))
    r = admin("remove-controller", "--controller", cl.spec, "--id", leader, "--timeout-s", "30", timeout=60)
    assert r["ok"] and r["result"]["voters"] == sorted({"n1", "n2", "n3"} - {leader}), r
    cl.stop(leader)
    rest = ",".join(a for n, a in cl.addrs.items() if n != leader)

    async def write():
        async with ControllerClient(rest, deadline_s=30) as c:
            await c.apply_broker_id("c1", "g1", 1, "check-1")
    asyncio.run(asyncio.wait_for(write(), 60))
    # the last voters cannot be removed below one, and an unknown id is refused
    bad = admin("remove-controller", "--controller", rest, "--id", "nope")
    assert not bad["ok"] and "not a member" in bad["error"]["message"]
    # an operator's typo in the address: the learner never catches up, the command gives up at its
    # deadline instead of waiting for ever, and the stray learner can be removed again
    typo = admin("add-controller", "--controller", rest, "--id", "n9", "--address", f"127.0.0.1:{free_port()}",
                 "--timeout-s", "2")
    assert not typo["ok"] and "still a learner" in typo["error"]["message"], typo
    undo = admin("remove-controller", "--controller", rest, "--id", "n9")
    assert undo["ok"] and "n9" not in undo["result"]["learners"] + undo["result"]["voters"], undo


@pytest.mark.parametrize("secure", [False, True], ids=["plaintext", "tls-auth"])
def test_brokers_follow_a_controller_replacement_without_losing_an_acked_message(procs, tmp_path, secure):
    """The acceptance run with brokers: under continuous acked produce, add n4, remove an original,
    kill the controller leader, then kill the broker master. The brokers learn the new controller
    list from heartbeat replies (their heartbeats, sessions and master lease follow it), a new
    master is elected and takes writes, and every acked message is still there. ``secure``: every
    process on mutual TLS with authorization; n4 proves its name with its certificate."""
    from tests.integration.failover_harness import FailoverCluster, consume_routed, read_ack_log

    c = FailoverCluster(procs, tmp_path, secure=secure)
    tls = c.tls_args("admin")

    def secured_admin(*args: str, timeout: float = 30) -> dict:
        return admin(*args, *tls, timeout=timeout)
    c.start_all()
    m1, e1 = c.wait_master(timeout=30)
    c.wait_sync_state_set({1, 2, 3}, timeout=30)
    ack_log = tmp_path / "acks.jsonl"
    prod = c.producer("producer", ack_log, duration_s=600, interval_ms=5)
    wait_until(lambda: len(read_ack_log(ack_log)) >= 50, 30, "acks before the change")

    cid = secured_admin("get-controller-metadata", "--controller", c.controllers)["result"]["cluster_id"]
    c.add_controller_ports("n4")
    c.start_controller("n4", join=True, cluster_id=cid)
    added = secured_admin("add-controller", "--controller", c.controllers, "--id", "n4", "--address", c.ctl_addrs["n4"],
                  "--raft-address", c.raft_addrs["n4"], "--timeout-s", "60", timeout=90)
    assert added["ok"] and "n4" in added["result"]["voters"], added
    if secure:   # a reader may look but not change the membership
        nope = admin("remove-controller", "--controller", c.controllers, "--id", "n4", *c.tls_args("reader/ops"))
        assert not nope["ok"] and nope["error"]["code"] == "CONTROLLER_PERMISSION_DENIED", nope

    def brokers_know(n: int) -> bool:
        return all((st := c.status(b))["replicas"] and st["replicas"]["lease"]["controllers"] == n
                   for b in ("b1", "b2", "b3"))
    wait_until(lambda: brokers_know(4), 30, "every broker heartbeats the four controllers")

    md = secured_admin("get-controller-metadata", "--controller", c.controllers)["result"]
    leader = next(n["node_id"] for n in md["nodes"] if n.get("is_leader"))
    gone = next(n for n in ("n1", "n2", "n3") if n != leader)
    removed = secured_admin("remove-controller", "--controller", c.controllers, "--id", gone)
    assert removed["ok"] and gone not in removed["result"]["voters"], removed
    c.ctl_proc[gone].stop()
    wait_until(lambda: brokers_know(3), 30, "every broker dropped the removed controller")
    namesrv = next(p for p in procs.procs if p.name == "namesrv")

    def namesrv_list() -> list[str]:
        adopted = [json.loads(x) for x in namesrv.log_text().splitlines() if '"controllers_adopted"' in x]
        return adopted[-1]["controllers"] if adopted else []
    wait_until(lambda: sorted(namesrv_list()) == sorted(c.ctl_addrs[n] for n in c.ctl_ids if n != gone),
               30, "the name server polls the voters now")
    acks = len(read_ack_log(ack_log))
    wait_until(lambda: len(read_ack_log(ack_log)) >= acks + 50, 30, "acks with the new controller list")

    c.ctl_proc[leader].kill9()
    left = [n for n in c.ctl_ids if n not in (gone, leader)]
    spec = ",".join(c.ctl_addrs[n] for n in left)

    def new_leader():
        r = secured_admin("get-controller-metadata", "--controller", spec)
        return r["ok"] and any(n.get("is_leader") for n in r["result"]["nodes"] if "error" not in n)
    wait_until(new_leader, 60, "a controller leader among the voters left")

    c.broker_proc[c.master_name()].kill9()
    m2, e2 = c.wait_master(timeout=60, not_id=m1, min_epoch=e1 + 1)
    acks = len(read_ack_log(ack_log))
    wait_until(lambda: len(read_ack_log(ack_log)) >= acks + 50, 60, "acks on the new master")
    code, _ = prod.stop(wait_s=30)
    assert code == 0, prod.log_text()[-3000:]
    acked = read_ack_log(ack_log)
    consumed = {m["msg_id"] for m in consume_routed(c.namesrv, tls_args=c.tls_args("reader/ops"))}
    missing = [a["msg_id"] for a in acked if a["msg_id"] not in consumed]
    assert not missing, f"{len(missing)} acked messages lost, e.g. {missing[:5]}"
