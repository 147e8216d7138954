"""The safety-holes attacks again, against a cluster on mutual TLS with authorization (issue 12).
Real processes, real TLS handshakes on 127.0.0.1: 3 controllers, a name server and 3 brokers in
controller mode, every one with its own certificate (broker bN holds broker/g1/N), operators with
bearer tokens. An acked-produce run (ack mode all) goes on through every attack; the last test
checks it lost nothing.

Each attacker holds a certificate of the cluster's own CA (the strongest position short of
stealing a process's key): a broker's, a reader's, another group's. Each attack is refused with
PERMISSION_DENIED (or, on the HA port, a closed connection before any byte of the log), and the
cluster keeps serving.
"""

from __future__ import annotations

import asyncio
import json
import socket
import ssl
import subprocess
import sys

import grpc
import pytest
from autoswitch.broker.client.client import AdminClient, ProducerClient
from autoswitch.controller.client import ControllerClient
from autoswitch.controller.codes import Code, ControllerRpcError
from autoswitch.controller.config import cluster_id
from autoswitch.controller.raft.messages import MsgType
from autoswitch.controller.raft.transport import member_id
from autoswitch.ha.codec import Ack, SlaveHandshake, encode_ack, encode_slave_handshake

from autoswitch.base.tls import TLSConfig, client_ssl_context, grpc_channel_credentials
from autoswitch.proto import broker_pb2 as bpb
from autoswitch.proto import broker_pb2_grpc as bpbg
from autoswitch.proto import controller_pb2 as pb
from autoswitch.proto import controller_pb2_grpc as pbg
from autoswitch.proto import namesrv_pb2 as npb
from autoswitch.proto import namesrv_pb2_grpc as npbg
from autoswitch.proto import raft_pb2, raft_pb2_grpc
from tests.integration.failover_harness import (
    GROUP,
    TOPIC,
    FailoverCluster,
    consume_all,
    read_ack_log,
    wait_until,
)
from tests.procs import HOST, ProcGroup

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

U64_MAX = (1 << 64) - 1


@pytest.fixture(scope="module")
def cl(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("secure")
    group = ProcGroup(tmp / "logs")
    c = FailoverCluster(group, tmp, secure=True)
    try:
        c.start_all()
        c.wait_master(timeout=60)
        c.wait_sync_state_set({1, 2, 3}, timeout=60)
        c.ack_log = tmp / "acks.jsonl"
        # Bounded in count and time; the last test stops it (SIGTERM: it finishes its batch).
        c.prod = c.producer("producer", c.ack_log, duration_s=240, count=20_000, interval_ms=10)
        wait_until(lambda: len(read_ack_log(c.ack_log)) >= 20, 60, "acks before the first attack")
        yield c
    except BaseException:
        print(group.dump_logs())
        raise
    finally:
        group.stop_all()


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 120))


def tls_of(c: FailoverCluster, identity: str) -> TLSConfig:
    return c.tls(identity)


async def denied(call) -> str:
    """Await a raw gRPC call that must be refused: the missing role from the trailing metadata."""
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await call
    assert e.value.code() == grpc.StatusCode.PERMISSION_DENIED, (e.value.code(), e.value.details())
    return dict(e.value.trailing_metadata() or ()).get("x-autoswitch-missing-role", "")


def still_serving(c: FailoverCluster) -> None:
    """A write through the current master is acknowledged, and acks keep arriving."""
    addr = c.broker_addr(c.master_name())

    async def go():
        p = ProducerClient(addr, max_retries=3, timeout_s=10, tls=c.tls("producer/app"))
        try:
            out = await p.produce(TOPIC, [b"after-attack"])
        finally:
            await p.close()
        assert out.ok, out
    run(go())


# --------------------------------------------------------------------------- Raft


