"""The ``[store]`` table: where a store backend keeps the controller's lock and log, and its
timings. Every key is documented in docs/operations-backends.md."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

from autoswitch.base.config_check import check_path
from autoswitch.base.errors import ConfigError

# etcd's lessor revokes expired leases from a loop that runs every 500 ms (not configurable).
ETCD_REVOKE_LOOP_MS = 500


@dataclass(frozen=True)
class StoreBackendConfig:
    # backend "sql": a SQLAlchemy URL (sqlite:////var/lib/autoswitch/controller.db,
    # postgresql+psycopg://u:p@host/db, mysql+pymysql://u:p@host/db); backend "etcd":
    # etcd://host:2379[,host:2379...]. Secrets may come from the variable named by url_env.
    url: str = ""
    url_env: str = ""
    # Scope of the lock row and the log: several controller clusters may share one database.
    data_center: str = "default"
    lock_name: str = "autoswitch-controller"
    # The lock's duration: a leader that has not renewed it for this long (judged by the database
    # server's clock) is replaced. The controller's failover time is about this plus one heartbeat.
    lease_ms: int = 3000
    heartbeat_ms: int = 500            # how often the leader renews and the others look at the lock
    poll_ms: int = 50                  # how often a follower reads new log entries
    observer: bool = False             # never competes for the lock (a read-only replica of the state)
    snapshot_every: int = 2000         # the leader writes a snapshot and trims the log after this many entries
    max_batch_entries: int = 512       # entries per log write
    max_batch_bytes: int = 4 << 20
    max_read_entries: int = 1024       # entries per follower read
    statement_timeout_ms: int = 1000   # bound on one store call (connect, lock wait, statement)
    # backend "zookeeper": the servers' tickTime. A session expires at the first tick after its
    # timeout, so a deposed leader's writes are refused up to one tick after lease_ms.
    zk_tick_ms: int = 2000
    # Securing the link to the store (docs/operations-backends.md "Securing the store"). etcd: TLS
    # with a client certificate (all three files); with etcd's --client-cert-auth the certificate's
    # CN is the RBAC user. ZooKeeper: credentials_file holds "user:password" (first line): the
    # controller authenticates with it (digest) and every znode it creates carries a digest ACL for
    # that user alone. SQL: TLS and the database role are the URL's (sslmode, sslrootcert, user).
    tls_ca: str = ""
    tls_cert: str = ""
    tls_key: str = ""
    credentials_file: str = ""

    def validate(self) -> None:
        if self.credentials_file:
            check_path(self.credentials_file, "[store] credentials_file")
        if not self.resolved_url():
            raise ConfigError("[store] url (or url_env naming a set variable) is required for a store backend",
                              key="url")
        if not 500 <= self.lease_ms <= 120_000:
            raise ConfigError("[store] lease_ms must be in [500, 120000]", key="lease_ms")
        if not 50 <= self.heartbeat_ms <= self.lease_ms // 3:
            raise ConfigError("[store] heartbeat_ms must be in [50, lease_ms / 3]: a leader must get two "
                              "renewals through before its lease runs out", key="heartbeat_ms")
        if not 5 <= self.poll_ms <= 10_000:
            raise ConfigError("[store] poll_ms must be in [5, 10000]", key="poll_ms")
        if not 100 <= self.snapshot_every <= 1_000_000:
            raise ConfigError("[store] snapshot_every must be in [100, 1000000]", key="snapshot_every")
        if not 1 <= self.max_batch_entries <= 10_000 or not 1024 <= self.max_batch_bytes <= 64 << 20:
            raise ConfigError("[store] max_batch_entries must be in [1, 10000], max_batch_bytes in [1 KiB, 64 MiB]",
                              key="max_batch_entries")
        if not 1 <= self.max_read_entries <= 100_000:
            raise ConfigError("[store] max_read_entries must be in [1, 100000]", key="max_read_entries")
        if not 100 <= self.statement_timeout_ms <= self.lease_ms:
            raise ConfigError("[store] statement_timeout_ms must be in [100, lease_ms]", key="statement_timeout_ms")
        if not 1 <= self.zk_tick_ms <= 60_000:
            raise ConfigError("[store] zk_tick_ms must be in [1, 60000]", key="zk_tick_ms")
        if self.tls_ca or self.tls_cert or self.tls_key:
            from autoswitch.base.tls import TLSConfig

            if not (self.tls_ca and self.tls_cert and self.tls_key):
                raise ConfigError("[store] tls_ca, tls_cert and tls_key go together", key="tls_ca")
            TLSConfig(ca=self.tls_ca, cert=self.tls_cert, key=self.tls_key).validate(server=True)
        if self.credentials_file:
            self.credentials()
        for key, value in (("data_center", self.data_center), ("lock_name", self.lock_name)):
            if not 1 <= len(value) <= 128:
                raise ConfigError(f"[store] {key} must be 1..128 characters", key=key)

    def credentials(self) -> tuple[str, str]:
        """(user, password) from ``credentials_file``; ConfigError when it does not hold them."""
        try:
            with open(self.credentials_file, encoding="utf-8") as f:
                line = f.readline().strip()
        except OSError as e:
            raise ConfigError(f"[store] credentials_file {self.credentials_file!r} cannot be read: {e.strerror}",
                              key="credentials_file") from None
        user, sep, password = line.partition(":")
        if not sep or not user or not password or len(line) > 1024:
            raise ConfigError(f"[store] credentials_file {self.credentials_file!r} must hold user:password on its "
                              "first line", key="credentials_file")
        return user, password

    def resolved_url(self) -> str:
        return os.environ.get(self.url_env, "") if self.url_env else self.url

    @property
    def etcd_ttl_s(self) -> int:
        """The etcd lease under the leader key: ``lease_ms`` rounded up to whole seconds."""
        return max(1, math.ceil(self.lease_ms / 1000))

    def fence_bound_ms(self, backend: str) -> int:
        """How long after a leader's last renewal the store may still commit its writes when
        nobody takes the lock from it (docs/controller.md, "Store backends", per backend):
        SQL re-checks the expiry in every write's transaction; etcd deletes an expired lease's
        keys from a revoke loop that runs every 500 ms after a TTL of whole seconds; ZooKeeper
        expires a session at the first tick after its timeout."""
        if backend == "etcd":
            return self.etcd_ttl_s * 1000 + ETCD_REVOKE_LOOP_MS
        if backend == "zookeeper":
            return self.lease_ms + self.zk_tick_ms
        return self.lease_ms

    @property
    def idle_in_transaction_ms(self) -> int:
        """How long a SQL transaction may sit idle between its statements before the server ends
        it (PostgreSQL's idle_in_transaction_session_timeout = statement_timeout_ms; MariaDB's
        idle_transaction_timeout counts whole seconds, so it is rounded up). A leader
        paused between its fence (the last statement) and COMMIT keeps its write for this long at
        most; then the server rolls it back and frees the lock row."""
        if self.resolved_url().startswith(("mysql", "mariadb")):
            return math.ceil(self.statement_timeout_ms / 1000) * 1000
        return self.statement_timeout_ms

    def commit_delay_ms(self, backend: str) -> int:
        """How long after the store last judged the lock held a write may still commit: for SQL
        the fence is the transaction's last statement, then an idle gap the server bounds
        (``idle_in_transaction_ms``) and the COMMIT (one statement); etcd and ZooKeeper commit
        within one statement of their check."""
        if backend in ("etcd", "zookeeper"):
            return self.statement_timeout_ms
        return self.idle_in_transaction_ms + self.statement_timeout_ms
