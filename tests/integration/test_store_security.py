"""The controller's links to its store are secured (issue 29): whoever can reach ZooKeeper or etcd
must not be able to forge log entries or take the lock. Real servers, the session's or our own."""

from __future__ import annotations

import asyncio
import time

import pytest
from autoswitch.controller.consensus.membership import Member, Membership
from autoswitch.controller.store.base import open_store
from autoswitch.controller.store.config import StoreBackendConfig
from autoswitch.controller.store.node import StoreLogNode

from tests.integration.test_store_fencing import Recorder

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]


def _node(nid: str, cfg: StoreBackendConfig, backend: str) -> StoreLogNode:
    members = Membership({n: Member(f"127.0.0.1:{p}", "") for n, p in (("a", 1), ("b", 2))}, {})
    return StoreLogNode(nid, {"a": "127.0.0.1:1", "b": "127.0.0.1:2"}, Recorder(), cfg, open_store(backend, cfg),
                        members)


async def _until(pred, what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, what
        await asyncio.sleep(0.01)


def _leads_and_writes(url: str, lock_name: str) -> None:
    """A SQL store node on ``url`` takes the lock and commits an entry (the link works)."""
    cfg = StoreBackendConfig(url=url, lock_name=lock_name, lease_ms=1000, heartbeat_ms=100, poll_ms=10)
    cfg.validate()

    async def run() -> None:
        a = _node("a", cfg, "sql")
        try:
            await a.start()
            await _until(lambda: a.is_leader, "a leads over TLS as the dedicated account")
            assert (await a.propose(b"entry", 5.0)) == b"entry"
        finally:
            await a.stop()

    asyncio.run(run())


def test_zookeeper_znodes_carry_a_digest_acl_for_the_controller_alone(zookeeper_url, tmp_path):
    """Without credentials anyone who reached ZooKeeper could delete the controller node (the
    leader's lock) or write log entries. With [store] credentials_file, every znode the controller
    creates has a digest ACL for its user: another client can neither read, write nor delete them."""
    from kazoo.client import KazooClient
    from kazoo.exceptions import NoAuthError

    creds = tmp_path / "zk.creds"
    creds.write_text("autoswitch:s3cret-for-the-test\n")
    cfg = StoreBackendConfig(url=zookeeper_url, lock_name=f"acl-{tmp_path.name}", lease_ms=1000, heartbeat_ms=100,
                             poll_ms=10, credentials_file=str(creds))
    cfg.validate()
    hosts, _, chroot = zookeeper_url[len("zookeeper://"):].partition("/")
    base = f"/{chroot}/default/{cfg.lock_name}"

    async def run() -> None:
        a = _node("a", cfg, "zookeeper")
        try:
            await a.start()
            await _until(lambda: a.is_leader, "a leads")
            assert (await a.propose(b"entry", 5.0)) == b"entry"
            intruder = KazooClient(hosts=hosts)
            intruder.start(timeout=10)
            try:
                for action in (lambda: intruder.delete(f"{base}/controller"),
                               lambda: intruder.set(f"{base}/controller_epoch", b"99"),
                               lambda: intruder.create(f"{base}/log/00000000000000000099", b"forged"),
                               lambda: intruder.get(f"{base}/controller")):
                    with pytest.raises(NoAuthError):
                        action()
            finally:
                intruder.stop()
                intruder.close()
            assert a.is_leader and (await a.propose(b"after", 5.0)) == b"after"
        finally:
            await a.stop()

    asyncio.run(run())


def test_bad_store_credentials_are_config_errors(tmp_path):
    from autoswitch.base.errors import ConfigError

    bad = tmp_path / "bad"
    bad.write_text("no-colon-here\n")
    for kw in ({"credentials_file": str(bad)}, {"credentials_file": str(tmp_path / "missing")},
               {"tls_ca": str(tmp_path / "ca.pem")}):
        with pytest.raises(ConfigError):
            StoreBackendConfig(url="zookeeper://127.0.0.1:1", **kw).validate()


def test_etcd_over_tls_with_rbac_refuses_other_clients(tmp_path):
    """Without TLS anyone who reached etcd could write the controller's keys. A store with
    tls_ca/tls_cert/tls_key talks TLS with its client certificate; etcd (--client-cert-auth, RBAC
    on) takes the certificate's CN as its user, whose role covers /autoswitch/ alone: a plaintext
    client gets nowhere and another certificate of the same CA may not touch the keys."""
    import subprocess

    import grpc

    from autoswitch.app.certs import init_dev_ca
    from autoswitch.app.etcdserver import EtcdServer
    from autoswitch.proto import etcd_pb2, etcd_pb2_grpc
    from tests.procs import free_port

    ids = init_dev_ca(tmp_path / "tls", ["etcd-server", "root", "autoswitch-store", "intruder"])
    srv = EtcdServer(free_port(), free_port(), tls={k: ids["etcd-server"][k] for k in ("ca", "cert", "key")}).start()
    try:
        endpoint = f"https://127.0.0.1:{srv.port}"

        def ctl(*args: str) -> None:
            r = ids["root"]
            out = subprocess.run(["etcdctl", "--endpoints", endpoint, "--cacert", r["ca"], "--cert", r["cert"],
                                  "--key", r["key"], *args], capture_output=True, text=True, timeout=60)
            assert out.returncode == 0, (args, out.stderr)

        ctl("user", "add", "root", "--no-password")
        ctl("role", "add", "autoswitch")
        ctl("role", "grant-permission", "autoswitch", "--prefix=true", "readwrite", "/autoswitch/")
        ctl("user", "add", "autoswitch-store", "--no-password")
        ctl("user", "grant-role", "autoswitch-store", "autoswitch")
        ctl("auth", "enable")

        me = ids["autoswitch-store"]
        cfg = StoreBackendConfig(url=srv.url, lock_name=f"tls-{tmp_path.name}", lease_ms=1000, heartbeat_ms=100,
                                 poll_ms=10, tls_ca=me["ca"], tls_cert=me["cert"], tls_key=me["key"])
        cfg.validate()

        async def run() -> None:
            a = _node("a", cfg, "etcd")
            try:
                await a.start()
                await _until(lambda: a.is_leader, "a leads over TLS")
                assert (await a.propose(b"entry", 5.0)) == b"entry"
            finally:
                await a.stop()

        asyncio.run(run())
        key = f"/autoswitch/default/{cfg.lock_name}/leader".encode()
        with grpc.insecure_channel(f"127.0.0.1:{srv.port}") as ch:
            with pytest.raises(grpc.RpcError):
                etcd_pb2_grpc.KVStub(ch).Range(etcd_pb2.RangeRequest(key=key), timeout=10)
        them = ids["intruder"]
        creds = grpc.ssl_channel_credentials(open(them["ca"], "rb").read(), open(them["key"], "rb").read(),
                                             open(them["cert"], "rb").read())
        with grpc.secure_channel(f"127.0.0.1:{srv.port}", creds) as ch:
            put = etcd_pb2.RequestOp(request_put=etcd_pb2.PutRequest(key=key, value=b"intruder"))
            with pytest.raises(grpc.RpcError) as e:
                etcd_pb2_grpc.KVStub(ch).Txn(etcd_pb2.TxnRequest(success=[put]), timeout=10)
            assert e.value.code() in (grpc.StatusCode.PERMISSION_DENIED, grpc.StatusCode.UNAUTHENTICATED), e.value
    finally:
        srv.stop()


def test_postgresql_over_verified_tls_with_a_dedicated_role(tmp_path):
    """The SQL backend's link is the URL's: TLS with the server verified (sslmode=verify-full,
    sslrootcert) and a role that owns its own database and nothing else. The server refuses that
    role over plaintext; the controller's store works over TLS as that role."""
    import sqlalchemy as sa

    from autoswitch.app.certs import init_dev_ca
    from autoswitch.app.pgserver import USER, PostgresServer
    from tests.procs import free_port

    ids = init_dev_ca(tmp_path / "tls", ["postgres-server"])
    srv = PostgresServer(free_port(), tls={k: ids["postgres-server"][k] for k in ("ca", "cert", "key")}).start()
    try:
        srv.hba(["hostssl all ctl 127.0.0.1/32 scram-sha-256", "host all ctl 127.0.0.1/32 reject",
                 f"host all {USER} 127.0.0.1/32 trust"])
        admin = sa.create_engine(srv.url, isolation_level="AUTOCOMMIT")
        with admin.connect() as c:
            c.execute(sa.text("CREATE ROLE ctl LOGIN PASSWORD 'ctl-pw-for-the-test' NOSUPERUSER NOCREATEDB NOCREATEROLE"))
            c.execute(sa.text("CREATE DATABASE ctldb OWNER ctl"))
        admin.dispose()
        base = f"postgresql+psycopg://ctl:ctl-pw-for-the-test@127.0.0.1:{srv.port}/ctldb"
        ca = ids["postgres-server"]["ca"]
        _leads_and_writes(f"{base}?sslmode=verify-full&sslrootcert={ca}", f"pg-{tmp_path.name}")
        plain = sa.create_engine(f"{base}?sslmode=disable")
        with pytest.raises(sa.exc.OperationalError, match="pg_hba.conf rejects"):
            plain.connect().close()
        plain.dispose()
    finally:
        srv.stop()


def test_mariadb_over_verified_tls_with_a_dedicated_user(tmp_path):
    """The same for MariaDB: the URL's ``ssl_ca`` makes PyMySQL verify the server's certificate and
    name; the controller's account is ``REQUIRE SSL`` with rights on its own database only. The
    server refuses that account over plaintext and a client that trusts another CA; the
    controller's store works over TLS as that account."""
    import sqlalchemy as sa

    from autoswitch.app.certs import init_dev_ca
    from autoswitch.app.mariadbserver import MariaDBServer
    from tests.procs import free_port

    ids = init_dev_ca(tmp_path / "tls", ["mariadb-server"])
    other = init_dev_ca(tmp_path / "other-ca", ["mariadb-server"])
    srv = MariaDBServer(free_port(), tls={k: ids["mariadb-server"][k] for k in ("ca", "cert", "key")}).start()
    try:
        srv.execute("CREATE DATABASE ctldb",
                    "CREATE USER 'ctl'@'127.0.0.1' IDENTIFIED BY 'ctl-pw-for-the-test' REQUIRE SSL",
                    "GRANT ALL PRIVILEGES ON ctldb.* TO 'ctl'@'127.0.0.1'")
        base = f"mysql+pymysql://ctl:ctl-pw-for-the-test@127.0.0.1:{srv.port}/ctldb"
        _leads_and_writes(f"{base}?ssl_ca={ids['mariadb-server']['ca']}", f"my-{tmp_path.name}")
        # PyMySQL takes the TLS a server offers even without ssl_ca (unverified): plaintext must be asked for
        plain = sa.create_engine(base, connect_args={"ssl_disabled": True})
        with pytest.raises(sa.exc.OperationalError, match="Access denied"):
            plain.connect().close()
        plain.dispose()
        wrong_ca = sa.create_engine(f"{base}?ssl_ca={other['mariadb-server']['ca']}")
        with pytest.raises(sa.exc.OperationalError, match="CERTIFICATE_VERIFY_FAILED|certificate verify failed"):
            wrong_ca.connect().close()
        wrong_ca.dispose()
        with sa.create_engine(f"mysql+pymysql://root@127.0.0.1:{srv.port}/mysql").connect() as c:
            # nothing outside its own database: the account cannot read the server's user table
            grants = [r[0] for r in c.execute(sa.text("SHOW GRANTS FOR 'ctl'@'127.0.0.1'"))]
        assert any("`ctldb`.*" in g for g in grants) and not any(" ON *.* TO" in g and "USAGE" not in g for g in grants)
    finally:
        srv.stop()