def test_forged_raft_heartbeat_and_append_are_refused(cl):
    cid = cluster_id(cl.certs["admin"]["cluster"], cl.ctl_ids)

    async def scenario():
        async with ControllerClient(cl.controllers, deadline_s=30, tls=cl.tls()) as c:
            md = await _leader_md(c)
            leader = md.leader_id
            target = next(n for n in cl.ctl_ids if n != leader)
            terms = {n: (await c.call_node(a, "GetMetaData", pb.GetMetaDataRequest())).raft_term
                     for n, a in cl.ctl_addrs.items()}
        heartbeat = raft_pb2.RaftMessage(type=int(MsgType.HEARTBEAT), to=target, term=U64_MAX, commit=1,
                                         **{"from": leader})
        append = raft_pb2.RaftMessage(type=int(MsgType.APPEND), to=target, term=terms[leader] + 1, index=10**6,
                                      log_term=terms[leader], commit=10**6, **{"from": leader})
        batch = raft_pb2.Batch(version=1, cluster=cid, messages=[heartbeat, append], sender=leader,
                               sender_member=member_id(cid, leader))
        raft_addr = cl.raft_addrs[target]
        third = next(n for n in cl.ctl_ids if n not in (leader, target))
        # A broker's certificate, a reader's, a role-less one, and a real member's certificate
        # claiming to be the leader: all refused before Raft sees a message.
        attackers = [cl.tls("broker/g1/1"), cl.tls("reader/ops"), cl.tls("client/cli"), cl.tls(f"controller/{third}")]
        for who in attackers:
            async with grpc.aio.secure_channel(raft_addr, grpc_channel_credentials(who)) as ch:
                with pytest.raises(grpc.aio.AioRpcError) as e:
                    await raft_pb2_grpc.RaftStub(ch).Stream(iter([batch]), timeout=30)
                assert e.value.code() == grpc.StatusCode.PERMISSION_DENIED, (who.cert, e.value.details())
        # Without a certificate of the CA the handshake itself fails.
        async with grpc.aio.secure_channel(raft_addr, grpc_channel_credentials(
                TLSConfig(ca=cl.certs["admin"]["ca"], token="ast_guess"))) as ch:
            with pytest.raises(grpc.aio.AioRpcError) as e:
                await raft_pb2_grpc.RaftStub(ch).Stream(iter([batch]), timeout=30)
            assert e.value.code() == grpc.StatusCode.UNAVAILABLE
        async with ControllerClient(cl.controllers, deadline_s=30, tls=cl.tls()) as c:
            after = {n: (await c.call_node(a, "GetMetaData", pb.GetMetaDataRequest())).raft_term
                     for n, a in cl.ctl_addrs.items()}
            assert all(t < 1 << 40 for t in after.values()), after
            # The cluster still commits: a replicated config write (to the value it has).
            r = await c.call("UpdateControllerConfig",
                             pb.UpdateControllerConfigRequest(config={"scan_interval_ms": "100"}))
            assert r.header.code == 0, r.header

    run(scenario())
    still_serving(cl)


async def _leader_md(c) -> pb.GetMetaDataReply:
    """GetMetaData from a node that knows the leader (right after an election one may not yet)."""
    deadline = asyncio.get_running_loop().time() + 60
    while True:
        md = await c.get_metadata()
        if md.leader_id and md.leader_addr:
            return md
        assert asyncio.get_running_loop().time() < deadline, "no node names a leader"
        await asyncio.sleep(0.05)


async def _raft_state(c: FailoverCluster) -> dict[str, tuple[int, int, int]]:
    """node -> (raft term, config index, commit index), from each node's GetMetaData."""
    async with ControllerClient(c.controllers, deadline_s=30, tls=c.tls()) as cc:
        out = {}
        for n, a in c.ctl_addrs.items():
            md = await cc.call_node(a, "GetMetaData", pb.GetMetaDataRequest())
            out[n] = (md.raft_term, md.config_index, md.commit_index)
        return out


def _forged_config_append(cid: str, sender: str, target: str, term: int, last_index: int, last_term: int):
    """An APPEND from ``sender`` that adds ``sender`` as a voter and says it is committed."""
    from autoswitch.controller.consensus.membership import Member, Membership
    from autoswitch.controller.raft.messages import EntryKind

    conf = Membership({n: Member(client="127.0.0.1:9", raft="127.0.0.1:9") for n in ("n1", "n2", "n3", sender)})
    entry = raft_pb2.Entry(index=last_index + 1, term=term, kind=int(EntryKind.CONFIG), data=conf.encode())
    append = raft_pb2.RaftMessage(type=int(MsgType.APPEND), to=target, term=term, index=last_index, log_term=last_term,
                                  commit=last_index + 1, entries=[entry], **{"from": sender})
    return raft_pb2.Batch(version=1, cluster=cid, messages=[append], sender=sender,
                          sender_member=member_id(cid, sender))


