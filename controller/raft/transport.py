"""gRPC transport for Raft messages (asyncio adapter; no protocol logic here). The only Raft module
that knows gRPC: the driver (node.py) sees the ``RaftTransport`` interface of transport_api.py.

Inbound: a ``Raft.Stream`` servicer, either on this transport's own ``grpc.aio`` server (bound to
the node's address) or registered on a server the caller owns (``server=``; the owner binds and
starts it).

Per peer: a bounded outbound queue and one long-lived client stream (``Raft.Stream``). The sender
drains the queue into batches (up to ``max_batch_messages`` and ``max_message_bytes``) and writes
them without waiting for any reply, so AppendEntries are pipelined in order. On failure the queue
is cleared (Raft retransmits what matters) and the stream is re-opened with exponential back-off.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import hashlib
from collections.abc import Callable, Iterable

import grpc

from autoswitch.base import supervise
from autoswitch.base.backoff import Backoff
from autoswitch.base.log import RateLimitedLog, get_logger
from autoswitch.base.tls import (
    Listener,
    TLSConfig,
    bind,
    certificate_cluster,
    grpc_channel,
    peer_cluster,
    peer_identity,
)
from autoswitch.base.waits import cancel_and_wait, wait_event
from autoswitch.proto import raft_pb2, raft_pb2_grpc

from .config import RaftConfig
from .errors import RaftConfigError
from .messages import Entry, EntryKind, Message, MsgType, VoteResult

WIRE_VERSION = 1
CONTROLLER_IDENTITY_PREFIX = "controller/"   # certificate CN of controller member <id>


_SCALARS = ("term", "index", "log_term", "commit", "reject", "reject_hint", "reject_term", "seq", "transfer",
            "snap_index", "snap_term", "snap_offset", "snap_total", "snap_crc", "snap_done", "snap_data")
_KINDS = {int(k): k for k in EntryKind}


def to_pb(m: Message) -> raft_pb2.RaftMessage:
    # Only the fields a message uses are set, and entries are built in place (add): a Batch of
    # a 64-entry AppendEntries per follower was a measurable share of the leader's CPU per write.
    p = raft_pb2.RaftMessage(type=int(m.type), to=m.to, vote_result=int(m.vote_result))
    setattr(p, "from", m.frm)       # noqa: B010 - a Python keyword as a field name
    for name in _SCALARS:
        v = getattr(m, name)
        if v:
            setattr(p, name, v)
    if m.voters:
        p.voters.extend(m.voters)
    if m.entries:
        add = p.entries.add
        for e in m.entries:
            if e.kind:
                add(index=e.index, term=e.term, kind=int(e.kind), data=e.data)
            else:
                add(index=e.index, term=e.term, data=e.data)
    return p


def _kind(k: int) -> EntryKind:
    try:
        return _KINDS[k]
    except KeyError:
        raise ValueError(f"unknown entry kind {k}") from None


def from_pb(p: raft_pb2.RaftMessage) -> Message:
    """Raises ValueError on an unknown type/kind/vote result (the caller drops the message)."""
    return Message(
        type=MsgType(p.type), frm=getattr(p, "from"), to=p.to, term=p.term, index=p.index, log_term=p.log_term,
        entries=tuple([Entry(e.index, e.term, e.data, _kind(e.kind)) for e in p.entries]),
        commit=p.commit, reject=p.reject, reject_hint=p.reject_hint, reject_term=p.reject_term,
        vote_result=VoteResult(p.vote_result), seq=p.seq, transfer=p.transfer, snap_index=p.snap_index,
        snap_term=p.snap_term, snap_offset=p.snap_offset, snap_total=p.snap_total, snap_crc=p.snap_crc,
        snap_done=p.snap_done, snap_data=p.snap_data, voters=tuple(p.voters))


def _approx_size(m: Message) -> int:
    return 128 + sum(len(e.data) + 32 for e in m.entries) + len(m.snap_data)


def grpc_options(cfg: RaftConfig) -> list[tuple[str, int]]:
    return [
        ("grpc.max_send_message_length", cfg.max_message_bytes),
        ("grpc.max_receive_message_length", cfg.max_message_bytes),
        ("grpc.initial_reconnect_backoff_ms", cfg.reconnect_min_ms),
        ("grpc.min_reconnect_backoff_ms", cfg.reconnect_min_ms),
        ("grpc.max_reconnect_backoff_ms", cfg.reconnect_max_ms),
        ("grpc.keepalive_time_ms", 10_000),
        ("grpc.keepalive_timeout_ms", 5_000),
        # gRPC shares subchannels between channels to the same target by default, so a new channel
        # inherited the old one's connect back-off (up to max_reconnect_backoff_ms) and a restarted
        # peer stayed unreachable for seconds (election tail in bench.election). Each channel gets its
        # own subchannel; PeerSender paces reconnects itself.
        ("grpc.use_local_subchannel_pool", 1),
    ]


def member_id(cluster: str, node_id: str) -> str:
    """A member's id: derived from the cluster id and its node id (like etcd's member ID)."""
    return hashlib.sha256(f"autoswitch-member\0{cluster}\0{node_id}".encode()).hexdigest()[:16]


class RaftServicer(raft_pb2_grpc.RaftServicer):
    """Server side: checks who is talking, then hands each batch to ``deliver`` (the core steps it).

    A batch must name this cluster, come from a member of the configuration in force here (the
    newest in our log: what the leader sent us) other than us with that member's id, and hold only
    messages from that member to us; anything else is refused before the core sees it (one
    rate-limited log line per peer and reason). Without transport credentials these names are
    claimed, not proven. With mutual TLS (``tls_identities``) the sender must also be the member
    its certificate names (CN ``controller/<node id>``) and the certificate must be bound to our
    cluster (``cert_cluster``, its ``urn:autoswitch:cluster:`` URI): a certificate issued to one
    member cannot speak for another, one issued for a future member cannot speak before it is
    added, and another cluster's ``controller/n1`` under the same CA cannot speak at all."""

    def __init__(self, cluster: str, deliver: Callable[[list[Message]], None], self_id: str = "",
                 members: Iterable[str] = (), tls_identities: bool = False, cert_cluster: str | None = None) -> None:
        self.cluster = cluster
        self.tls_identities = tls_identities
        self.cert_cluster = cert_cluster
        self.deliver = deliver
        self.self_id = self_id
        self.members = {m: member_id(cluster, m) for m in members if m != self_id}
        self.removed: set[str] = set()      # members of an earlier configuration, not of the current one
        self.log = get_logger("raft.transport", node=self_id)
        self._refusals = RateLimitedLog(self.log)
        self.refused: dict[str, int] = {}

    def set_members(self, members: Iterable[str]) -> None:
        new = {m: member_id(self.cluster, m) for m in members if m != self.self_id}
        self.removed = (self.removed | set(self.members)) - set(new)
        self.members = new

    def _admits(self, sender: str, sender_member: str) -> bool:
        """A member of the configuration in force here, and nobody else. A certificate does not
        make a member: only a configuration entry does (issue 29: a certificate made for a future
        member wrote the log of a fresh cluster). The price: a node that missed a membership
        change refuses a leader added meanwhile until it learns the change from a member it knows
        or is rejoined with ``admin recover-member`` (docs/security.md; the refusal names it)."""
        if sender_member != member_id(self.cluster, sender) or sender == self.self_id:
            return False
        return sender in self.members

    def _refuse(self, peer: str, reason: str, **fields) -> None:
        self.refused[reason] = self.refused.get(reason, 0) + 1
        # keyed by host: every new connection of a flood has a new port, not a new voice
        host = peer.rsplit(":", 1)[0] if peer.count(":") >= 2 else peer
        self._refusals.warning((host, reason), "raft_batch_refused", reason=reason, peer=peer, **fields)

    async def Stream(self, request_iterator, context):  # noqa: N802 (gRPC method name)
        n = 0
        peer = context.peer() or "?"
        async for batch in request_iterator:
            n += 1
            if batch.version != WIRE_VERSION:
                # another release's Raft wire format (docs/compatibility.md): named, not guessed at
                self._refuse(peer, "wire_version", version=batch.version, speaks=WIRE_VERSION)
                await context.abort(grpc.StatusCode.FAILED_PRECONDITION,
                                    f"FORMAT_TOO_NEW: raft wire version {batch.version}; this member speaks "
                                    f"{WIRE_VERSION}" if batch.version > WIRE_VERSION else
                                    f"raft wire version {batch.version} refused; this member speaks {WIRE_VERSION}")
            if batch.cluster != self.cluster:
                self._refuse(peer, "wrong_cluster", version=batch.version, cluster=batch.cluster[:64])
                await context.abort(grpc.StatusCode.FAILED_PRECONDITION, "wrong raft cluster")
            sender = batch.sender
            if self.tls_identities:
                who = peer_identity(context)
                if who != f"{CONTROLLER_IDENTITY_PREFIX}{sender}":
                    self._refuse(peer, "identity_mismatch", sender=sender[:64], identity=(who or "")[:64])
                    await context.abort(grpc.StatusCode.PERMISSION_DENIED,
                                        "the sender is not the member this certificate names")
                bound = peer_cluster(context)
                if self.cert_cluster is None or bound != self.cert_cluster:
                    self._refuse(peer, "other_cluster", sender=sender[:64], cert_cluster=(bound or "")[:64])
                    await context.abort(grpc.StatusCode.PERMISSION_DENIED,
                                        "the certificate is not bound to this controller cluster")
            if not self._admits(sender, batch.sender_member):
                known = batch.sender_member == member_id(self.cluster, sender)
                self._refuse(peer, "not_a_member", sender=sender[:64], member=batch.sender_member[:64],
                             removed=sender in self.removed,
                             hint=("if it joined while this node was away, rejoin this node with admin "
                                   "recover-member" if known and sender not in self.removed else ""))
                await context.abort(grpc.StatusCode.PERMISSION_DENIED, "not a member of this raft cluster")
            msgs = []
            for p in batch.messages:
                try:
                    m = from_pb(p)
                except ValueError as exc:
                    self._refuse(peer, "bad_message", error=str(exc))
                    continue
                if m.frm != sender or m.to != self.self_id:
                    self._refuse(peer, "wrong_address", sender=sender, frm=m.frm[:64], to=m.to[:64])
                    continue
                msgs.append(m)
            if msgs:
                self.deliver(msgs)
        return raft_pb2.StreamAck(batches=n)


