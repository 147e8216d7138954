"""The ZooKeeper store (Kafka's KafkaController on ZkClient, done with kazoo): the controller's
lock, log and snapshot in znodes under ``<chroot>/<data_center>/<lock_name>`` (the chroot is the
URL's path: ``zookeeper://h1:2181,h2:2181/autoswitch``).

- ``controller``: ephemeral, ``{"version": 1, "controllerId": ..., "timestamp": ...}``; it lives as
  long as its creator's ZooKeeper session. Deleting it by hand forces a re-election.
- ``controller_epoch``: the term. A candidate creates ``controller`` and increments the epoch
  with a conditional set in ONE multi (Kafka does the two separately; together no controller
  node can exist without its own epoch bump).
- every write is a multi that first checks the epoch's version (Kafka's zkVersion fencing) and
  that ``controller`` is still the one this leader created; a deposed leader's multi fails, and
  so does one whose session expired (the ephemeral node went with it).
- ``log/<20-digit index>``: term, CRC32, entry; ``snapshot``: index, term, CRC32, chunk count,
  the state in ``snap/<index>/<k>`` chunks (a znode holds at most ~1 MiB).

Session expiry ends leadership at once: the node stops believing it leads ``lease_ms x 0.9``
after its last confirmed round, before the server can expire a ``lease_ms`` session. Every call
is bounded by ``statement_timeout_ms``."""

from __future__ import annotations

import json
import struct
import time
import zlib
from collections.abc import Callable
from typing import Any

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import KazooException, NodeExistsError, NoNodeError
from kazoo.handlers.threading import KazooTimeoutError

from .base import LogEntry, Snapshot
from .config import StoreBackendConfig
from .errors import Fenced, StoreCorrupt, StoreUnavailable
from .lock import LockOutcome, LockRow

# A multi is one request: it must fit ZooKeeper's jute.maxbuffer (1 MiB by default).
MAX_MULTI_ENTRIES = 500
MAX_MULTI_BYTES = 512 << 10
SNAPSHOT_CHUNK = 512 << 10
MAX_DELETES_PER_MULTI = 1000
_LOG_HEAD = struct.Struct(">QI")        # term, crc32
_SNAP_META = struct.Struct(">QQIi")     # index, term, crc32, chunks


