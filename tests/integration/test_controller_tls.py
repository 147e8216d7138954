"""The controller cluster on mutual TLS (real processes, real handshakes on 127.0.0.1): with
certificates of the cluster's CA the admin client and the Raft peers work; a plaintext client, a
client without a certificate and one with another CA's certificate are refused, and so are a
plaintext Raft stream and a member's certificate speaking for another member; the cluster keeps
serving."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys

import grpc
import pytest
from autoswitch.controller.client import ControllerClient
from autoswitch.controller.codes import ControllerRpcError

from autoswitch.app.certs import init_dev_ca
from autoswitch.base.tls import TLSConfig
from autoswitch.proto import controller_pb2 as pb
from autoswitch.proto import raft_pb2, raft_pb2_grpc
from tests.integration.controller_harness import Cluster, wait_leader
from tests.waiting import until

pytestmark = pytest.mark.integration


def _tls(paths: dict[str, str]) -> TLSConfig:
    return TLSConfig(ca=paths["ca"], cert=paths["cert"], key=paths["key"]).validate()


def test_controller_cluster_on_mutual_tls(procs, tmp_path):
    d = tmp_path / "tls"
    ids = init_dev_ca(d, ["controller/n1", "controller/n2", "controller/n3", "admin"])
    other = init_dev_ca(tmp_path / "other", ["admin"])
    cl = Cluster(procs, tmp_path, tls_dir=d)
    cl.start_all()
    admin = _tls(ids["admin"])

    async def scenario():
        async with ControllerClient(cl.spec, deadline_s=30, tls=admin) as c:
            leader = await wait_leader(c, 60)
            assert await c.get_next_broker_id("c1", "g1") == 1
            await c.apply_broker_id("c1", "g1", 1, "check-1")      # a Raft commit across TLS peers

        async def refused(client_tls) -> None:
            async with ControllerClient(cl.spec, deadline_s=3, max_attempts=2, tls=client_tls) as bad:
                with pytest.raises(ControllerRpcError) as e:
                    await bad.call_node(leader, "GetMetaData", pb.GetMetaDataRequest(), timeout_s=2)
                assert e.value.code == "CONTROLLER_UNAVAILABLE"

        await refused(None)                                                  # plaintext
        await refused(TLSConfig(ca=ids["admin"]["ca"], cert=other["admin"]["cert"],
                                key=other["admin"]["key"]))                 # another CA's certificate
        no_cert = grpc.ssl_channel_credentials(root_certificates=open(ids["admin"]["ca"], "rb").read())
        async with grpc.aio.secure_channel(leader, no_cert) as ch:
            with pytest.raises(grpc.aio.AioRpcError):
                await ch.unary_unary("/autoswitch.controller.ControllerService/GetMetaData",
                                     request_serializer=pb.GetMetaDataRequest.SerializeToString,
                                     response_deserializer=pb.GetMetaDataReply.FromString)(
                    pb.GetMetaDataRequest(), timeout=5)
        # a plaintext Raft stream to a peer listener does not get through the handshake
        raft_addr = cl.raft_addrs["n1"]
        async with grpc.aio.insecure_channel(raft_addr) as ch:
            with pytest.raises(grpc.aio.AioRpcError):
                await raft_pb2_grpc.RaftStub(ch).Stream(iter([raft_pb2.Batch(version=1)]), timeout=5)
        # a member's certificate cannot speak for another member: n2's certificate claiming n3
        from autoswitch.controller.config import cluster_id
        from autoswitch.controller.raft.transport import member_id

        from autoswitch.base.tls import grpc_channel_credentials

        cid = cluster_id(ids["admin"]["cluster"], cl.ids)
        n2_cert = grpc_channel_credentials(_tls(ids["controller/n2"]))

        def forged(sender: str):
            return raft_pb2.Batch(version=1, cluster=cid, sender=sender, sender_member=member_id(cid, sender),
                                  messages=[raft_pb2.RaftMessage(type=1, to="n1", term=1, **{"from": sender})])

        async with grpc.aio.secure_channel(raft_addr, n2_cert) as ch:
            with pytest.raises(grpc.aio.AioRpcError) as e:
                await raft_pb2_grpc.RaftStub(ch).Stream(iter([forged("n3")]), timeout=5)
            assert e.value.code() == grpc.StatusCode.PERMISSION_DENIED and "certificate" in (e.value.details() or "")
        async with ControllerClient(cl.spec, deadline_s=30, tls=admin) as c:
            await until(lambda: wait_leader(c, 60), "the cluster still has a leader")
            await c.apply_broker_id("c1", "g1", 2, "check-2")

    asyncio.run(asyncio.wait_for(scenario(), 240))
    out = subprocess.run([sys.executable, "-m", "autoswitch", "admin", "get-controller-metadata", "--controller",
                          cl.spec, "--json", "--tls-ca", ids["admin"]["ca"], "--tls-cert", ids["admin"]["cert"],
                          "--tls-key", ids["admin"]["key"]], capture_output=True, text=True, timeout=120)
    assert json.loads(out.stdout.strip().splitlines()[-1])["ok"] is True, out.stdout + out.stderr[-2000:]


def test_tls_mismatches_are_said_at_once_in_one_line(procs, tmp_path):
    """Issue 33: a certificate from another CA printed gRPC's native log lines and retried until
    the deadline; a missing profile answered "Socket closed". Each mismatch is now one line on
    stderr, naming what is wrong, and the unfixable ones end at once (exit 1)."""
    d = tmp_path / "tls"
    ids = init_dev_ca(d, ["controller/n1", "admin"])
    other = init_dev_ca(tmp_path / "other", ["admin"])
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    tls_cl = Cluster(procs, tmp_path / "a", n=1, tls_dir=d)
    tls_cl.start_all()
    plain_cl = Cluster(procs, tmp_path / "b", n=1)
    plain_cl.start_all()

    def cli(spec: str, *tls: str, timeout_s: str = "30") -> tuple[int, list[str]]:
        r = subprocess.run([sys.executable, "-m", "autoswitch", "admin", "get-sync-state-set", "--controller", spec,
                            "--timeout-s", timeout_s, *tls], capture_output=True, text=True, timeout=120)
        return r.returncode, [ln for ln in r.stderr.splitlines() if ln.strip()]

    def flags(who: dict, ca: str) -> list[str]:
        return ["--tls-ca", ca, "--tls-cert", who["cert"], "--tls-key", who["key"]]

    # the server's certificate is from a CA we do not trust: at once (well before the 30 s deadline)
    rc, err = cli(tls_cl.spec, *flags(other["admin"], other["admin"]["ca"]))
    assert rc == 1 and len(err) == 1 and "does not verify against --tls-ca (another CA?)" in err[0], err
    # TLS towards a plaintext controller
    rc, err = cli(plain_cl.spec, *flags(ids["admin"], ids["admin"]["ca"]))
    assert rc == 1 and len(err) == 1 and "does not speak TLS" in err[0], err
    # no TLS towards a TLS controller (a forgotten profile): retried (a restart closes sockets
    # too), then said with the hint
    rc, err = cli(tls_cl.spec, timeout_s="3")
    assert rc == 1 and len(err) == 1 and "does it use TLS?" in err[0], err
    # our certificate from a CA the server does not trust
    rc, err = cli(tls_cl.spec, *flags(other["admin"], ids["admin"]["ca"]), timeout_s="3")
    assert rc == 1 and len(err) == 1 and "refuse our certificate" in err[0], err