def test_a_certified_non_member_and_another_clusters_member_cannot_write_the_raft_log(cl, tmp_path):
    """Issue 29, critical 1: a CA-signed certificate for a future member (controller/n9, bound to
    this cluster) and another cluster's controller/n1 under the same CA both sent an APPEND at
    term T+1 with a configuration entry marked committed; every node applied it. Both are refused
    now, before Raft sees a message, and no node's term or configuration moves."""
    import shutil

    from autoswitch.app.certs import init_dev_ca

    cid = cluster_id(cl.certs["admin"]["cluster"], cl.ctl_ids)
    future = init_dev_ca(cl.tmp / "certs", ["controller/n9"])["controller/n9"]
    assert future["cluster"] == cl.certs["admin"]["cluster"]
    other_dir = tmp_path / "other-cluster"
    other_dir.mkdir()
    for f in ("ca.pem", "ca.key"):
        shutil.copy(cl.tmp / "certs" / f, other_dir / f)
    other = init_dev_ca(other_dir, [f"controller/{n}" for n in cl.ctl_ids], cluster="another-cluster")

    async def scenario():
        before = await _raft_state(cl)
        async with ControllerClient(cl.controllers, deadline_s=30, tls=cl.tls()) as c:
            md = await _leader_md(c)
        leader = md.leader_id
        target = next(n for n in cl.ctl_ids if n != leader)
        term = max(t for t, _, _ in before.values()) + 1
        last = md.last_index
        attempts = [
            (TLSConfig(ca=future["ca"], cert=future["cert"], key=future["key"]), "n9",
             _forged_config_append(cid, "n9", target, term, last, md.raft_term)),
            (TLSConfig(ca=other[f"controller/{leader}"]["ca"], cert=other[f"controller/{leader}"]["cert"],
                       key=other[f"controller/{leader}"]["key"]), leader,
             _forged_config_append(cid, leader, target, term, last, md.raft_term)),
        ]
        for who, _sender, batch in attempts:
            for node in cl.ctl_ids:
                async with grpc.aio.secure_channel(cl.raft_addrs[node], grpc_channel_credentials(who)) as ch:
                    with pytest.raises(grpc.aio.AioRpcError) as e:
                        await raft_pb2_grpc.RaftStub(ch).Stream(iter([batch]), timeout=30)
                    assert e.value.code() == grpc.StatusCode.PERMISSION_DENIED, (who.cert, node, e.value.details())
        after = await _raft_state(cl)
        for n in cl.ctl_ids:
            assert after[n][0] < term or after[n][0] == before[n][0], (n, before[n], after[n])
            assert after[n][1] == before[n][1], ("a configuration was written", n, before[n], after[n])
        async with ControllerClient(cl.controllers, deadline_s=30, tls=cl.tls()) as c:
            md2 = await c.get_metadata()
            assert {p.node_id for p in md2.peers} == set(cl.ctl_ids), md2.peers

    run(scenario())
    still_serving(cl)


def test_a_reader_cannot_hold_more_than_its_share_of_a_controllers_streams(cl):
    """Item 3: 10,000 Health/Watch streams of one certificate blocked a controller. One caller now
    holds at most 64 streams of one method; the cluster keeps electing and serving meanwhile."""
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    async def scenario():
        ch = grpc.aio.secure_channel(cl.ctl_addrs["n1"], grpc_channel_credentials(cl.tls("reader/ops")))
        stub = health_pb2_grpc.HealthStub(ch)
        calls, opened, refused = [], 0, 0
        try:
            for _ in range(80):
                call = stub.Watch(health_pb2.HealthCheckRequest(service=""))
                calls.append(call)
                try:
                    await asyncio.wait_for(call.read(), 10)
                    opened += 1
                except grpc.aio.AioRpcError as e:
                    assert e.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, e
                    refused += 1
            assert opened == 64 and refused == 16, (opened, refused)
            async with ControllerClient(cl.controllers, deadline_s=30, tls=cl.tls()) as c:
                r = await c.call_node(cl.ctl_addrs["n1"], "GetMetaData", pb.GetMetaDataRequest())
                assert r.header.code == 0
        finally:
            for call in calls:
                call.cancel()
            await ch.close()

    run(scenario())
    still_serving(cl)


# --------------------------------------------------------------------------- brokers


def test_another_clusters_controller_cannot_transfer_a_masters_role(cl, tmp_path):
    """Issue 29: TransferMaster was open to any controller/* certificate of the CA. A controller
    certificate counts as a peer on a broker only when bound to the broker's own cluster."""
    import shutil

    from autoswitch.app.certs import init_dev_ca

    other_dir = tmp_path / "other"
    other_dir.mkdir()
    for f in ("ca.pem", "ca.key"):
        shutil.copy(cl.tmp / "certs" / f, other_dir / f)
    them = init_dev_ca(other_dir, ["controller/n1"], cluster="another-cluster")["controller/n1"]
    master_id, epoch = cl.wait_master()
    master = cl.master_name()

    async def scenario():
        creds = grpc_channel_credentials(TLSConfig(ca=them["ca"], cert=them["cert"], key=them["key"]))
        async with grpc.aio.secure_channel(cl.broker_addr(master), creds) as ch:
            call = bpbg.BrokerServiceStub(ch).TransferMaster(bpb.TransferMasterRequest(timeout_ms=5000), timeout=30)
            assert await denied(call) == "admin"

    run(scenario())
    assert cl.wait_master() == (master_id, epoch), "the master changed"
    still_serving(cl)