class ZkStore:
    kind = "zookeeper"
    max_batch_entries = MAX_MULTI_ENTRIES
    max_batch_bytes = MAX_MULTI_BYTES

    def __init__(self, cfg: StoreBackendConfig) -> None:
        url = cfg.resolved_url()
        if not url.startswith("zookeeper://"):
            raise ValueError(f"not a ZooKeeper URL: {url!r}")
        self.cfg = cfg
        self.timeout_s = cfg.statement_timeout_ms / 1000
        # zookeeper://h1:2181,h2:2181/chroot: the chroot is a path prefix of ours (kazoo's own
        # chroot needs the node to exist before the client starts)
        hosts, _, chroot = url[len("zookeeper://"):].partition("/")
        secured: dict = {}
        if cfg.credentials_file:
            from kazoo.security import make_digest_acl

            # digest auth, and our znodes readable and writable by that user alone: whoever else
            # reaches ZooKeeper cannot forge log entries or take the lock
            user, password = cfg.credentials()
            secured = {"auth_data": [("digest", f"{user}:{password}")],
                       "default_acl": [make_digest_acl(user, password, all=True)]}
        self.zk = KazooClient(hosts=hosts, timeout=cfg.lease_ms / 1000,
                              connection_retry={"max_tries": -1, "delay": 0.05, "max_delay": 0.5}, **secured)
        base = "/" + "/".join(p for p in (chroot.strip("/"), cfg.data_center, cfg.lock_name) if p)
        self.controller = base + "/controller"
        self.epoch = base + "/controller_epoch"
        self.log = base + "/log"
        self.snap_dir = base + "/snap"
        self.snap_meta = base + "/snapshot"
        self.base = base
        self._started = False
        self._term = 0
        self._epoch_version = -1
        self._last_written = 0
        self._seen = (-1, 0, 0)         # (log's pzxid, snapshot index, last index) of the last full read
        self._wakeup: Callable[[], None] | None = None
        # The session timeout the server granted (it clamps ours to its min/maxSessionTimeout).
        # kazoo keeps it only in a local of its connection handler; the read timeout it returns is
        # two thirds of it. Read back at every (re)connect.
        self.negotiated_ms: int | None = None
        handler = self.zk._connection
        connect = handler._connect

        def _connect(host, hostip, port):
            read_timeout, connect_timeout = connect(host, hostip, port)
            self.negotiated_ms = round(read_timeout * 1.5)
            return read_timeout, connect_timeout

        handler._connect = _connect

    def set_wakeup(self, fn: Callable[[], None]) -> None:
        """Losers watch ``controller`` (as Kafka's do): its deletion wakes the node's lock loop."""
        self._wakeup = fn

    def _on_controller_event(self, _event) -> None:
        if self._wakeup is not None:
            self._wakeup()

    # ---------------------------------------------------------------- plumbing

    def _get(self, async_result):
        try:
            return async_result.get(timeout=self.timeout_s)
        except (NoNodeError, NodeExistsError):
            raise
        except (KazooException, KazooTimeoutError, TimeoutError) as e:
            raise StoreUnavailable(f"zookeeper: {type(e).__name__} {e}") from None

    def _connected(self) -> None:
        if not self._started:
            try:
                self.zk.start(timeout=max(self.timeout_s, 1.0))
            except (KazooTimeoutError, KazooException) as e:
                self.zk.stop()
                raise StoreUnavailable(f"zookeeper: cannot connect ({e})") from None
            self._started = True
        if self.zk.state != KazooState.CONNECTED:
            raise StoreUnavailable(f"zookeeper: {self.zk.state}")
        granted = self.negotiated_ms
        if granted is not None and granted > self.cfg.lease_ms:
            # Our lock lives as long as the session: a longer one makes the real fence bound
            # exceed the one the configuration check accepted (lease_ms + zk_tick_ms), and a
            # paused leader's write could commit after the controllers' holds ran out.
            raise StoreUnavailable(f"zookeeper granted a session timeout of {granted} ms, above lease_ms "
                                   f"{self.cfg.lease_ms}: its minSessionTimeout is longer than our lease (lower "
                                   "it, or raise lease_ms); refusing to use this store", granted_ms=granted)

    def _node(self, path: str) -> tuple[bytes, Any] | None:
        """(data, its ZnodeStat), or None when the node does not exist."""
        try:
            return self._get(self.zk.get_async(path))
        except NoNodeError:
            return None

    def _commit(self, tx) -> list:
        return self._get(tx.commit_async())

    def _fenced_tx(self, me: str):
        if self._epoch_version < 0:
            raise Fenced(f"{me} holds no controller term")
        tx = self.zk.transaction()
        tx.check(self.epoch, self._epoch_version)
        tx.check(self.controller, 0)
        return tx

    def _fenced_commit(self, me: str, term: int, tx) -> list:
        results = self._commit(tx)
        bad = [r for r in results if isinstance(r, Exception)]
        if bad:
            self._epoch_version = -1
            raise Fenced(f"{me} no longer holds the controller in epoch {term} ({type(bad[0]).__name__})", term=term)
        return results

    def create_schema(self) -> None:
        self._connected()
        parent = self.base.rsplit("/", 1)[0]
        if parent and self.cfg.credentials_file:
            from kazoo.security import OPEN_ACL_UNSAFE

            # the shared ancestors stay open (other clusters create theirs beside ours); ours is not
            try:
                self._get(self.zk.ensure_path_async(parent, acl=OPEN_ACL_UNSAFE))
            except NodeExistsError:
                pass
        for path in (self.log, self.snap_dir):
            try:
                self._get(self.zk.ensure_path_async(path))
            except NodeExistsError:
                pass
        for path, value in ((self.epoch, b"0"), (self.snap_meta, b"")):
            try:
                self._get(self.zk.create_async(path, value))
            except NodeExistsError:
                pass

    def close(self) -> None:
        if self._started:
            self.zk.stop()          # ends the session: our controller node goes at once
            self.zk.close()

    # ---------------------------------------------------------------- the lock

    def lock_round(self, me: str, lease_ms: int, observer: bool, sent_at_ms: int) -> LockOutcome:
        self._connected()
        try:       # with a watch: a change of the controller node wakes the lock loop
            got = self._get(self.zk.get_async(self.controller, watch=self._on_controller_event))
        except NoNodeError:
            got = None
        if got is not None:
            data, stat = got
            if stat.ephemeralOwner == self.zk.client_id[0]:
                if self._epoch_version >= 0:
                    return LockOutcome(LockRow(me, lease_ms, self._term, 0, 0), True, sent_at_ms)
                # ours, but our epoch was superseded (a write was fenced): give the node up so
                # that a campaign can run again, instead of blocking everyone while we live
                try:
                    self._get(self.zk.delete_async(self.controller, version=stat.version))
                except NoNodeError:
                    pass
                return LockOutcome(None, False, sent_at_ms)
            return LockOutcome(LockRow(self._owner(data), lease_ms, self._epoch_value(), 0, 0), False, sent_at_ms)
        if observer:
            return LockOutcome(None, False, sent_at_ms)
        value, estat = self._get(self.zk.get_async(self.epoch))
        term = int(value or b"0") + 1
        tx = self.zk.transaction()
        tx.create(self.controller, json.dumps({"version": 1, "controllerId": me,
                                               "timestamp": int(time.time() * 1000)}).encode(), ephemeral=True)
        tx.set_data(self.epoch, str(term).encode(), version=estat.version)
        if any(isinstance(r, Exception) for r in self._commit(tx)):
            got = self._node(self.controller)
            owner = self._owner(got[0]) if got is not None else ""
            return LockOutcome(LockRow(owner, lease_ms, self._epoch_value(), 0, 0), False, sent_at_ms)
        self._term, self._epoch_version = term, estat.version + 1
        self._last_written = self.last_index()
        return LockOutcome(LockRow(me, lease_ms, term, 0, 0), True, sent_at_ms)

    @staticmethod
    def _owner(data: bytes) -> str:
        try:
            return str(json.loads(data)["controllerId"])
        except (ValueError, KeyError, TypeError):
            return ""

    def _epoch_value(self) -> int:
        got = self._node(self.epoch)
        if got is None:
            return 0
        try:
            return int(got[0])
        except ValueError:
            raise StoreCorrupt(f"{self.epoch} holds {got[0][:20]!r}, not a number") from None

    # ---------------------------------------------------------------- the log

    def _key(self, index: int) -> str:
        return f"{self.log}/{index:020d}"

    def append(self, me: str, term: int, first_index: int, datas: list[bytes]) -> None:
        self._connected()
        tx = self._fenced_tx(me)
        for i, d in enumerate(datas):
            tx.create(self._key(first_index + i), _LOG_HEAD.pack(term, zlib.crc32(d)) + d)
        self._fenced_commit(me, term, tx)
        self._last_written = first_index + len(datas) - 1

    def verify(self, me: str, term: int) -> int:
        """A multi of the two fencing checks (ZooKeeper orders it with every write); this leader
        is the only writer while they hold, so the log ends where it last wrote."""
        self._connected()
        self._fenced_commit(me, term, self._fenced_tx(me))
        return self._last_written

    def _indexes(self) -> list[int]:
        return sorted(int(n) for n in self._get(self.zk.get_children_async(self.log)))

    def _snap_index(self) -> int:
        got = self._node(self.snap_meta)
        return _SNAP_META.unpack_from(got[0])[0] if got is not None and len(got[0]) >= _SNAP_META.size else 0

    def last_index(self) -> int:
        self._connected()
        idx = self._indexes()
        return idx[-1] if idx else self._snap_index()

    def read(self, from_index: int, limit: int) -> tuple[int, list[LogEntry]]:
        self._connected()
        got = self._node(self.log)
        pzxid = got[1].pzxid if got is not None else -1
        seen_pzxid, seen_snap, seen_last = self._seen
        if pzxid == seen_pzxid and from_index > seen_last:
            return seen_snap, []        # no child added or removed since we read to the end
        snap = self._snap_index()
        idx = self._indexes()
        want = [i for i in idx if i >= from_index][:limit]
        pending = [(i, self.zk.get_async(self._key(i))) for i in want]
        out: list[LogEntry] = []
        for i, res in pending:
            value, _ = self._get(res)
            if len(value) < _LOG_HEAD.size:
                raise StoreCorrupt(f"log entry {i} is truncated", index=i)
            term, crc = _LOG_HEAD.unpack_from(value)
            data = bytes(value[_LOG_HEAD.size:])
            if zlib.crc32(data) != crc:
                raise StoreCorrupt(f"log entry {i} fails its CRC", index=i)
            if out and i != out[-1].index + 1:
                raise StoreCorrupt(f"log has a hole before entry {i}", index=i)
            out.append(LogEntry(i, term, data))
        end = idx[-1] if idx else snap
        if not want or want[-1] == end:
            self._seen = (pzxid, snap, end)
        return snap, out

    # ---------------------------------------------------------------- snapshots

    def load_snapshot(self) -> Snapshot | None:
        self._connected()
        got = self._node(self.snap_meta)
        if got is None or len(got[0]) < _SNAP_META.size:
            return None
        index, term, crc, chunks = _SNAP_META.unpack_from(got[0])
        parts = [self._get(self.zk.get_async(f"{self.snap_dir}/{index}/{k}")) for k in range(chunks)]
        data = b"".join(v for v, _ in parts)
        if zlib.crc32(data) != crc:
            raise StoreCorrupt(f"snapshot at {index} fails its CRC", index=index)
        return Snapshot(index, term, data)

    def save_snapshot(self, me: str, term: int, index: int, data: bytes) -> None:
        """Chunks first (fenced, under a directory nobody reads yet), then one fenced multi
        points ``snapshot`` at them, then the log behind it and the previous chunks go."""
        self._connected()
        old = self._snap_index()
        chunks = [data[i:i + SNAPSHOT_CHUNK] for i in range(0, len(data), SNAPSHOT_CHUNK)] or [b""]
        for k, chunk in enumerate(chunks):
            tx = self._fenced_tx(me)
            if k == 0:
                tx.create(f"{self.snap_dir}/{index}", b"")
            tx.create(f"{self.snap_dir}/{index}/{k}", chunk)
            self._fenced_commit(me, term, tx)
        tx = self._fenced_tx(me)
        tx.set_data(self.snap_meta, _SNAP_META.pack(index, term, zlib.crc32(data), len(chunks)))
        self._fenced_commit(me, term, tx)
        trash = [self._key(i) for i in self._indexes() if i <= index]
        if old and old != index:
            olds = self._get(self.zk.get_children_async(f"{self.snap_dir}/{old}"))
            trash += [f"{self.snap_dir}/{old}/{c}" for c in olds] + [f"{self.snap_dir}/{old}"]
        for i in range(0, len(trash), MAX_DELETES_PER_MULTI):
            tx = self._fenced_tx(me)
            for path in trash[i:i + MAX_DELETES_PER_MULTI]:
                tx.delete(path)
            self._fenced_commit(me, term, tx)
