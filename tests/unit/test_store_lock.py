"""The store backends' leader lock (controller/store/lock.py, sans-IO) and their config checks."""

from __future__ import annotations

import pytest
from autoswitch.controller.config import ControllerConfig
from autoswitch.controller.store.config import StoreBackendConfig
from autoswitch.controller.store.lock import (
    LEASE_MARGIN_FRACTION,
    LeaderLease,
    LockOutcome,
    LockRow,
    SilenceWatch,
    Step,
    decide,
)

from autoswitch.base.errors import ConfigError


def row(owner="a", term=1, td=0, modified=1000, duration=3000) -> LockRow:
    return LockRow(owner, duration, term, td, modified)


def test_decide_follows_sofaregistry():
    assert decide(None, "a", 0, observer=False) is Step.COMPETE_INSERT
    assert decide(row("a"), "a", 2000, observer=False) is Step.RENEW
    assert decide(row("b"), "a", 2000, observer=False) is Step.FOLLOW
    assert decide(row("b"), "a", 4001, observer=False) is Step.COMPETE_UPDATE    # expired by the db clock
    assert decide(row("b"), "a", 4000, observer=False) is Step.FOLLOW            # the last millisecond still holds
    assert decide(row("a"), "a", 4001, observer=False) is Step.COMPETE_UPDATE    # even our own expired lock
    assert decide(None, "a", 0, observer=True) is Step.FOLLOW
    assert decide(row("b"), "a", 10**9, observer=True) is Step.FOLLOW


def test_lease_belief_ends_before_the_store_can_hand_the_lock_over():
    lease = LeaderLease("a", 3000)
    became, stopped = lease.observe(LockOutcome(row("a", term=4), True, sent_at_ms=10_000))
    assert (became, stopped) == (True, False)
    end = 10_000 + int(3000 * (1 - LEASE_MARGIN_FRACTION))
    assert lease.leading(end - 1) == 4
    # the store judged the renewal at or after sent_at: the lock is ours until >= sent_at + 3000
    assert lease.leading(end) == 0 and end < 10_000 + 3000
    assert lease.expire(end) and not lease.expire(end)


def test_lease_renewal_extends_and_loss_stops():
    lease = LeaderLease("a", 1000)
    lease.observe(LockOutcome(row("a", term=2), True, 0))
    lease.observe(LockOutcome(row("a", term=2, td=1), True, 500))
    assert lease.leading(1300) == 2                    # renewed at 500: good until 1400
    became, stopped = lease.observe(LockOutcome(row("b", term=3), False, 600))
    assert (became, stopped) == (False, True)
    assert lease.leading(601) == 0 and lease.owner == "b" and lease.term == 3


def test_a_new_term_is_a_new_leadership():
    lease = LeaderLease("a", 1000)
    lease.observe(LockOutcome(row("a", term=2), True, 0))
    became, stopped = lease.observe(LockOutcome(row("a", term=3), True, 100))
    assert became and stopped          # term 2's writes are fenced now: everything restarts in term 3


@pytest.mark.parametrize(("values", "key"), [
    ({}, "url"),
    ({"url": "sqlite:///x.db", "lease_ms": 100}, "lease_ms"),
    ({"url": "sqlite:///x.db", "heartbeat_ms": 2000}, "heartbeat_ms"),
    ({"url": "sqlite:///x.db", "statement_timeout_ms": 5000}, "statement_timeout_ms"),
    ({"url": "sqlite:///x.db", "lock_name": ""}, "lock_name"),
])
def test_store_config_bounds(values, key):
    with pytest.raises(ConfigError) as e:
        StoreBackendConfig(**values).validate()
    assert e.value.details.get("key") == key


def test_url_from_the_environment(monkeypatch):
    monkeypatch.setenv("AS_TEST_DB", "postgresql+psycopg://u@h/db")
    assert StoreBackendConfig(url_env="AS_TEST_DB").resolved_url() == "postgresql+psycopg://u@h/db"


def _cfg(**kw) -> ControllerConfig:
    return ControllerConfig(node_id="n1", peers={"n1": "127.0.0.1:1"}, data_dir="/tmp/x", **kw)


def test_backend_choice_is_checked():
    _cfg(backend="sql", store={"url": "sqlite:////tmp/x.db"}).validate()
    with pytest.raises(ConfigError, match="backend must be one of"):
        _cfg(backend="zookeper").validate()
    with pytest.raises(ConfigError, match=r"\[store\] table needs"):
        _cfg(store={"url": "sqlite:////tmp/x.db"}).validate()
    with pytest.raises(ConfigError, match="static"):
        _cfg(backend="sql", store={"url": "sqlite:////tmp/x.db"}, raft_peers={"n1": "127.0.0.1:2"}).validate()
    with pytest.raises(ConfigError, match="bad \\[store\\]"):
        _cfg(backend="sql", store={"url": "sqlite:////tmp/x.db", "nope": 1}).validate()