def test_only_the_controller_leader_or_an_admin_moves_a_master(cl):
    """Issue 59: TransferMaster was open to any controller certificate bound to the cluster, member
    or not: a non-member controller/n4 forced 26 handovers in 30 s. Now a controller may move a
    master only when it is the one the broker hears as the Raft leader."""
    master_id, epoch = cl.wait_master()
    master = cl.master_name()

    async def scenario():
        async with ControllerClient(cl.controllers, deadline_s=30, tls=cl.tls()) as c:
            leader = (await _leader_md(c)).leader_id
        follower = next(n for n in cl.ctl_ids if n != leader)
        for who in (f"controller/{follower}", "controller/n4"):
            creds = grpc_channel_credentials(cl.tls(who))
            async with grpc.aio.secure_channel(cl.broker_addr(master), creds) as ch:
                r = await bpbg.BrokerServiceStub(ch).TransferMaster(bpb.TransferMasterRequest(timeout_ms=5000),
                                                                    timeout=30)
                assert r.status == bpb.NOT_ALLOWED and "only the controller leader" in r.error_message, (who, r)

    run(scenario())
    assert cl.wait_master() == (master_id, epoch), "the master changed"
    still_serving(cl)


def test_switch_role_needs_admin(cl):
    master_id, epoch = cl.wait_master()
    slave = next(n for n in ("b1", "b2", "b3") if cl.status(n)["role"] == "slave")

    async def scenario():
        req = bpb.SwitchRoleRequest(role="master", master_epoch=epoch + 100)
        for who in ("broker/g1/1", "producer/app", "reader/ops"):
            async with grpc.aio.secure_channel(cl.broker_addr(slave), grpc_channel_credentials(cl.tls(who))) as ch:
                assert await denied(bpbg.BrokerServiceStub(ch).SwitchRole(req, timeout=30)) == "admin"
        # An admin gets past authorization; the broker itself then refuses (controller mode).
        admin = AdminClient(cl.broker_addr(slave), max_retries=0, tls=cl.tls("admin"))
        try:
            r = await admin.switch_role("master", epoch + 100)
        finally:
            await admin.close()
        assert r.status == bpb.NOT_ALLOWED

    run(scenario())
    assert cl.status(slave)["role"] == "slave"
    assert cl.wait_master() == (master_id, epoch)
    still_serving(cl)


def test_reading_the_log_needs_the_reader_role(cl):
    addr = cl.broker_addr(cl.master_name())

    async def scenario():
        req = bpb.ConsumeRequest(topic=TOPIC, queue_offset=0, max_count=10)
        for who in ("producer/app", "broker/g1/2"):
            async with grpc.aio.secure_channel(addr,
                                               grpc_channel_credentials(cl.tls(who))) as ch:
                assert await denied(bpbg.BrokerServiceStub(ch).Consume(req, timeout=30)) == "reader"

    run(scenario())


def test_forged_route_is_refused(cl):
    master_id, epoch = cl.wait_master()
    other = next(b for b in (1, 2, 3) if b != master_id)
    master_addr = cl.broker_addr(cl.master_name())

    async def scenario():
        forged = npb.RegisterRouteRequest(route=npb.BrokerRoute(
            cluster_name="c1", broker_name=GROUP, broker_id=master_id, address="127.0.0.1:1", role="master",
            master_epoch=epoch + 1000), ttl_ms=60_000)
        for who in (f"broker/g1/{other}", "broker/g2/2", "producer/app", "reader/ops"):
            async with grpc.aio.secure_channel(cl.namesrv, grpc_channel_credentials(cl.tls(who))) as ch:
                assert await denied(npbg.NameServerStub(ch).RegisterRoute(forged, timeout=30)) == "broker"
        async with grpc.aio.secure_channel(cl.namesrv, grpc_channel_credentials(cl.tls("producer/app"))) as ch:
            r = await npbg.NameServerStub(ch).LookupMaster(npb.LookupMasterRequest(broker_name=GROUP), timeout=30)
        assert r.master.address == master_addr and r.master.broker_id == master_id

    run(scenario())
    still_serving(cl)


def _ha_claim(port: int, tls: TLSConfig, broker_id: int) -> bytes:
    """TLS-connect to an HA port as ``tls``, handshake as ``broker_id``; all bytes until closed."""
    ctx = client_ssl_context(tls)
    got = b""
    with socket.create_connection((HOST, port), timeout=60) as raw, \
            ctx.wrap_socket(raw, server_hostname=HOST) as s:
        s.sendall(encode_slave_handshake(SlaveHandshake(broker_id)) + encode_ack(Ack(0)))
        while True:
            try:
                chunk = s.recv(1 << 16)
            except (ssl.SSLError, ConnectionResetError):
                return got
            if not chunk:
                return got
            got += chunk


