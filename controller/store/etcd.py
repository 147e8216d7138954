"""The etcd store: the controller's lock, log and snapshot in etcd through its own v3 gRPC API
(the subset in proto/autoswitch/proto/etcd.proto), blocking calls for the node's worker threads.

Keys under ``/autoswitch/<data_center>/<lock_name>/``: ``leader`` (value: the owner's node id,
attached to an etcd lease of ``ceil(lease_ms / 1000)`` s), ``log/<20-digit index>`` (value: term,
CRC32, entry) and ``snapshot`` (index, term, CRC32, state). The term, the fencing token, is the
leader key's create revision: a new campaign creates the key anew, so every leadership has its
own. Every write is one Txn comparing the leader key's value and create revision with the
writer's (and that the first new log key does not exist yet); a deposed leader's Txn fails.
The key goes when etcd expires its lease (etcd's clock), or when a follower has read the same
renewal for longer than ``lease_ms`` of its own clock and deletes it (``SilenceWatch``)."""

from __future__ import annotations

import struct
import time
import zlib

import grpc

from autoswitch.base.log import get_logger
from autoswitch.proto import etcd_pb2 as pb
from autoswitch.proto import etcd_pb2_grpc as pbg

from .base import LogEntry, Snapshot
from .config import StoreBackendConfig
from .errors import Fenced, StoreCorrupt, StoreUnavailable
from .lock import LockOutcome, LockRow, SilenceWatch

# etcd refuses a Txn of more than --max-txn-ops (default 128) operations and requests larger than
# --max-request-bytes (default 1.5 MiB): batches stay below both.
_log = get_logger("controller.store.etcd")
MAX_TXN_ENTRIES = 100
MAX_TXN_BYTES = 1 << 20
_LOG_HEAD = struct.Struct(">QI")        # term, crc32
_SNAP_HEAD = struct.Struct(">QQI")      # index, term, crc32


def _prefix_end(prefix: bytes) -> bytes:
    return prefix[:-1] + bytes([prefix[-1] + 1])


