"""Brokers do not change roles, epochs or history behind the controller's back. Real processes.

- SwitchRole on a controller-mode broker is refused (NOT_ALLOWED): no second master.
- A routed producer does not count an ack made under another MasterEpoch than its route's.
- A commit log with data next to a missing EpochFile is refused at start.
- A bad [ha] key stops the start with CONFIG_ERROR (exit 2), before anything registers.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys

import grpc
import pytest

from autoswitch.proto import namesrv_pb2 as npb
from autoswitch.proto import namesrv_pb2_grpc as npbg
from tests.integration.failover_harness import FailoverCluster
from tests.procs import HOST, free_port, wait_port
from tests.waiting import until

pytestmark = pytest.mark.integration


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "autoswitch", *args], capture_output=True, text=True, timeout=120)


def _static_master(procs, tmp_path, name: str, epoch: int, *extra: str):
    port, ha = free_port(), free_port()
    p = procs.start(name, ["broker", "--group", "g1", "--role", "master", "--epoch", str(epoch), "--listen",
                           f"{HOST}:{port}", "--ha-listen", f"{HOST}:{ha}", "--data-dir", str(tmp_path / name),
                           "--ack-mode", "master", *extra])
    wait_port(port, proc=p.popen)
    return p, f"{HOST}:{port}"


def test_switch_role_is_refused_in_controller_mode(procs, tmp_path):
    c = FailoverCluster(procs, tmp_path)
    c.start_all()
    master_id, epoch = c.wait_master()
    c.wait_sync_state_set({1, 2, 3})
    slave = next(n for n in ("b1", "b2", "b3") if c.status(n)["role"] == "slave")
    r = cli("admin", "switch-role", "--broker", c.broker_addr(slave), "--role", "master", "--epoch", "100", "--json")
    assert r.returncode != 0, r.stdout
    assert "NOT_ALLOWED" in r.stdout + r.stderr
    st = c.status(slave)
    assert st["role"] == "slave" and st["master_epoch"] == epoch
    assert c.wait_master() == (master_id, epoch), "the controller's master is untouched"
    assert '"switch_role_refused"' in c.broker_proc[slave].log_path.read_text()


def test_routed_producer_does_not_count_acks_from_another_epoch(procs, tmp_path):
    ns_port = free_port()
    ns = procs.start("namesrv", ["namesrv", "--listen", f"{HOST}:{ns_port}", "--route-ttl-s", "60"])
    wait_port(ns_port, proc=ns.popen)
    _, addr = _static_master(procs, tmp_path, "rogue", 3)

    async def run():
        from autoswitch.broker.client.route import RetriesExhausted, RetryPolicy, RoutedProducer

        async with grpc.aio.insecure_channel(f"{HOST}:{ns_port}") as ch:
            # A route that sends the group to this broker as if it were MasterEpoch 7's master.
            r = await npbg.NameServerStub(ch).RegisterRoute(npb.RegisterRouteRequest(route=npb.BrokerRoute(
                cluster_name="c1", broker_name="g1", broker_id=9, address=addr, role="master", master_epoch=7),
                ttl_ms=60_000))
            assert r.header.code == 0 and r.accepted_as_master
        p = RoutedProducer(f"{HOST}:{ns_port}", "g1", ack_log=tmp_path / "acks.jsonl",
                           policy=RetryPolicy(retry_deadline_s=2.0))
        try:
            with pytest.raises(RetriesExhausted):
                await p.produce("t", [b"m%d" % i for i in range(5)])
            assert p.stats.statuses.get("EPOCH_MISMATCH", 0) >= 1
        finally:
            await p.close()
        acks = (tmp_path / "acks.jsonl").read_text() if (tmp_path / "acks.jsonl").exists() else ""
        assert acks == "", "nothing may be reported acknowledged"
    asyncio.run(run())


def test_missing_epochfile_with_data_refuses_to_start(procs, tmp_path):
    p, addr = _static_master(procs, tmp_path, "b", 1)
    r = cli("produce", "--broker", addr, "--topic", "t", "--count", "20", "--size", "64", "--json")
    assert r.returncode == 0, r.stderr
    p.stop()
    epochfile = tmp_path / "b" / "epochfile"
    assert epochfile.exists()
    epochfile.unlink()
    port, ha = free_port(), free_port()
    r = cli("broker", "--group", "g1", "--role", "master", "--epoch", "2", "--listen", f"{HOST}:{port}",
            "--ha-listen", f"{HOST}:{ha}", "--data-dir", str(tmp_path / "b"))
    assert r.returncode == 1
    err = json.loads(r.stderr.strip().splitlines()[-1])["error"]
    assert err["code"] == "LOG_CORRUPT" and str(epochfile) in err["message"] and "commitlog" in err["message"]


def test_bad_ha_key_stops_the_start_before_registering(procs, tmp_path):
    c = FailoverCluster(procs, tmp_path)
    c.start_controllers()
    (tmp_path / "b.toml").write_text("[ha]\nno_such_key = 1\n")
    port, ha = free_port(), free_port()
    r = cli("broker", "--config", str(tmp_path / "b.toml"), "--cluster", "c1", "--group", "g1",
            "--listen", f"{HOST}:{port}", "--ha-listen", f"{HOST}:{ha}", "--data-dir", str(tmp_path / "bad"),
            "--controllers", c.controllers)
    assert r.returncode == 2, r.stderr
    assert json.loads(r.stderr.strip().splitlines()[-1])["error"]["code"] == "CONFIG_ERROR"
    assert "no_such_key" in r.stderr
    try:
        g = c.replica_info()
    except Exception as e:  # noqa: BLE001 - an unknown group is an error reply: nothing registered
        g = e
    assert g is None or isinstance(g, Exception) or not g.members, f"registered: {g}"


def test_controller_refuses_a_heartbeat_timeout_below_the_brokers_lease(procs, tmp_path):
    """Brokers sized their master lease for a 1000 ms controller heartbeat timeout; 100 ms would let
    a controller declare the master dead while its lease still lets it acknowledge."""
    c = FailoverCluster(procs, tmp_path)
    c.start_all()
    master_id, epoch = c.wait_master()
    r = cli("admin", "update-controller-config", "--controller", c.controllers, "-k", "heartbeat_timeout_ms=100",
            "--json")
    assert r.returncode != 0, r.stdout
    assert "rule: heartbeat_timeout_ms >= every live broker's heartbeat_timeout_ms" in r.stdout + r.stderr
    got = cli("admin", "get-controller-config", "--controller", c.controllers, "--json")
    assert '"heartbeat_timeout_ms": "1000"' in got.stdout, got.stdout
    assert c.wait_master() == (master_id, epoch), "no election followed"
    # A longer timeout is safe (failover is only slower) and accepted.
    r = cli("admin", "update-controller-config", "--controller", c.controllers, "-k", "heartbeat_timeout_ms=2000")
    assert r.returncode == 0, r.stdout + r.stderr


def test_standalone_namesrv_route_cannot_outrank_the_controller(procs, tmp_path):
    """A route claiming MasterEpoch 2^62 for the group (60 s TTL) never becomes the master route:
    the name server checks master routes against the controllers (--controllers)."""
    c = FailoverCluster(procs, tmp_path)
    c.start_all()
    master_id, epoch = c.wait_master()

    async def run():
        async with grpc.aio.insecure_channel(c.namesrv) as ch:
            ns = npbg.NameServerStub(ch)
            r = await ns.RegisterRoute(npb.RegisterRouteRequest(route=npb.BrokerRoute(
                cluster_name="c1", broker_name="g1", broker_id=7, address=f"{HOST}:1", role="master",
                master_epoch=2**62), ttl_ms=60_000))
            assert r.header.code == 0 and not r.accepted_as_master

            async def real_master():          # the real master's next registration
                m = await ns.LookupMaster(npb.LookupMasterRequest(broker_name="g1"))
                assert m.master.broker_id != 7, m
                return m if m.master.broker_id == master_id else None
            m = await until(real_master, "the controller's master as the route", interval_s=0.1)
            assert m.master.master_epoch == epoch
    asyncio.run(run())


def test_the_heartbeat_timeout_floor_comes_from_a_majority_not_the_leader_alone(procs, tmp_path):
    """Issue 30 item 4: the floor used the leader's own table. A master heard by the other
    controllers but not by the leader (its link to the leader cut) was left out, so the leader
    accepted a timeout shorter than the one that master's lease was sized for."""
    from autoswitch.controller.client import ControllerClient

    from autoswitch.proto import controller_pb2 as cpb

    c = FailoverCluster(procs, tmp_path)
    c.start_controllers()

    async def run():
        async with ControllerClient(c.controllers, deadline_s=10, rpc_timeout_s=2) as client:
            md = await until(lambda: _leader_md(client), "a controller leader", interval_s=0.2)
            follower = next(a for n, a in c.ctl_addrs.items() if n != md.leader_id)

            async def beat():       # heard by one follower only, stating a 5000 ms timeout
                r = await client.call_node(follower, "BrokerHeartbeat", cpb.BrokerHeartbeatRequest(
                    cluster_name="c1", broker_name="g-floor", broker_id=1, broker_address=f"{HOST}:1",
                    epoch=1, clean_shutdown=True, heartbeat_timeout_ms=5000), timeout_s=2)
                return r.header.code == 0
            assert await beat()
            r = await asyncio.to_thread(cli, "admin", "update-controller-config", "--controller", c.controllers,
                                        "-k", "heartbeat_timeout_ms=2000", "--json")
            assert await beat()
            return r
    r = asyncio.run(run())
    assert r.returncode != 0, r.stdout
    assert "sized their master lease for 5000 ms" in r.stdout + r.stderr


async def _leader_md(client):
    try:
        md = await client.get_metadata()
    except Exception:  # noqa: BLE001 - the controllers are still starting
        return None
    return md if md.leader_id else None