def test_ha_impersonation_and_log_read_are_refused(cl):
    master_id, _ = cl.wait_master()
    master = cl.master_name()
    port = cl.broker_ha_port[master]
    slave_id = next(b for b in (1, 2, 3) if b != master_id)
    # Another member's certificate claiming a slave's id; another group's broker with the same
    # number; a reader; the master's own id claimed by a slave's certificate.
    for who, claim in ((f"broker/g1/{6 - master_id - slave_id}", slave_id), ("broker/g2/2", 2),
                       ("reader/ops", slave_id), (f"broker/g1/{slave_id}", master_id)):
        assert _ha_claim(port, cl.tls(who), claim) == b"", f"{who} claiming {claim} got log bytes"
    wait_until(lambda: '"identity_mismatch"' in cl.broker_proc[master].log_text(), 60, "refusals logged")
    # The real slaves are still connected and in sync.
    cl.wait_sync_state_set({1, 2, 3})
    still_serving(cl)


# --------------------------------------------------------------------------- controller API


def test_a_broker_certificate_acts_only_for_its_own_id_and_group(cl):
    async def scenario():
        async with grpc.aio.secure_channel(cl.ctl_addrs["n1"], grpc_channel_credentials(cl.tls("broker/g1/2"))) as ch:
            stub = pbg.ControllerServiceStub(ch)
            for call in (
                stub.RegisterBroker(pb.RegisterBrokerRequest(cluster_name="c1", broker_name=GROUP, broker_id=3,
                                                             broker_address="127.0.0.1:1"), timeout=30),
                stub.BrokerHeartbeat(pb.BrokerHeartbeatRequest(cluster_name="c1", broker_name="g2", broker_id=2),
                                     timeout=30),
                stub.AlterSyncStateSet(pb.AlterSyncStateSetRequest(broker_name=GROUP, master_broker_id=1,
                                                                   new_sync_state_set=[1]), timeout=30),
                stub.ApplyBrokerId(pb.ApplyBrokerIdRequest(cluster_name="c1", broker_name=GROUP, applied_broker_id=9,
                                                           register_check_code="x"), timeout=30),
            ):
                assert await denied(call) == "broker"
            assert await denied(stub.ElectMaster(pb.ElectMasterRequest(broker_name=GROUP, broker_id=2,
                                                                       designate_elect=True), timeout=30)) == "admin"
            assert await denied(stub.CleanBrokerData(pb.CleanBrokerDataRequest(broker_name=GROUP), timeout=30)) \
                == "admin"
            # A batch hiding one foreign call is refused whole.
            ok = pb.BrokerHeartbeatRequest(cluster_name="c1", broker_name=GROUP, broker_id=2)
            bad = pb.BrokerHeartbeatRequest(cluster_name="c1", broker_name=GROUP, broker_id=1)
            batch = pb.BatchRequest(calls=[pb.BatchCall(method="BrokerHeartbeat", request=r.SerializeToString())
                                           for r in (ok, bad)])
            assert await denied(stub.Batch(batch, timeout=30)) == "broker"

    run(scenario())
    cl.wait_sync_state_set({1, 2, 3})
    still_serving(cl)