class EtcdStore:
    kind = "etcd"
    max_batch_entries = MAX_TXN_ENTRIES
    max_batch_bytes = MAX_TXN_BYTES

    def __init__(self, cfg: StoreBackendConfig) -> None:
        self.cfg = cfg
        url = cfg.resolved_url()
        if not url.startswith("etcd://"):
            raise ValueError(f"not an etcd URL: {url!r}")
        endpoints = url[len("etcd://"):].split(",")
        # one endpoint per channel would need our own failover; grpc's round robin over the list does it
        target = endpoints[0] if len(endpoints) == 1 else "ipv4:" + ",".join(endpoints)
        options = [("grpc.lb_policy_name", "round_robin")]
        if cfg.tls_ca:
            # TLS with our client certificate (etcd --client-cert-auth: its CN is our RBAC user)
            creds = grpc.ssl_channel_credentials(
                root_certificates=open(cfg.tls_ca, "rb").read(), private_key=open(cfg.tls_key, "rb").read(),
                certificate_chain=open(cfg.tls_cert, "rb").read())
            self.channel = grpc.secure_channel(target, creds, options=options)
        else:
            self.channel = grpc.insecure_channel(target, options=options)
        self.kv = pbg.KVStub(self.channel)
        self.lease = pbg.LeaseStub(self.channel)
        base = f"/autoswitch/{cfg.data_center}/{cfg.lock_name}/".encode()
        self.leader_key = base + b"leader"
        self.log_prefix = base + b"log/"
        self.snap_key = base + b"snapshot"
        self.timeout_s = cfg.statement_timeout_ms / 1000
        self.ttl_s = cfg.etcd_ttl_s
        self._lease_id = 0
        self._silence = SilenceWatch(cfg.lease_ms)

    def _key(self, index: int) -> bytes:
        return self.log_prefix + b"%020d" % index

    def _call(self, fn, req):
        try:
            return fn(req, timeout=self.timeout_s)
        except grpc.RpcError as e:
            raise StoreUnavailable(f"etcd: {e.code().name} {e.details()}") from None

    def set_wakeup(self, fn) -> None:
        """Nothing here tells us when the lock changes: the node looks every heartbeat_ms."""

    def create_schema(self) -> None:
        """Nothing to create: keys appear with their first write."""

    def close(self) -> None:
        if self._lease_id:
            try:
                self.lease.LeaseRevoke(pb.LeaseRevokeRequest(ID=self._lease_id), timeout=self.timeout_s)
            except grpc.RpcError:
                pass            # it expires by itself
        self.channel.close()

    # ---------------------------------------------------------------- the lock

    def _fence(self, me: str, term: int) -> list[pb.Compare]:
        return [pb.Compare(result=pb.Compare.EQUAL, target=pb.Compare.VALUE, key=self.leader_key, value=me.encode()),
                pb.Compare(result=pb.Compare.EQUAL, target=pb.Compare.CREATE, key=self.leader_key,
                           create_revision=term)]

    def lock_round(self, me: str, lease_ms: int, observer: bool, sent_at_ms: int) -> LockOutcome:
        r = self._call(self.kv.Range, pb.RangeRequest(key=self.leader_key))
        kv = r.kvs[0] if r.kvs else None
        if kv is not None and kv.value == me.encode() and self._lease_id and kv.lease == self._lease_id:
            self._silence.reset()
            holds = self._renew(me, kv.create_revision) and self._keep_alive()
            return LockOutcome(LockRow(me, lease_ms, kv.create_revision, 0, 0), holds, sent_at_ms)
        if kv is not None and not observer and self._silence.observe(
                kv.create_revision, kv.mod_revision, self._clock_ms()):
            self._remove_silent(kv)
            kv = None
        if kv is not None or observer:
            owner = kv.value.decode(errors="replace") if kv is not None else ""
            return LockOutcome(LockRow(owner, lease_ms, kv.create_revision, 0, 0) if kv is not None else None,
                               False, sent_at_ms)
        self._silence.reset()
        return self._campaign(me, lease_ms, sent_at_ms)

    def _renew(self, me: str, term: int) -> bool:
        """The leader's renewal others can see: rewrite the leader key (same value and lease; its
        mod revision moves, its create revision, the term, stays), fenced like every write."""
        t = self._call(self.kv.Txn, pb.TxnRequest(
            compare=self._fence(me, term),
            success=[pb.RequestOp(request_put=pb.PutRequest(key=self.leader_key, value=me.encode(),
                                                            lease=self._lease_id))]))
        return t.succeeded

    def _remove_silent(self, kv: pb.KeyValue) -> None:
        """Take the key of a leader that stopped renewing, without waiting for etcd to revoke its
        lease (up to 500 ms after the TTL: etcd's revoke loop), if it still has not renewed."""
        t = self._call(self.kv.Txn, pb.TxnRequest(
            compare=[pb.Compare(result=pb.Compare.EQUAL, target=pb.Compare.MOD, key=self.leader_key,
                                mod_revision=kv.mod_revision)],
            success=[pb.RequestOp(request_delete_range=pb.DeleteRangeRequest(key=self.leader_key))]))
        if t.succeeded:
            _log.warning("etcd_silent_leader_removed", owner=kv.value.decode(errors="replace"),
                         term=kv.create_revision, silent_ms=self.cfg.lease_ms)
            self._revoke(kv.lease)      # its keep-alives fail from now on
        self._silence.reset()

    def _clock_ms(self) -> int:
        return int(time.monotonic() * 1000)

    def _keep_alive(self) -> bool:
        try:
            replies = self.lease.LeaseKeepAlive(iter([pb.LeaseKeepAliveRequest(ID=self._lease_id)]),
                                                timeout=self.timeout_s)
            ttl = next(iter(replies)).TTL
        except (grpc.RpcError, StopIteration) as e:
            raise StoreUnavailable(f"etcd keep-alive: {e}") from None
        if ttl <= 0:                 # the lease expired: the leader key went with it
            self._lease_id = 0
            return False
        return True

    def _campaign(self, me: str, lease_ms: int, sent_at_ms: int) -> LockOutcome:
        g = self._call(self.lease.LeaseGrant, pb.LeaseGrantRequest(TTL=self.ttl_s))
        if g.error or g.TTL > self.ttl_s:
            # etcd raised the TTL (its minimum is 1.5 x its election timeout): leading on it would
            # let a paused leader's write land later than lease_ms allows (controller/config.py)
            self._revoke(g.ID)
            raise StoreUnavailable(f"etcd granted a {g.TTL} s lease for {self.ttl_s} s ({g.error}): "
                                   "raise [store] lease_ms or lower etcd's --election-timeout")
        t = self._call(self.kv.Txn, pb.TxnRequest(
            compare=[pb.Compare(result=pb.Compare.EQUAL, target=pb.Compare.CREATE, key=self.leader_key,
                                create_revision=0)],
            success=[pb.RequestOp(request_put=pb.PutRequest(key=self.leader_key, value=me.encode(), lease=g.ID))],
            failure=[pb.RequestOp(request_range=pb.RangeRequest(key=self.leader_key))]))
        if t.succeeded:
            self._lease_id = g.ID
            return LockOutcome(LockRow(me, lease_ms, t.header.revision, 0, 0), True, sent_at_ms)
        self._revoke(g.ID)
        kvs = t.responses[0].response_range.kvs if t.responses else []
        row = LockRow(kvs[0].value.decode(errors="replace"), lease_ms, kvs[0].create_revision, 0, 0) if kvs else None
        return LockOutcome(row, False, sent_at_ms)

    def _revoke(self, lease_id: int) -> None:
        try:
            self.lease.LeaseRevoke(pb.LeaseRevokeRequest(ID=lease_id), timeout=self.timeout_s)
        except grpc.RpcError:
            pass

    # ---------------------------------------------------------------- the log

    def append(self, me: str, term: int, first_index: int, datas: list[bytes]) -> None:
        puts = [pb.RequestOp(request_put=pb.PutRequest(
            key=self._key(first_index + i), value=_LOG_HEAD.pack(term, zlib.crc32(d)) + d)) for i, d in enumerate(datas)]
        t = self._call(self.kv.Txn, pb.TxnRequest(
            compare=[*self._fence(me, term), pb.Compare(result=pb.Compare.EQUAL, target=pb.Compare.CREATE,
                                                        key=self._key(first_index), create_revision=0)],
            success=puts))
        if not t.succeeded:
            raise Fenced(f"{me} no longer holds the controller lock in term {term}", term=term)

    def _last_ops(self) -> list[pb.RequestOp]:
        return [pb.RequestOp(request_range=pb.RangeRequest(
                    key=self.log_prefix, range_end=_prefix_end(self.log_prefix), limit=1, keys_only=True,
                    sort_order=pb.RangeRequest.DESCEND, sort_target=pb.RangeRequest.KEY)),
                pb.RequestOp(request_range=pb.RangeRequest(key=self.snap_key))]

    def _last_of(self, responses) -> int:
        logs, snaps = responses[0].response_range.kvs, responses[1].response_range.kvs
        if logs:
            return int(logs[0].key[len(self.log_prefix):])
        return _SNAP_HEAD.unpack_from(snaps[0].value)[0] if snaps else 0

    def verify(self, me: str, term: int) -> int:
        t = self._call(self.kv.Txn, pb.TxnRequest(compare=self._fence(me, term), success=self._last_ops()))
        if not t.succeeded:
            raise Fenced(f"{me} no longer holds the controller lock in term {term}", term=term)
        return self._last_of(t.responses)

    def last_index(self) -> int:
        return self._last_of(self._call(self.kv.Txn, pb.TxnRequest(success=self._last_ops())).responses)

    def read(self, from_index: int, limit: int) -> tuple[int, list[LogEntry]]:
        t = self._call(self.kv.Txn, pb.TxnRequest(success=[
            pb.RequestOp(request_range=pb.RangeRequest(key=self.snap_key, keys_only=False)),
            pb.RequestOp(request_range=pb.RangeRequest(
                key=self._key(from_index), range_end=_prefix_end(self.log_prefix), limit=limit,
                sort_order=pb.RangeRequest.ASCEND, sort_target=pb.RangeRequest.KEY))]))
        snaps = t.responses[0].response_range.kvs
        snap = _SNAP_HEAD.unpack_from(snaps[0].value)[0] if snaps else 0
        out: list[LogEntry] = []
        for kv in t.responses[1].response_range.kvs:
            index = int(kv.key[len(self.log_prefix):])
            if len(kv.value) < _LOG_HEAD.size:
                raise StoreCorrupt(f"log entry {index} is truncated", index=index)
            term, crc = _LOG_HEAD.unpack_from(kv.value)
            data = bytes(kv.value[_LOG_HEAD.size:])
            if zlib.crc32(data) != crc:
                raise StoreCorrupt(f"log entry {index} fails its CRC", index=index)
            if out and index != out[-1].index + 1:
                raise StoreCorrupt(f"log has a hole before entry {index}", index=index)
            out.append(LogEntry(index, term, data))
        return snap, out

    # ---------------------------------------------------------------- snapshots

    def load_snapshot(self) -> Snapshot | None:
        r = self._call(self.kv.Range, pb.RangeRequest(key=self.snap_key))
        if not r.kvs:
            return None
        value = r.kvs[0].value
        if len(value) < _SNAP_HEAD.size:
            raise StoreCorrupt("snapshot is truncated")
        index, term, crc = _SNAP_HEAD.unpack_from(value)
        data = bytes(value[_SNAP_HEAD.size:])
        if zlib.crc32(data) != crc:
            raise StoreCorrupt(f"snapshot at {index} fails its CRC", index=index)
        return Snapshot(index, term, data)

    def save_snapshot(self, me: str, term: int, index: int, data: bytes) -> None:
        t = self._call(self.kv.Txn, pb.TxnRequest(compare=self._fence(me, term), success=[
            pb.RequestOp(request_put=pb.PutRequest(key=self.snap_key,
                                                   value=_SNAP_HEAD.pack(index, term, zlib.crc32(data)) + data)),
            pb.RequestOp(request_delete_range=pb.DeleteRangeRequest(key=self.log_prefix,
                                                                    range_end=self._key(index + 1)))]))
        if not t.succeeded:
            raise Fenced(f"{me} no longer holds the controller lock in term {term}", term=term)