def test_etcd_backend_needs_an_etcd_url():
    _cfg(backend="etcd", store={"url": "etcd://127.0.0.1:2379", "lease_ms": 3000}).validate()
    _cfg(backend="etcd", store={"url": "etcd://127.0.0.1:2379", "lease_ms": 1500}).validate()   # TTL 2 s
    with pytest.raises(ConfigError, match="etcd://"):
        _cfg(backend="etcd", store={"url": "sqlite:////tmp/x.db"}).validate()
    with pytest.raises(ConfigError, match="not etcd://"):
        _cfg(backend="sql", store={"url": "etcd://127.0.0.1:2379"}).validate()


def test_fence_bound_per_backend():
    """How long a store may still take a silent leader's write: SQL judges the expiry in the
    write itself, etcd revokes whole-second leases from a 500 ms loop, ZooKeeper expires a
    session at the tick after its timeout."""
    cfg = StoreBackendConfig(url="x", lease_ms=1200, zk_tick_ms=100)
    assert cfg.fence_bound_ms("sql") == 1200
    assert cfg.fence_bound_ms("etcd") == 2500
    assert cfg.fence_bound_ms("zookeeper") == 1300
    # the same lease fits a SQL store's check and not etcd's
    sm = {"heartbeat_timeout_ms": "2000"}
    store = {"lease_ms": 1200, "heartbeat_ms": 300, "statement_timeout_ms": 300}
    _cfg(backend="sql", store={"url": "sqlite:////tmp/x.db", **store}, sm=sm).validate()
    with pytest.raises(ConfigError, match="etcd fence bound \\(2500 ms"):
        _cfg(backend="etcd", store={"url": "etcd://127.0.0.1:2379", **store}, sm=sm).validate()
    with pytest.raises(ConfigError, match="zookeeper fence bound"):
        _cfg(backend="zookeeper", store={"url": "zookeeper://127.0.0.1:2181/a", **store, "zk_tick_ms": 400,
                                         "statement_timeout_ms": 500},
             sm=sm).validate()


def test_store_lease_must_fit_the_heartbeat_timeout():
    with pytest.raises(ConfigError, match="must not exceed heartbeat_timeout_ms"):
        _cfg(backend="sql", store={"url": "sqlite:////tmp/x.db", "lease_ms": 1500, "heartbeat_ms": 300},
             sm={"heartbeat_timeout_ms": "2000"}).validate()
    _cfg(backend="sql", store={"url": "sqlite:////tmp/x.db", "lease_ms": 1000, "heartbeat_ms": 250,
                               "statement_timeout_ms": 500},
         sm={"heartbeat_timeout_ms": "2000"}).validate()


def test_the_store_url_password_is_never_shown():
    cfg = _cfg(backend="sql", store={"url": "postgresql+psycopg://autoswitch:s3cret@db:5432/x"})
    view = cfg.runtime_view()["store"]
    assert "s3cret" not in view and "autoswitch:***@db:5432/x" in view


def test_silence_watch_counts_from_the_read_that_returned_the_renewal():
    w = SilenceWatch(lease_ms=1000)
    assert not w.observe(7, 10, returned_at_ms=5_000)       # first sight starts the count
    assert not w.observe(7, 10, returned_at_ms=6_000)       # exactly lease_ms: not yet
    assert w.observe(7, 10, returned_at_ms=6_001)
    assert not w.observe(7, 11, returned_at_ms=6_002)       # a renewal landed: count again
    assert not w.observe(7, 11, returned_at_ms=7_002)
    assert not w.observe(9, 11, returned_at_ms=8_500)       # a new leadership (create revision)
    assert w.observe(9, 11, returned_at_ms=9_501)
    w.reset()
    assert not w.observe(9, 11, returned_at_ms=20_000)


def test_the_commit_delay_counts_the_idle_gap_and_the_commit():
    """Issue 30 item 5: a SQL write commits at most an idle gap (bounded by the server) and a COMMIT
    after its fence, the transaction's last statement."""
    pg = StoreBackendConfig(url="postgresql+psycopg://x/y", lease_ms=600, statement_timeout_ms=300)
    assert pg.idle_in_transaction_ms == 300 and pg.commit_delay_ms("sql") == 600
    maria = StoreBackendConfig(url="mariadb+pymysql://x/y", lease_ms=600, statement_timeout_ms=300)
    assert maria.idle_in_transaction_ms == 1000 and maria.commit_delay_ms("sql") == 1300   # whole seconds
    etcd = StoreBackendConfig(url="etcd://h:1", lease_ms=1000, statement_timeout_ms=300)
    assert etcd.commit_delay_ms("etcd") == 300