def test_reader_token_cannot_elect_or_clean_and_revocation_needs_no_restart(cl):
    async def scenario():
        async with ControllerClient(cl.controllers, deadline_s=30, tls=cl.token_tls("ops-reader")) as c:
            groups = await c.get_sync_state_data([GROUP])          # a reader reads
            assert groups and groups[0].replica_info.master_broker_id
            for coro in (c.elect_master("c1", GROUP, 0),
                         c.clean_broker_data("c1", GROUP, [3])):
                with pytest.raises(ControllerRpcError) as e:
                    await coro
                assert e.value.reply_code == Code.CONTROLLER_PERMISSION_DENIED
                assert "needs role admin" in e.value.message
        async with ControllerClient(cl.controllers, deadline_s=30, tls=cl.token_tls("ops-admin")) as c:
            await c.get_metadata()

    run(scenario())
    out = subprocess.run([sys.executable, "-m", "autoswitch", "certs", "revoke", str(cl.tokens_file), "ops-admin"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr

    async def after_revoke():
        async with ControllerClient(cl.controllers, deadline_s=30, tls=cl.token_tls("ops-admin")) as c:
            with pytest.raises(ControllerRpcError) as e:
                await c.get_metadata()
            assert e.value.reply_code == Code.CONTROLLER_PERMISSION_DENIED
            assert "unknown or revoked token" in e.value.message

    run(after_revoke())
    still_serving(cl)


def test_a_revoked_token_ends_the_streams_it_opened(cl):
    """Item 4: a token revoked while its stream was open kept receiving. The stream ends with
    PERMISSION_DENIED now, within a second or so of the revocation, with nothing new to send."""
    from autoswitch.app.certs import issue_token

    token = issue_token(cl.tokens_file, "ops-watcher", ["reader"])
    c = cl.certs["client/cli"]
    creds = TLSConfig(ca=c["ca"], cert=c["cert"], key=c["key"], token=token).validate()

    async def scenario():
        ch = grpc.aio.secure_channel(cl.ctl_addrs["n1"], grpc_channel_credentials(creds))
        try:
            call = pbg.ControllerServiceStub(ch).WatchReplicaInfo(pb.WatchReplicaInfoRequest(broker_name=GROUP))
            first = await asyncio.wait_for(call.read(), 30)
            assert first.replica_info.broker_name == GROUP
            out = await asyncio.create_subprocess_exec(sys.executable, "-m", "autoswitch", "certs", "revoke",
                                                       str(cl.tokens_file), "ops-watcher")
            assert await out.wait() == 0
            with pytest.raises(grpc.aio.AioRpcError) as e:
                while True:     # the stream may still deliver an event that was on its way
                    msg = await asyncio.wait_for(call.read(), 30)
                    assert msg is not grpc.aio.EOF, "the stream ended without an error"
            assert e.value.code() == grpc.StatusCode.PERMISSION_DENIED, e.value
        finally:
            await ch.close()

    run(scenario())


def test_admin_calls_are_in_the_replicated_event_log(cl):
    """Who did what, with which result: an admin's refused clean lands in every node's history."""
    async def scenario():
        async with ControllerClient(cl.controllers, deadline_s=30, tls=cl.tls("admin")) as c:
            with pytest.raises(ControllerRpcError):
                await c.clean_broker_data("c1", GROUP, [77])       # no such broker: refused, still audited

            async def audited():
                for addr in cl.ctl_addrs.values():
                    r = await c.call_node(addr, "ExportEvents", pb.ExportEventsRequest(from_line=0, max_lines=10_000))
                    recs = [json.loads(line) for line in r.lines]
                    if not any(e["event"] == "AdminAudit" and e["actor"] == "admin" and "CleanBrokerData" in e["reason"]
                               and "code=0" not in e["reason"] for e in recs):
                        return False
                return True

            deadline = asyncio.get_running_loop().time() + 60
            while not await audited():
                assert asyncio.get_running_loop().time() < deadline, "no AdminAudit record on every node"
                await asyncio.sleep(0.2)

    run(scenario())


async def _events_everywhere(c, cl: FailoverCluster) -> list[list[dict]]:
    out = []
    for addr in cl.ctl_addrs.values():
        r = await c.call_node(addr, "ExportEvents", pb.ExportEventsRequest(from_line=0, max_lines=10_000))
        out.append([json.loads(line) for line in r.lines])
    return out


def test_no_admin_write_without_its_audit_record_and_every_admin_call_is_audited(cl):
    """Item 5: a write whose caller's deadline was 2-30 ms applied without an audit record;
    move-controller-leader was audited on a node that was no longer leader (so not at all);
    snapshot-save was never audited. Every applied admin write now has its record in every node's
    history, and so do MoveLeader and SaveSnapshot."""
    values = list(range(31_001, 31_031))

    async def scenario():
        async with ControllerClient(cl.controllers, deadline_s=30, tls=cl.tls("admin")) as c:
            md = await _leader_md(c)
            async with grpc.aio.secure_channel(md.leader_addr, grpc_channel_credentials(cl.tls("admin"))) as ch:
                stub = pbg.ControllerServiceStub(ch)
                for i, v in enumerate(values):
                    try:
                        await stub.UpdateControllerConfig(pb.UpdateControllerConfigRequest(
                            config={"rebalance_delay_ms": str(v)}), timeout=0.002 + (i % 15) * 0.002)
                    except grpc.aio.AioRpcError:
                        pass        # the deadline: the write may have applied all the same
            # settle: one more admin write with a real deadline, seen on every node
            await c.call("UpdateControllerConfig", pb.UpdateControllerConfigRequest(
                config={"rebalance_delay_ms": "30000"}))
            snap = await c.call("SaveSnapshot", pb.SaveSnapshotRequest())
            assert snap.header.code == 0
            target = next(n for n in cl.ctl_ids if n != md.leader_id)
            moved = await c.call("MoveLeader", pb.MoveLeaderRequest(to_node_id=target, timeout_ms=10_000))
            assert moved.header.code == 0, moved.header

            def check(histories) -> str | None:
                for recs in histories:
                    applied = {int(e["reason"].split("=")[1]) for e in recs if e["event"] == "UpdateConfig"
                               and e["reason"].startswith("rebalance_delay_ms=")
                               and int(e["reason"].split("=")[1]) in values}
                    audits = [e for e in recs if e["event"] == "AdminAudit" and e.get("actor") == "admin"]
                    audited = {v for v in values if any(f'"{v}"' in e["reason"] and "code=0" in e["reason"]
                                                        for e in audits)}
                    if not applied <= audited:
                        return f"applied without an audit record: {sorted(applied - audited)}"
                    for action in ("SaveSnapshot", "MoveLeader"):
                        if not any(e["reason"].startswith(action) for e in audits):
                            return f"no {action} record"
                return None

            deadline = asyncio.get_running_loop().time() + 60
            while (why := check(await _events_everywhere(c, cl))) is not None:
                assert asyncio.get_running_loop().time() < deadline, why
                await asyncio.sleep(0.2)

    run(scenario())
    still_serving(cl)


def test_a_reader_cannot_rewrite_another_identitys_consumer_group(cl):
    """Issue 29: any reader could rewrite any consumer group's offsets. A group belongs to the
    identity of its first commit (recorded in the replicated commit record); another reader is
    refused, an admin may still reset it."""
    from autoswitch.broker.client.client import ConsumerClient

    from autoswitch.app.certs import init_dev_ca
    from autoswitch.base.errors import PermissionDenied

    addr = cl.broker_addr(cl.master_name())
    o = init_dev_ca(cl.tmp / "certs", ["reader/other-app"])["reader/other-app"]
    other_tls = TLSConfig(ca=o["ca"], cert=o["cert"], key=o["key"]).validate()

    async def scenario():
        owner = ConsumerClient(addr, max_retries=3, timeout_s=10, tls=cl.tls("reader/ops"))
        other = ConsumerClient(addr, max_retries=0, timeout_s=10, tls=other_tls)
        admin = ConsumerClient(addr, max_retries=3, timeout_s=10, tls=cl.tls("admin"))
        try:
            assert (await owner.commit_offset("billing", TOPIC, 1)).status == bpb.OK
            with pytest.raises(PermissionDenied, match="belongs to 'reader/ops'"):
                await other.commit_offset("billing", TOPIC, 0)
            assert (await other.commit_offset("audit-app", TOPIC, 0)).status == bpb.OK   # its own group
            assert (await admin.commit_offset("billing", TOPIC, 0)).status == bpb.OK      # an admin's reset
            assert (await owner.commit_offset("billing", TOPIC, 2)).status == bpb.OK
            # deleting a group is an admin's: not even its owner may (kafka's DELETE on the group)
            with pytest.raises(PermissionDenied, match="DeleteConsumerGroup"):
                await owner.delete_consumer_group("billing")
            assert (await admin.delete_consumer_group("billing")).status == bpb.OK
        finally:
            for c in (owner, other, admin):
                await c.close()

    run(scenario())


def test_an_admins_transfer_master_on_a_broker_is_audited_by_the_controllers(cl):
    """Item 5: the broker's TransferMaster (an admin call on a broker) left no audit record. The
    master reports who asked with the handover's election; the controllers record it with it."""
    master = cl.master_name()

    async def scenario():
        a = AdminClient(cl.broker_addr(master), tls=cl.tls("admin"))
        try:
            r = await a.transfer_master(timeout_ms=20_000)
        finally:
            await a.close()
        assert r.status == bpb.OK, r
        async with ControllerClient(cl.controllers, deadline_s=30, tls=cl.tls("admin")) as c:
            def found(histories) -> bool:
                return all(any(e["event"] == "AdminAudit" and e["reason"].startswith("TransferMaster code=0")
                               and e.get("actor", "").startswith("admin via broker/") for e in recs)
                           for recs in histories)
            deadline = asyncio.get_running_loop().time() + 60
            while not found(await _events_everywhere(c, cl)):
                assert asyncio.get_running_loop().time() < deadline, "no TransferMaster record on every node"
                await asyncio.sleep(0.2)

    run(scenario())
    cl.wait_master(timeout=60)
    still_serving(cl)


# --------------------------------------------------------------------------- the produce run


def _admin(cl: FailoverCluster, *args: str) -> dict:
    out = subprocess.run([sys.executable, "-m", "autoswitch", "admin", *args, "--controller", cl.controllers,
                          *cl.tls_args("admin"), "--json"], capture_output=True, text=True, timeout=120)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_a_learner_neither_leads_nor_raises_terms(cl):
    """Issue 59, items 1-2: after `admin add-controller --id n4 ... --no-wait` (the documented first
    step of adding a member), controller/n4 is a learner: before the fix its certificate sent one
    APPEND at term + 1 and a follower applied a forged configuration entry, and a stream of its
    heartbeats, each within the per-message bound above the last, walked every node's term up.
    Now a learner's leader and candidate messages are refused (not_a_voter) and no message of a
    non-voter raises a term."""
    from autoswitch.controller.consensus.membership import Member, Membership
    from autoswitch.controller.raft.messages import EntryKind

    from tests.procs import free_port

    cid = cluster_id(cl.certs["admin"]["cluster"], cl.ctl_ids)
    learner = cl.certs["controller/n4"]
    r = _admin(cl, "add-controller", "--id", "n4", "--address", f"{HOST}:{free_port()}",
               "--raft-address", f"{HOST}:{free_port()}", "--no-wait")
    assert r["ok"] and "n4" in r["result"]["learners"], r
    try:
        async def scenario():
            before = await _raft_state(cl)
            async with ControllerClient(cl.controllers, deadline_s=30, tls=cl.tls()) as c:
                md = await _leader_md(c)
            leader = md.leader_id
            term, last = max(t for t, _, _ in before.values()), md.last_index
            conf = Membership({n: Member(client="127.0.0.1:9", raft="127.0.0.1:9") for n in ("n1", "n2", "n3", "n4")})
            who = TLSConfig(ca=learner["ca"], cert=learner["cert"], key=learner["key"])
            for target in (n for n in cl.ctl_ids if n != leader):
                entry = raft_pb2.Entry(index=last + 1, term=term + 1, kind=int(EntryKind.CONFIG), data=conf.encode())
                append = raft_pb2.RaftMessage(type=int(MsgType.APPEND), to=target, term=term + 1, index=last,
                                              log_term=md.raft_term, commit=last + 1, entries=[entry],
                                              **{"from": "n4"})
                # then a stream of heartbeats, each 64 terms above the last (the per-message bound)
                beats = [raft_pb2.RaftMessage(type=int(MsgType.HEARTBEAT), to=target, term=term + 64 * k, commit=0,
                                              **{"from": "n4"}) for k in range(1, 2001)]
                batches = [raft_pb2.Batch(version=1, cluster=cid, messages=[append], sender="n4",
                                          sender_member=member_id(cid, "n4"))]
                batches += [raft_pb2.Batch(version=1, cluster=cid, messages=beats[i:i + 100], sender="n4",
                                           sender_member=member_id(cid, "n4")) for i in range(0, len(beats), 100)]
                async with grpc.aio.secure_channel(cl.raft_addrs[target], grpc_channel_credentials(who)) as ch:
                    await raft_pb2_grpc.RaftStub(ch).Stream(iter(batches), timeout=60)   # a member: admitted
            after = await _raft_state(cl)
            for n in cl.ctl_ids:
                # no term moved (an election of their own at most), no configuration was written
                assert after[n][0] <= before[n][0] + 2, ("a learner raised a term", n, before[n], after[n])
                assert after[n][2] >= before[n][2]
            async with ControllerClient(cl.controllers, deadline_s=30, tls=cl.tls()) as c:
                md2 = await c.get_metadata()
                assert {p.node_id for p in md2.peers if p.role == "voter"} == set(cl.ctl_ids), md2.peers
            for n in cl.ctl_ids:
                text = cl.ctl_proc[n].log_text()
                if n != leader:
                    assert '"reason":"not_a_voter"' in text, n

        run(scenario())
    finally:
        r = _admin(cl, "remove-controller", "--id", "n4")
        assert r["ok"], r
    still_serving(cl)


def test_the_acked_produce_run_alongside_lost_nothing(cl):
    rc, forced = cl.prod.stop(60)
    assert rc == 0 and not forced, cl.prod.log_text()[-3000:]
    acks = read_ack_log(cl.ack_log)
    assert len(acks) >= 20
    master = cl.master_name()
    have = {m.msg_id for m in consume_all(cl.broker_addr(master), tls=cl.tls("reader/ops"))}
    lost = [a["msg_id"] for a in acks if a["msg_id"] not in have]
    assert not lost, f"{len(lost)} acked messages lost, e.g. {lost[:5]}"
    # Nothing on the way crashed a process.
    assert all(p.alive() for p in (*cl.ctl_proc.values(), *cl.broker_proc.values()))