class _Stop:
    """Queue token that ends the request generator of one finished call (see PeerSender._run)."""

    __slots__ = ("attempt",)

    def __init__(self, attempt: int) -> None:
        self.attempt = attempt


class _SendQueue(asyncio.Queue["Message | _Stop"]):
    """A peer's send queue, with a look at what waits in it: the batching loop must not take a
    message it cannot fit, and an idle sender keeps its back-off only with nothing to send."""

    _queue: collections.deque[Message | _Stop]      # asyncio.Queue's own buffer

    def head(self) -> Message | _Stop:
        return self._queue[0]

    def waiting(self) -> Iterable[Message | _Stop]:
        return iter(self._queue)


class PeerSender:
    def __init__(self, self_id: str, peer_id: str, addr: str, cfg: RaftConfig, cluster: str,
                 tls: TLSConfig | None = None) -> None:
        self.self_id = self_id
        self.tls = tls or TLSConfig.off()
        self.self_member = member_id(cluster, self_id)
        self.peer_id = peer_id
        self.addr = addr
        self.cfg = cfg
        self.cluster = cluster
        self.queue: _SendQueue = _SendQueue(maxsize=cfg.send_queue_limit)
        self.log = get_logger("raft.transport", node=self_id, peer=peer_id)
        self.dropped = 0
        self.attempts = 0      # calls opened (each reconnect is one)
        self._task: asyncio.Task | None = None
        self._stopping = False
        self._channel: grpc.aio.Channel | None = None
        self._queued = asyncio.Event()     # wakes a back-off early: someone is waiting on this peer

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name=f"raft-send-{self.peer_id}")
        supervise.essential_task(self._task, f"raft-send-{self.peer_id}", lambda: not self._stopping, self.log)

    def send(self, m: Message) -> None:
        try:
            self.queue.put_nowait(m)
            self._queued.set()
        except asyncio.QueueFull:
            self.dropped += 1      # Raft tolerates loss; a full queue means the peer is not keeping up

    async def _batches(self, attempt: int):
        while True:
            m = await self.queue.get()
            if isinstance(m, _Stop):
                if m.attempt == attempt:
                    return              # the call this generator fed has ended
                continue                # a token nobody was waiting for
            msgs = [m]
            size = _approx_size(m)
            while len(msgs) < self.cfg.max_batch_messages and not self.queue.empty():
                nxt = self.queue.head()     # keep a batch under the message size limit
                if isinstance(nxt, _Stop):
                    break
                s = _approx_size(nxt)
                if size + s > self.cfg.max_message_bytes - (1 << 15):
                    break
                self.queue.get_nowait()
                msgs.append(nxt)
                size += s
            yield raft_pb2.Batch(version=WIRE_VERSION, cluster=self.cluster, messages=[to_pb(x) for x in msgs],
                                 sender=self.self_id, sender_member=self.self_member)

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        backoff = Backoff(self.cfg.reconnect_min_ms / 1000, self.cfg.reconnect_max_ms / 1000, jitter=False)
        attempt = 0
        while True:
            attempt += 1
            self.attempts = attempt
            started = loop.time()
            self._channel = grpc_channel(self.addr, self.tls, options=grpc_options(self.cfg))
            stub = raft_pb2_grpc.RaftStub(self._channel)
            try:
                await stub.Stream(self._batches(attempt))
            except asyncio.CancelledError:
                raise
            except grpc.aio.AioRpcError as exc:
                self.log.debug("raft_stream_broken", code=exc.code().name, details=exc.details())
            except Exception as exc:  # noqa: BLE001 - keep the sender alive whatever happens; log it
                self.log.warning("raft_stream_error", error=repr(exc))
            finally:
                with contextlib.suppress(Exception):
                    await self._channel.close()
            # drop what queued up while the peer was unreachable: it is stale, Raft resends
            while not self.queue.empty():
                self.queue.get_nowait()
            # gRPC's task consuming this attempt's generator outlives a failed call, blocked in
            # queue.get(): without this token it took (and lost) the next message, and every failed
            # connect left one more such consumer, so the first N messages after a peer came back
            # vanished (vote replies lost for ~0.5 s after a restart: the bench.election tail)
            self.queue.put_nowait(_Stop(attempt))
            if loop.time() - started > 1.0:
                backoff.reset()     # it was up for a while: retry quickly
            await self._backoff(backoff.next())

    async def _backoff(self, backoff_s: float) -> None:
        """Sleep reconnect_min_ms, then the rest of backoff_s unless a message is queued meanwhile.

        A restarted peer must hear a vote reply at once, so traffic to a down peer retries every
        reconnect_min_ms (a refused connect on a LAN is cheap); an idle sender keeps the full back-off.
        """
        floor = self.cfg.reconnect_min_ms / 1000
        await asyncio.sleep(floor)
        rest = backoff_s - floor
        if rest > 0 and not any(not isinstance(m, _Stop) for m in self.queue.waiting()):
            self._queued.clear()
            await wait_event(self._queued, rest)

    async def stop(self) -> None:
        self._stopping = True
        await cancel_and_wait([self._task])
        if self._channel is not None:
            with contextlib.suppress(Exception):
                await self._channel.close()


