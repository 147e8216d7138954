"""Real controller processes on 127.0.0.1: registration, election, failover of the controller
leader, quorum loss, full restart from snapshot + log, bad requests, notifications, admin CLI."""

from __future__ import annotations

import asyncio
import json
import time

import grpc
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
from tests.waiting import until

pytestmark = pytest.mark.integration


def node_of(cluster: Cluster, addr: str) -> str:
    return next(n for n, a in cluster.addrs.items() if a == addr)


async def code_of(coro) -> int:
    try:
        await coro
    except ControllerRpcError as e:
        return e.reply_code
    return 0


async def wait_for(pred, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = await pred()
        if v:
            return v
        await asyncio.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def test_three_controllers_failover_quorum_loss_restart(procs, tmp_path):
    cl = Cluster(procs, tmp_path)
    cl.start_all()

    async def scenario():
        async with ControllerClient(cl.spec, deadline_s=15) as c:
            leader = await wait_leader(c)
            beats = Heartbeater(c)
            beats.start()
            try:
                # --- registration (RocketMQ's get next id -> apply -> register) and election
                assert await c.get_next_broker_id("c1", "g1") == 1
                await register_brokers(c, beats, list(cl.addrs.values()))
                # idempotent for the same registerCheckCode, refused for another one
                await c.apply_broker_id("c1", "g1", 1, "check-1")
                assert await code_of(c.apply_broker_id("c1", "g1", 1, "other")) != 0
                await wait_heard(c, "g1", {1, 2})
                info = await c.elect_master("c1", "g1", 1, designate=True)
                assert info.master_broker_id == 1 and info.master_epoch >= 1
                epoch = info.master_epoch

                # --- followers redirect to the leader
                follower = next(a for a in cl.addrs.values() if a != leader)
                r = await c.stub(follower).GetReplicaInfo(pb.GetReplicaInfoRequest(broker_name="g1"))
                assert r.header.code == Code.CONTROLLER_NOT_LEADER and r.header.leader_addr == leader

                # --- a watcher on a follower sees the SyncStateSet change pushed
                # (a follower's view may lag the leader's by one heartbeat: read until it catches up)
                stream = c.watch_replica_info("g1", addr=follower)
                first = await asyncio.wait_for(stream.read(), 30)
                assert first.header.code == 0 and first.header.node_id == node_of(cl, follower)
                sss, sss_epoch = await c.alter_sync_state_set("g1", 1, epoch, [1, 2], info.sync_state_set_epoch)
                assert sss == [1, 2]
                seen = [first]
                while list(seen[-1].replica_info.sync_state_set) != [1, 2] and len(seen) < 10:
                    seen.append(await asyncio.wait_for(stream.read(), 30))
                pushed = seen[-1]
                assert pushed.replica_info.master_broker_id == 1 and pushed.replica_info.master_epoch == epoch
                assert pushed.replica_info.sync_state_set_epoch == sss_epoch and pushed.raft_index > 0
                stream.cancel()

                # --- bad requests get typed codes and change nothing
                assert await code_of(c.get_replica_info("")) == Code.CONTROLLER_MALFORMED_REQUEST
                assert await code_of(c.alter_sync_state_set("g1", 1, epoch, [1], sss_epoch - 1)) == \
                    Code.CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH
                assert await code_of(c.alter_sync_state_set("g1", 1, epoch - 1, [1], sss_epoch)) == \
                    Code.CONTROLLER_FENCED_MASTER_EPOCH
                assert await code_of(c.alter_sync_state_set("g1", 2, epoch, [2], sss_epoch)) == \
                    Code.CONTROLLER_INVALID_MASTER
                assert await code_of(c.register_broker("c1", "g1", 1, "no-port")) == Code.CONTROLLER_MALFORMED_REQUEST
                assert await code_of(c.elect_master("c1", "g" * 2_000_000)) in (
                    Code.CONTROLLER_REQUEST_TOO_LARGE,)
                # undecodable bytes on the wire: a gRPC error for that call, the server keeps serving
                raw = grpc.aio.insecure_channel(leader)
                bad = raw.unary_unary("/autoswitch.controller.ControllerService/GetReplicaInfo")
                with pytest.raises(grpc.aio.AioRpcError):
                    await bad(b"\xff\xff\xff\xff", timeout=5)
                await raw.close()
                # heartbeats: batch items are judged one by one; the stream answers each in order
                replies = await c.heartbeat_batch(follower, [hb("g1", 1, epoch=epoch), hb("g1", 0), hb("", 2)])
                assert [x.header.code for x in replies] == [0, Code.CONTROLLER_MALFORMED_REQUEST,
                                                            Code.CONTROLLER_MALFORMED_REQUEST]
                assert replies[0].master_epoch == epoch and replies[0].master_broker_id == 1
                call = c.stub(leader).BrokerHeartbeatStream()
                for req in (hb("g1", 2, epoch=epoch), hb("g1", -1)):
                    await call.write(req)
                await call.done_writing()
                got = [x.header.code async for x in call]
                assert got == [0, Code.CONTROLLER_MALFORMED_REQUEST]
                before = await c.get_replica_info("g1")
                assert before.sync_state_set_epoch == sss_epoch and before.master_epoch == epoch

                # --- kill -9 the controller leader: a new leader serves the same state and takes writes
                cl.kill9(node_of(cl, leader))
                async with ControllerClient([a for a in cl.addrs.values() if a != leader], deadline_s=15) as c2:
                    new_leader = await wait_leader(c2)
                    assert new_leader != leader
                    assert await c2.get_replica_info("g1") == before
                    await c2.apply_broker_id("c1", "g1", 3, "check-3")
                    await c2.register_broker("c1", "g1", 3, "127.0.0.1:30003")
                    state = await c2.get_sync_state_data(["g1"])
                    assert [m.broker_id for m in state[0].members] == [1, 2, 3]

                    # --- quorum lost (2 of 3 down): writes fail with a clear code; nothing changes
                    cl.kill9(node_of(cl, new_leader))
                    survivor = next(a for a in cl.addrs.values() if a not in (leader, new_leader))

                    async def stepped_down():
                        m = await c2.call_node(survivor, "GetMetaData", pb.GetMetaDataRequest())
                        return not m.is_leader

                    await wait_for(stepped_down, 10, "survivor not leader")
                async with ControllerClient([survivor], deadline_s=3) as c3:
                    code = await code_of(c3.apply_broker_id("c1", "g1", 4, "check-4"))
                    assert code == Code.CONTROLLER_QUORUM_UNAVAILABLE
                    code = await code_of(c3.get_replica_info("g1"))
                    assert code == Code.CONTROLLER_QUORUM_UNAVAILABLE
            finally:
                await beats.stop()
        return before

    before = asyncio.run(scenario())

    # --- restart everything (SIGTERM the survivor: clean stop), state restored from snapshot + log
    for nid in cl.ids:
        if cl.proc[nid].alive():
            cl.stop(nid)
            assert cl.proc[nid].popen.returncode == 0

    async def after_restart():
        # Brokers keep heartbeating across the restart: without them the restarted controllers would,
        # correctly, fail the master over once they have listened for a whole heartbeat timeout.
        async with ControllerClient(cl.spec, deadline_s=15) as c:
            beats = Heartbeater(c)
            beats.targets = {("g1", b): list(cl.addrs.values()) for b in (1, 2)}
            beats.start()
            try:
                await asyncio.to_thread(cl.start_all)
                await wait_leader(c)
                assert await c.get_replica_info("g1") == before
                assert await c.get_next_broker_id("c1", "g1") == 4   # id 3 kept, the failed id 4 never applied
                assert any("snap" in p.name for p in (cl.data_dir("n1") / "raft").rglob("*")), "no snapshot"
                await admin_checks()
            finally:
                await beats.stop()

    async def cli(*args: str) -> dict:
        return await asyncio.to_thread(admin, *args)

    async def admin_checks():
        # --- admin CLI with --json, following the leader from any address
        meta = await cli("get-controller-metadata", "--controller", cl.spec)
        assert meta["ok"] and sum(n["is_leader"] for n in meta["result"]["nodes"]) == 1
        assert meta["result"]["voters"] == ["n1", "n2", "n3"] and meta["result"]["learners"] == []
        leader = next(n for n in meta["result"]["nodes"] if n["is_leader"])
        assert leader["raft_role"] == "leader" and leader["commit_index"] >= 1
        assert {p["node_id"] for p in leader["peers"] if p["match_index"] > 0} >= {"n1", "n2", "n3"} - {leader["node_id"]}

        async def all_caught_up():
            m = await cli("get-controller-metadata", "--controller", cl.spec)
            return all(n.get("lag") == 0 for n in m["result"]["nodes"]) and m

        meta = await until(all_caught_up, "every controller applied the leader's commit index")
        assert all(n["applied_index"] == meta["result"]["commit_index"] for n in meta["result"]["nodes"])
        sss = await cli("get-sync-state-set", "--controller", cl.spec, "-b", "g1")
        g = sss["result"]["groups"][0]
        assert g["replica_info"]["master_broker_id"] == 1 and g["replica_info"]["sync_state_set"] == [1, 2]
        unknown = await cli("get-sync-state-set", "--controller", cl.spec, "-b", "g1", "-b", "nope")
        assert not unknown["ok"] and unknown["error"]["code"] == "NOT_FOUND" and unknown["error"]["groups"] == ["nope"]
        out = tmp_path / "events.jsonl"
        ex = await cli("export-controller-events", "--controller", cl.addrs["n1"], "--out", str(out))
        assert ex["ok"]
        recs = [json.loads(line) for line in out.read_text().splitlines()]
        kinds = [r["event"] for r in recs]
        assert kinds.count("ApplyBrokerId") == 3 and "ElectMaster" in kinds and "AlterSyncStateSet" in kinds
        keys = [(r["index"], r["event"], r["group"]) for r in recs]
        assert len(keys) == len(set(keys)), "an applied entry was recorded twice across the restart"
        assert [r["index"] for r in recs] == sorted(r["index"] for r in recs)
        cfg = await cli("update-controller-config", "--controller", cl.spec, "-k", "heartbeat_timeout_ms=4000",
                        "-k", "propose_timeout_s=2.5")
        assert cfg["ok"], cfg
        got = (await cli("get-controller-config", "--controller", cl.spec))["result"]["config"]
        assert all(v["propose_timeout_s"] == "2.5" for v in got.values())
        assert [v for v in got.values() if v["heartbeat_timeout_ms"] == "4000"], got
        # one spelling for booleans, as in a config file (it mixed False and false: issue 64 item 9)
        words = {x for v in got.values() for x in v.values()}
        assert "False" not in words and "True" not in words and "false" in words, got
        bad = await cli("update-controller-config", "--controller", cl.spec, "-k", "node_id=x")
        assert not bad["ok"] and bad["error"]["code"] in ("NO_PERMISSION", "CONTROLLER_CONFIG_REJECTED")
        typo = await cli("update-controller-config", "--controller", cl.spec, "-k", "heartbeat_timout_ms=4000")
        assert not typo["ok"] and "did you mean 'heartbeat_timeout_ms'" in typo["error"]["message"], typo
        down = await cli("get-sync-state-set", "--controller", "127.0.0.1:1", "--timeout-s", "2")
        assert not down["ok"] and down["error"]["code"] == "CONTROLLER_UNAVAILABLE"

    asyncio.run(after_restart())


def test_startup_failures_are_one_clear_line_and_exit_2(procs, tmp_path):
    import socket

    from tests.procs import HOST

    with socket.socket() as busy:
        busy.bind((HOST, 0))
        busy.listen()
        port = busy.getsockname()[1]
        p = procs.start("busy", ["controller", "--node-id", "n1", "--peers", f"n1={HOST}:{port}",
                                 "--data-dir", str(tmp_path / "d")])
        assert p.popen.wait(30) == 2
    assert '"event":"startup_failed"' in p.log_text() and "cannot listen" in p.log_text()
    p = procs.start("badcfg", ["controller", "--node-id", "n9", "--peers", f"n1={HOST}:1",
                               "--data-dir", str(tmp_path / "d")])
    assert p.popen.wait(30) == 2 and "CONFIG_ERROR" in p.log_text()


def test_an_address_that_never_answers_costs_the_admin_cli_nothing(procs, tmp_path):
    """A controller list whose first address is a machine that accepts the TCP connection and
    then says nothing (a hung or cut-off host): the command is answered by the live controller
    within a deadline shorter than one RPC timeout (before: the whole deadline went to the
    silent address, and the command failed)."""
    import socket

    c = Cluster(procs, tmp_path, n=1)
    c.start_all()
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    try:
        addr = f"127.0.0.1:{silent.getsockname()[1]}"
        out = admin("get-sync-state-set", "--controller", f"{addr},{c.spec}", "--timeout-s", "4")
        assert out["ok"], out
        assert out["result"] == {"groups": []}
    finally:
        silent.close()


def test_an_admin_call_to_a_follower_is_recorded_once_by_the_leader_without_a_warning(procs, tmp_path):
    """Issue 33: every admin call that reached a follower first logged the warning
    `admin_audit_not_replicated` there (it cannot write the log), which read like an audit
    failure. The follower now only notes the redirect; the leader records the call, once."""
    from tests.integration.failover_harness import FailoverCluster

    c = FailoverCluster(procs, tmp_path, secure=True)
    c.start_controllers()
    tls = c.tls_args("admin")

    async def leader() -> str:
        async with ControllerClient(c.controllers, deadline_s=30, tls=c.tls("admin")) as client:
            return await wait_leader(client, 60)

    lead = asyncio.run(leader())
    follower = next(n for n, a in c.ctl_addrs.items() if a != lead)
    out = admin("clean-broker-metadata", "--controller", c.ctl_addrs[follower], "--group", "nope", *tls)
    assert not out["ok"] and out["error"]["code"] != "CONTROLLER_NOT_LEADER", out   # the leader answered
    log = c.ctl_proc[follower].log_text()
    assert "admin_call_redirected" in log and "admin_audit_not_replicated" not in log, log[-3000:]
    events = tmp_path / "events.jsonl"
    assert admin("export-controller-events", "--controller", lead, "--out", str(events), *tls)["ok"]
    audits = [e for e in map(json.loads, events.read_text().splitlines()) if e.get("event") == "AdminAudit"]
    assert len(audits) == 1 and "CleanBrokerData" in audits[0]["reason"], audits


def test_a_client_pointed_at_the_wrong_kind_of_port_says_so_at_once(procs, tmp_path):
    """Issue 33: a broker or name server command given a controller's port retried UNIMPLEMENTED
    until its deadline. It now says at once what answers there and what was expected."""
    import subprocess
    import sys

    c = Cluster(procs, tmp_path, n=1)
    c.start_all()
    addr = c.spec

    def run(*argv: str) -> tuple[int, str]:
        r = subprocess.run([sys.executable, "-m", "autoswitch", *argv, "--json"], capture_output=True, text=True,
                           timeout=120)
        return r.returncode, r.stdout.strip().splitlines()[-1] if r.stdout.strip() else r.stderr[-500:]

    rc, out = run("produce", "--broker", addr, "--topic", "t", "--timeout", "30")
    assert rc == 1 and "answers, but not as a broker" in out, out
    rc, out = run("consume", "--broker", addr, "--topic", "t", "--timeout", "30")
    assert rc == 1 and "answers, but not as a broker" in out, out
    rc, out = run("produce", "--namesrv", addr, "--group", "g0", "--topic", "t", "--retry-deadline-s", "60")
    assert rc == 1 and "NOT_A_NAME_SERVER" in out and "answers, but not as a name server" in out, out


def test_admin_commands_find_the_controllers_in_the_environment(procs, tmp_path):
    """Issue 33 item 3: with AUTOSWITCH_CONTROLLERS (or a profile's `controllers`) set, an admin
    command needs no --controller."""
    import os
    import subprocess
    import sys

    c = Cluster(procs, tmp_path, n=1)
    c.start_all()
    env = {k: v for k, v in os.environ.items() if not k.startswith("AUTOSWITCH_")}
    prof = tmp_path / "profile.toml"
    prof.write_text(f'controllers = "{c.spec}"\n')
    for extra in ({"AUTOSWITCH_CONTROLLERS": c.spec}, {"AUTOSWITCH_PROFILE": str(prof)}):
        r = subprocess.run([sys.executable, "-m", "autoswitch", "admin", "get-controller-metadata", "--json"],
                           capture_output=True, text=True, timeout=120, env={**env, **extra})
        out = json.loads(r.stdout.strip().splitlines()[-1])
        assert r.returncode == 0 and out["ok"] and out["result"]["nodes"][0]["address"] == c.spec, (extra, out)
