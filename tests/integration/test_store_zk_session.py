"""Issue 30, item 5: ZooKeeper clamps a client's session timeout to its own min/maxSessionTimeout,
and our lock lives exactly as long as the session. The store reads back the timeout the server
granted and refuses to work when it is longer than ``lease_ms``: the real fence bound would then
exceed the one the configuration check accepted. Real ZooKeeper servers."""

from __future__ import annotations

import pytest
from autoswitch.controller.store.config import StoreBackendConfig
from autoswitch.controller.store.errors import StoreUnavailable

from tests.procs import free_port

# an optional extra: without it the module is skipped with the reason, never an import error (issue 60)
pytest.importorskip("kazoo", reason="the zookeeper extra is not installed: pip install -e '.[zookeeper]'")
from autoswitch.controller.store.zk import ZkStore  # noqa: E402 - after the extra is known to be there

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


def _server(min_session_ms: int):
    from autoswitch.app.zkserver import ZooKeeperNotInstalled, ZooKeeperServer

    try:
        return ZooKeeperServer([free_port()], min_session_timeout_ms=min_session_ms).start()
    except ZooKeeperNotInstalled as e:
        pytest.skip(str(e))


@pytest.mark.parametrize("min_session_ms, refused", [(200, False), (4000, True)])
def test_a_granted_session_longer_than_the_lease_is_refused(min_session_ms, refused, tmp_path):
    server = _server(min_session_ms)
    store = ZkStore(StoreBackendConfig(url=server.url + "/zk-session", lock_name=tmp_path.name, lease_ms=1000,
                                       heartbeat_ms=200, statement_timeout_ms=800, zk_tick_ms=100))
    try:
        if refused:
            with pytest.raises(StoreUnavailable, match="granted a session timeout of 4000 ms"):
                store.create_schema()
            with pytest.raises(StoreUnavailable, match="granted a session timeout of 4000 ms"):
                store.lock_round("a", 1000, False, 0)
            assert store.negotiated_ms == 4000
        else:
            store.create_schema()
            out = store.lock_round("a", 1000, False, 0)
            assert store.negotiated_ms == 1000 and out.holds
    finally:
        store.close()
        server.stop()
