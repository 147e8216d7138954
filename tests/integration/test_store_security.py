"""The controller's links to its store are secured (issue 29): whoever can reach ZooKeeper or etcd
must not be able to forge log entries or take the lock. Real servers, the session's or our own."""

from __future__ import annotations

import asyncio
import time

import pytest
from autoswitch.controller.raft.membership import Member, Membership
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
