"""What a store backend provides to StoreLogNode (controller/store/node.py). Blocking calls, run
on the node's worker threads; each is one atomic operation of the store (a transaction, a Txn).
Writes are fenced by (owner, term) inside that operation: Fenced means nothing was written,
StoreUnavailable means the outcome is unknown."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from autoswitch.base.errors import ConfigError

from .lock import LockOutcome


# The records every backend reads and writes. Here, not in a backend: the etcd and ZooKeeper
# backends must not load SQLAlchemy (the `sql` extra) to start.
@dataclass(frozen=True)
class LogEntry:
    index: int
    term: int
    data: bytes


@dataclass(frozen=True)
class Snapshot:
    index: int
    term: int
    data: bytes


class Store(Protocol):
    @property
    def kind(self) -> str: ...  # "sqlite", "postgresql", "mysql", "etcd", "zookeeper": the log lines' backend field
    max_batch_entries: int     # the store's own bound on entries per write
    max_batch_bytes: int

    def create_schema(self) -> None: ...
    def close(self) -> None: ...
    # A store that can tell when the lock changes (a ZooKeeper watch) calls ``fn`` then, from any
    # thread; the others never call it and are looked at every heartbeat_ms.
    def set_wakeup(self, fn: Callable[[], None]) -> None: ...
    def lock_round(self, me: str, lease_ms: int, observer: bool, sent_at_ms: int) -> LockOutcome: ...
    def append(self, me: str, term: int, first_index: int, datas: list[bytes]) -> None: ...
    def verify(self, me: str, term: int) -> int: ...
    def last_index(self) -> int: ...
    def read(self, from_index: int, limit: int) -> tuple[int, list[LogEntry]]: ...
    def load_snapshot(self) -> Snapshot | None: ...
    def save_snapshot(self, me: str, term: int, index: int, data: bytes) -> None: ...


# backend -> (the module its store needs, the pyproject extra that installs it)
_NEEDS = {"sql": ("sqlalchemy", "sql"), "zookeeper": ("kazoo", "zookeeper")}


def require_backend(backend: str) -> None:
    """ConfigError naming the extra to install when ``backend``'s client library is missing
    (the start would otherwise fail on a bare ModuleNotFoundError)."""
    import importlib.util

    module, extra = _NEEDS.get(backend, (None, None))
    if module is None:
        return
    try:
        found = importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        raise ConfigError(f"the {backend} backend needs {module}, from the {extra!r} extra: "
                          f"pip install 'autoswitch[{extra}]' (in a checkout: .venv/bin/pip install -e '.[{extra}]')",
                          key="backend", extra=extra)


def open_store(backend: str, cfg) -> Store:
    """The store of ``backend`` ("sql", "etcd" or "zookeeper") for a validated StoreBackendConfig."""
    require_backend(backend)
    if backend == "etcd":
        from .etcd import EtcdStore

        return EtcdStore(cfg)
    if backend == "zookeeper":
        from .zk import ZkStore

        return ZkStore(cfg)
    from .sql import SqlStore

    return SqlStore(cfg)
