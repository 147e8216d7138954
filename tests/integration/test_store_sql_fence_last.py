"""Issue 30, item 5: a SQL store's fence is the last statement of a write, and the database bounds
the transaction's life. Against a real PostgreSQL and MariaDB.

Before, the lock check was the transaction's *first* statement: a leader paused right after it
kept the transaction, and the lock row it had updated, open; nobody could take the lock over, and
its write committed whenever it resumed — an election decided long ago, committed late. The pause
is injected around the real fence (the database judges the lock by its own clock)."""

from __future__ import annotations

import threading
import time

import pytest
from autoswitch.controller.store.config import StoreBackendConfig
from autoswitch.controller.store.errors import Fenced, StoreUnavailable

# an optional extra: without it the module is skipped with the reason, never an import error (issue 60)
pytest.importorskip("sqlalchemy", reason="the sql extra is not installed: pip install -e '.[sql]'")
from autoswitch.controller.store.sql import SqlStore  # noqa: E402 - after the extra is known to be there

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

LEASE_MS = 500


def _store(url: str, name: str) -> SqlStore:
    cfg = StoreBackendConfig(url=url, lock_name=name, lease_ms=LEASE_MS, heartbeat_ms=100, statement_timeout_ms=250)
    cfg.validate()
    st = SqlStore(cfg)
    st.create_schema()
    return st


def _take(st: SqlStore, me: str, within_s: float = 20.0) -> int:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            out = st.lock_round(me, LEASE_MS, False, 0)
        except StoreUnavailable:        # a lock wait ran into lock_timeout: the row is held
            out = None
        if out is not None and out.holds:
            assert out.row is not None
            return out.row.term
        time.sleep(0.05)
    raise AssertionError(f"{me} did not get the lock within {within_s} s")


@pytest.mark.parametrize("backend", ["postgresql", "mariadb"])
def test_a_leader_paused_after_its_fence_cannot_commit_late(backend, store_url, tmp_path):
    a, b = _store(store_url, f"late-{tmp_path.name}"), _store(store_url, f"late-{tmp_path.name}")
    try:
        term = _take(a, "a")
        real_fence = a._fence
        paused = threading.Event()
        pause_s = (a.cfg.idle_in_transaction_ms + LEASE_MS + 500) / 1000

        def fence_then_pause(conn, me, t):
            real_fence(conn, me, t)
            paused.set()
            time.sleep(pause_s)                 # "SIGSTOP" between the fence and COMMIT

        a._fence = fence_then_pause            # type: ignore[method-assign]
        outcome: list[BaseException | None] = []

        def write() -> None:
            try:
                a.append("a", term, 1, [b"decided-long-ago"])
                outcome.append(None)
            except (Fenced, StoreUnavailable) as e:
                outcome.append(e)

        th = threading.Thread(target=write)
        th.start()
        assert paused.wait(10)
        # the server ends the paused transaction: b takes the lock while a is still paused
        t_b = _take(b, "b")
        assert th.is_alive(), "b took over only after a resumed: the paused transaction held the lock row"
        th.join(30)
        assert outcome and outcome[0] is not None, "the paused leader's write committed after its lock was taken"
        t_b = _take(b, "b")                    # renewed: a's pause outlasted b's first lease
        b.append("b", t_b, 1, [b"the-new-leader"])
        _, entries = b.read(1, 10)
        assert [e.data for e in entries] == [b"the-new-leader"]
    finally:
        a.close()
        b.close()


@pytest.mark.parametrize("backend", ["postgresql", "mariadb"])
def test_a_leader_paused_before_its_fence_finds_the_lock_expired(backend, store_url, tmp_path):
    a = _store(store_url, f"early-{tmp_path.name}")
    try:
        term = _take(a, "a")
        real_fence = a._fence

        def pause_then_fence(conn, me, t):
            time.sleep((LEASE_MS + 300) / 1000)    # "SIGSTOP" before the fence: the lock expires
            real_fence(conn, me, t)

        a._fence = pause_then_fence            # type: ignore[method-assign]
        with pytest.raises((Fenced, StoreUnavailable)):
            a.append("a", term, 1, [b"stale"])
        assert a.read(1, 10)[1] == []
    finally:
        a.close()