class GrpcRaftTransport:
    """``RaftTransport`` over gRPC. ``addrs`` holds every member (this node's entry is where its own
    server binds unless ``server`` is given)."""

    def __init__(self, self_id: str, addrs: dict[str, str], cfg: RaftConfig, cluster: str, *,
                 server: grpc.aio.Server | None = None, tls: TLSConfig | None = None,
                 interceptors: list | None = None) -> None:
        self.self_id = self_id
        self.cluster = cluster
        self.interceptors = list(interceptors or [])    # for the server we own (authorization)
        self.addrs = dict(addrs)
        self.cfg = cfg
        self.tls = tls or TLSConfig.off()
        self._deliver_to: Callable[[list[Message]], None] | None = None
        # Peers prove their names with certificates, except while a migration to TLS still accepts
        # plaintext peers (no certificate to check; docs/security.md).
        tls_identities = self.tls.enabled and not self.tls.accept_plaintext
        self._servicer = RaftServicer(cluster, self._deliver, self_id, self.addrs, tls_identities=tls_identities,
                                      cert_cluster=certificate_cluster(self.tls.cert) if tls_identities else None)
        self._server = server
        self._own_server = False
        self._listener: Listener | None = None
        if server is not None:     # registered now: the owner may start its server before start()
            raft_pb2_grpc.add_RaftServicer_to_server(self._servicer, server)
        self.senders = {pid: PeerSender(self_id, pid, addr, cfg, cluster, self.tls)
                        for pid, addr in self.addrs.items() if pid != self_id}

    def _deliver(self, msgs: list[Message]) -> None:
        # Before start() there is no core to step: dropping is safe, Raft retransmits.
        if self._deliver_to is not None:
            self._deliver_to(msgs)

    async def start(self, deliver: Callable[[list[Message]], None]) -> None:
        self._deliver_to = deliver
        if self._server is None:
            addr = self.addrs.get(self.self_id) or self.cfg.listen_addr
            if addr is None:
                raise RaftConfigError(f"node {self.self_id!r} has no raft address and no shared server")
            self._server = grpc.aio.server(options=grpc_options(self.cfg), interceptors=self.interceptors)
            raft_pb2_grpc.add_RaftServicer_to_server(self._servicer, self._server)
            # Peers always prove who they are here: a member's certificate is bound to its name.
            peer_tls = dataclasses.replace(self.tls, require_client_cert=True)
            self._listener = await bind(self._server, addr, peer_tls, "raft")
            if self._listener.port == 0:
                raise RaftConfigError(f"cannot bind raft address {addr}")
            await self._server.start()
            self._own_server = True
        for s in self.senders.values():
            s.start()

    def set_members(self, addrs: dict[str, str]) -> None:
        """Follow a membership change: send to exactly these peers (node id -> Raft address) and
        accept batches only from them. Started senders of removed peers stop in the background."""
        started = self._deliver_to is not None
        for pid in [p for p in self.senders if p not in addrs or self.senders[p].addr != addrs[p]]:
            old = self.senders.pop(pid)
            asyncio.get_running_loop().create_task(old.stop(), name=f"raft-send-stop-{pid}")
        for pid, addr in addrs.items():
            if pid != self.self_id and pid not in self.senders:
                s = self.senders[pid] = PeerSender(self.self_id, pid, addr, self.cfg, self.cluster, self.tls)
                if started:
                    s.start()
        own = {self.self_id: self.addrs[self.self_id]} if self.self_id in self.addrs else {}
        self.addrs = {**own, **addrs}
        self._servicer.set_members(addrs)

    def send(self, msgs: list[Message]) -> None:
        for m in msgs:
            s = self.senders.get(m.to)
            if s is not None:
                s.send(m)

    def handed_over(self, msgs: list[Message]) -> bool:
        """Have the senders of these messages' peers taken everything queued to them (to gRPC)?"""
        return all(self.senders[m.to].queue.empty() for m in msgs if m.to in self.senders)

    async def stop(self) -> None:
        self._deliver_to = None
        for s in self.senders.values():
            await s.stop()
        if self._listener is not None:
            await self._listener.close()
        if self._own_server and self._server is not None:
            await self._server.stop(0.2)
            self._own_server = False
