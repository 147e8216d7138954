"""HAMaster: the asyncio adapter around MasterSession and SyncStateTracker.

One TCP listener; per slave connection a reader (handshake, then acks) and a transfer loop
(ha/io/master_conn.py) woken by notify_appended() or the heartbeat timer. All state lives on the one event loop;
the sans-IO cores decide, this module only moves bytes and timers.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import time
from collections.abc import Callable
from ssl import SSLContext

from autoswitch.ha import zones
from autoswitch.ha.codec import Ack, MasterSideDecoder, SlaveHandshake, encode_master_handshake
from autoswitch.ha.codec_v4 import DigestReport
from autoswitch.ha.commit_point import CommitPoint
from autoswitch.ha.config import TLS_WRITE_BUFFER_HIGH, HAConfig
from autoswitch.ha.errors import FrameError, HABusy, HAError, HAProtocolError
from autoswitch.ha.io.master_conn import SlaveConn, read_frames, transfer_loop
from autoswitch.ha.log_api import ReplicaLog
from autoswitch.ha.master_digests import MasterDigests
from autoswitch.ha.master_session import MasterSession
from autoswitch.ha.seams import ReplicaRegistry, SyncStateProposer
from autoswitch.ha.sync_state import Proposal, SyncStateTracker, expansion_refusals

from autoswitch.base import supervise
from autoswitch.base.auth import parse_broker_identity
from autoswitch.base.dualport import DualPortFront
from autoswitch.base.log import RateLimitedLog, get_logger
from autoswitch.base.tls import ssl_peer_identity
from autoswitch.base.waits import Deadlines, cancel_and_wait
from autoswitch.base.write_errors import FlushSlaveTimeout


class HAMaster:
    def __init__(self, log: ReplicaLog, config: HAConfig, broker_id: int, group: str,
                 master_epoch: int, sync_state_set: frozenset[int], sync_state_set_epoch: int,
                 proposer: SyncStateProposer, clock=time.monotonic,
                 fenced: Callable[[], bool] | None = None,
                 registry: ReplicaRegistry | None = None, bind_identities: bool = False,
                 degraded: Callable[[], bool] | None = None, zone: str = "", durable_own: bool = False) -> None:
        """``degraded``: the broker's own health says it is slow (broker/health.py): the slaves'
        ack latency is then its own, and no slave leaves the set as slow. ``zone``: our own (the
        slaves' come from the registry, the controllers' word; min_in_sync_zones counts them).
        ``durable_own``: the broker acknowledges only what it fsynced (flush = "sync"); our own
        copy then counts for acks and confirmOffset up to the log's fsynced end only (``on_flushed``
        says when it moved)."""
        self.log = log
        self.durable_own = durable_own
        self.degraded = degraded or (lambda: False)
        # With TLS: a slave's certificate must name it (broker/<our group>/<the brokerId it
        # claims>), so one broker's certificate cannot read the log or ack as another.
        self.bind_identities = bind_identities
        # None (static mode): the operator wired the group by hand and any brokerId may handshake.
        self.registry = registry
        self.config = config.validate()
        self.broker_id = broker_id
        self.group = group
        self.master_epoch = master_epoch
        self.proposer = proposer
        self._clock = clock
        last = log.epochs.last()
        self.tracker = SyncStateTracker(
            broker_id, master_epoch, frozenset(sync_state_set) | {broker_id}, sync_state_set_epoch,
            self.config, clock(), confirm_offset=min(log.confirm_offset, log.max_offset),
            epoch_start_offset=last.start_offset if last is not None else 0)
        self.tracker.set_zone(broker_id, zone)
        self._sync_own()
        # ``fenced``: the broker's word that its writes are fenced (lease out, deposed); the commit
        # point then holds, so no slave's readable range moves past what a new master is sure to
        # have (docs/replication.md, "fenced master").
        self.commit = CommitPoint(self.tracker, fenced)
        self._log = get_logger("ha", group=group, brokerId=broker_id, epoch=master_epoch, role="master")
        self._server: asyncio.base_events.Server | None = None
        self._internal: list[asyncio.base_events.Server] = []   # behind the front (migration)
        self._front: DualPortFront | None = None
        self._conns: dict[int, SlaveConn] = {}          # brokerId -> the connection that owns it
        self._handlers: set[asyncio.Task] = set()
        self._waiters: list[tuple[int, int, asyncio.Future]] = []
        self._deadlines = Deadlines(self.config.max_pending_waits)   # the waiters' timeouts
        # (brokerId, offset, future): one replica caught up to an offset (a handover's target)
        self._replica_waiters: list[tuple[int, int, asyncio.Future]] = []
        self._seq = itertools.count()
        self._housekeeper: asyncio.Task | None = None
        self._proposal_task: asyncio.Task | None = None
        self._stopped = False
        self.port: int | None = None
        self.rejected: dict[str, int] = {}           # reason -> count (metrics, tests)
        self._pending: dict[asyncio.Task, asyncio.StreamWriter] = {}   # not handshaken yet, oldest first
        self._refusals = RateLimitedLog(self._log, self.config.rejection_log_interval_s)
        # Range digests of our log for the slaves to verify theirs against (ha/digest.py).
        self.digests = MasterDigests(log, self.config, self.tracker, self._log, clock)

    # ------------------------------------------------------------------ lifecycle

    async def start(self, host: str, port: int, ssl: SSLContext | None = None, accept_plaintext: bool = False) -> None:
        """``ssl``: serve the HA port over TLS (autoswitch.base.tls.server_ssl_context);
        ``accept_plaintext`` (with ``ssl``, a migration to TLS): plaintext slaves too, through a
        DualPortFront on the public port and two internal loopback listeners."""
        limit = self.config.read_chunk_size
        if ssl is not None and accept_plaintext:
            # a TLS handshake gets the HA handshake's time, not asyncio's 60 s (issue 59: connections
            # in their TLS handshake were bounded by nothing)
            self._internal = [await asyncio.start_server(self._on_client, "127.0.0.1", 0, limit=limit),
                              await asyncio.start_server(self._on_client, "127.0.0.1", 0, limit=limit, ssl=ssl,
                                                         ssl_handshake_timeout=self.config.handshake_timeout_s)]
            plain, tls = (s.sockets[0].getsockname()[1] for s in self._internal)
            self._front = DualPortFront(("127.0.0.1", plain), ("127.0.0.1", tls), name="ha")
            self.port = await self._front.start(host, port)
        else:
            self._server = await asyncio.start_server(
                self._on_client, host, port, limit=limit, ssl=ssl,
                ssl_handshake_timeout=self.config.handshake_timeout_s if ssl is not None else None)
            self.port = self._server.sockets[0].getsockname()[1]
        # shrinks the SyncStateSet, moves the commit point, refreshes zones: runs until stop()
        self._housekeeper = asyncio.create_task(self._housekeeping(), name="ha-housekeeping")
        supervise.essential_task(self._housekeeper, "ha-housekeeping", lambda: not self._stopped, self._log)
        self._log.info("ha_master_started", addr=f"{host}:{self.port}",
                       syncStateSet=sorted(self.tracker.sync_state_set), ackMode=self.config.ack_mode)

    async def stop(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        if self._front is not None:
            await self._front.close()
        servers = [s for s in (self._server, *self._internal) if s is not None]
        for srv in servers:
            srv.close()
        await cancel_and_wait([self._housekeeper, self._proposal_task, *self._handlers])
        for srv in servers:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(srv.wait_closed(), 2)
        for _, _, fut in self._waiters:
            if not fut.done():
                fut.set_exception(HAError("HA master stopped"))
        self._waiters.clear()
        self._deadlines.close()
        for _, _, fut in self._replica_waiters:
            if not fut.done():
                fut.set_result(False)
        self._log.info("ha_master_stopped")

    # ------------------------------------------------------------------ public API

    @property
    def confirm_offset(self) -> int:
        """The commit point (CommitPoint.value): held while the broker is fenced."""
        self._sync_own()
        return self.commit.value(self.log.max_offset)

    @property
    def replicated_offset(self) -> int:
        """How far the in-sync replicas hold the log, fence or not (CommitPoint.live)."""
        self._sync_own()
        return self.commit.live(self.log.max_offset)

    def _sync_own(self) -> None:
        """Our own copy counts up to the log's fsynced end with durable acknowledgements."""
        if self.durable_own:
            self.tracker.own_durable = self.log.synced_offset

    def on_flushed(self) -> None:
        """The log's fsynced end moved (the broker's flusher): acks and confirmOffset may follow."""
        if self.durable_own and not self._stopped:
            self._on_progress()

    @property
    def sync_state_set(self) -> frozenset[int]:
        return self.tracker.sync_state_set

    @property
    def sync_state_set_epoch(self) -> int:
        return self.tracker.sync_state_set_epoch

    def notify_appended(self) -> None:
        for c in self._conns.values():
            if c.session.wants_wake():
                c.wake.set()
        if len(self.tracker.ack_set) == 1:
            self._on_progress()     # alone in the set: the append is its own acknowledgement
        else:
            self._maybe_propose()   # only the tracker's periodic look (marks of the log end)

    def update_sync_state_set(self, sync_state_set: frozenset[int], sync_state_set_epoch: int) -> None:
        """A newer set learned from the controller by another path (replica-info poll)."""
        self.tracker.on_sync_state_set(sync_state_set, sync_state_set_epoch)
        self._on_progress()

    def zone_shortfall(self) -> str | None:
        """Why the SyncStateSet spans too few zones to acknowledge (min_in_sync_zones), or None."""
        return self.tracker.zone_shortfall()

    async def wait_for_replicas(self, offset: int, timeout_s: float) -> None:
        self.tracker.check_enough()
        self._sync_own()
        if self.tracker.is_acked(offset, self.log.max_offset):
            return
        if len(self._waiters) >= self.config.max_pending_waits:
            self._waiters = [w for w in self._waiters if not w[2].done()]
            heapq.heapify(self._waiters)
            if len(self._waiters) >= self.config.max_pending_waits:
                raise HABusy("too many writes waiting for replicas", limit=self.config.max_pending_waits)
        fut = asyncio.get_running_loop().create_future()
        heapq.heappush(self._waiters, (offset, next(self._seq), fut))
        self._deadlines.add(fut, timeout_s)
        try:
            await fut
        except TimeoutError:
            raise FlushSlaveTimeout(f"offset {offset} not acknowledged by replicas within {timeout_s}s",
                                    offset=offset, confirm_offset=self.confirm_offset) from None

    def replica_acked(self, broker_id: int) -> int:
        """The offset ``broker_id`` acknowledged on its live connection (-1: none)."""
        r = self.tracker.replicas.get(broker_id)
        return r.ack_offset if r is not None and r.connected else -1

    async def wait_replica(self, broker_id: int, offset: int, timeout_s: float) -> bool:
        """True once ``broker_id`` acknowledged ``offset``; False after ``timeout_s`` or as soon as
        its connection is gone."""
        acked = self.replica_acked(broker_id)
        if acked >= offset or acked < 0:
            return acked >= offset
        if len(self._replica_waiters) >= self.config.max_pending_waits:
            raise HABusy("too many replica waits", limit=self.config.max_pending_waits)
        fut = asyncio.get_running_loop().create_future()
        entry = (broker_id, offset, fut)
        self._replica_waiters.append(entry)
        try:
            async with asyncio.timeout(timeout_s):
                return bool(await fut)
        except TimeoutError:
            return False
        finally:
            if entry in self._replica_waiters:
                self._replica_waiters.remove(entry)

    def slave_infos(self) -> list[dict]:
        out = []
        for info in self.tracker.replica_infos(self.log.max_offset):
            bid = info["brokerId"]
            assert isinstance(bid, int)
            c = self._conns.get(bid)
            info["addr"] = c.addr if c is not None else None
            if c is not None:
                info["nextOffset"] = c.session.next_offset
                info["bytesSent"] = c.session.bytes_sent
                info["protocolVersion"] = c.session.version
            out.append(info)
        return out

    # ------------------------------------------------------------------ internals

    def _on_progress(self) -> None:
        """Acks or the set changed: move confirmOffset, release waiters, maybe propose."""
        self._sync_own()
        log_max = self.log.max_offset
        confirm = self.commit.value(log_max)
        if confirm > self.log.confirm_offset:
            self.log.confirm_offset = confirm
        for bid, offset, fut in self._replica_waiters:
            if not fut.done():
                acked = self.replica_acked(bid)
                if acked >= offset or acked < 0:   # caught up, or disconnected: answer now either way
                    fut.set_result(acked >= offset)
        w = self._waiters
        acked = self.tracker.acked_through(log_max) if w else -1    # once for all it releases
        while w and (w[0][2].done() or w[0][0] <= acked):
            _, _, fut = heapq.heappop(w)
            if not fut.done():
                fut.set_result(None)
        self._maybe_propose()
        if self.tracker.quarantined:
            self.digests.send_repairs(self._conns)

    def _maybe_propose(self) -> None:
        if self._stopped or (self._proposal_task is not None and not self._proposal_task.done()):
            return
        self.tracker.self_degraded = self.degraded()
        p = self.tracker.tick(self._clock(), self.log.max_offset)
        if p is not None:
            self._proposal_task = asyncio.create_task(self._propose(p))

    async def _propose(self, p: Proposal) -> None:
        if not await self._expansion_admitted(p.new_set - self.tracker.sync_state_set):
            self.tracker.on_proposal_failed(self._clock())
            return
        self._log.info("sync_state_set_proposed", current=sorted(self.tracker.sync_state_set),
                       proposed=sorted(p.new_set), syncStateSetEpoch=p.base_sync_state_set_epoch,
                       leaving={str(b): w for b, w in p.reasons})
        try:
            accepted, epoch = await asyncio.wait_for(
                self.proposer.propose(p.master_epoch, p.base_sync_state_set_epoch, p.new_set, p.reasons),
                self.config.proposal_timeout_s)
        except asyncio.CancelledError:
            raise
        except Exception as e:  # noqa: BLE001 - any rejection or transport failure: back off, retry later
            self.tracker.on_proposal_failed(self._clock())
            self._log.warning("sync_state_set_proposal_failed", proposed=sorted(p.new_set),
                              error=getattr(e, "code", type(e).__name__), detail=str(e),
                              failures=self.tracker.failures)
            return
        try:
            self.tracker.on_proposal_accepted(frozenset(accepted), epoch, self._clock())
        except ValueError as e:
            self.tracker.on_proposal_failed(self._clock())
            self._log.error("sync_state_set_answer_invalid", detail=str(e))
            return
        self._log.info("sync_state_set_changed", syncStateSet=sorted(self.tracker.sync_state_set),
                       syncStateSetEpoch=self.tracker.sync_state_set_epoch)
        self._proposal_task = None
        self._on_progress()

    async def _expansion_admitted(self, added: frozenset[int]) -> bool:
        """A replica enters the SyncStateSet only as the process the controllers registered now
        (sync_state.expansion_refusals); a refused one's connection is closed and it reconnects
        as itself."""
        if self.registry is None or not added:
            return True
        connected = {bid: c.incarnation for bid in added if (c := self._conns.get(bid)) is not None}
        # one fresh answer from the controllers serves every added id
        registered = await self.registry.registered(fresh=True) if connected else {}
        refused = expansion_refusals(added, connected, registered)
        for bid, why in refused.items():
            conn = self._conns.get(bid)
            self._log.warning("sync_state_set_expansion_refused", slave=bid, reason=why,
                              incarnation=conn.incarnation[:16] if conn is not None else "")
            if conn is not None:
                conn.close()
        zones.learn(self.tracker, self.registry)       # the fresh answer names the zones too
        return not refused

    async def _housekeeping(self) -> None:
        while True:
            await asyncio.sleep(self.config.sync_state_check_interval_s)
            if self.digests.tick():
                self._wake_all()
            if self.registry is not None:
                await zones.refresh(self.tracker, self.registry)
            self._on_progress()

    def _wake_all(self) -> None:
        for c in self._conns.values():
            c.wake.set()

    async def _on_client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        peer = writer.get_extra_info("peername")
        addr = f"{peer[0]}:{peer[1]}" if peer else "?"
        clog = self._log.bind(addr=addr)
        conn: SlaveConn | None = None
        session = MasterSession(self.log, self.config, self.broker_id, self._clock())
        reason = "closed"
        try:
            self._pending[task] = writer
            if len(self._pending) > self.config.max_pending_handshakes:
                # Evict the oldest connection that has not handshaken: a real slave handshakes
                # right after connecting, so only idle or slow sockets are ever closed here.
                oldest = next(iter(self._pending))
                self._pending.pop(oldest).close()
                oldest.cancel()
            dec = MasterSideDecoder()
            frames = await read_frames(reader, dec, self.config.handshake_timeout_s, self.config.read_chunk_size)
            self._pending.pop(task, None)
            hs = frames[0]
            if not isinstance(hs, SlaveHandshake):
                raise HAProtocolError("ack_before_handshake", "first frame is not a handshake")
            slave_id = hs.broker_id
            clog = clog.bind(slave=slave_id, asyncLearner=hs.async_learner)
            if self.bind_identities:
                who = ssl_peer_identity(writer.get_extra_info("ssl_object"))
                if who is None or parse_broker_identity(who) != (self.group, slave_id):
                    raise HAProtocolError("identity_mismatch", f"the certificate of {(who or 'no name')[:128]!r} "
                                                               f"does not name broker {self.group}/{slave_id}")
            # Checked before anything is sent: the master handshake already names our epochs. Only
            # the registered process of a brokerId may ack for it: a second process (a cloned data
            # directory) would make the controllers elect the registered one for bytes it lacks.
            refused = await self.registry.refusal(slave_id, hs.incarnation) if self.registry is not None else None
            if refused is not None:
                raise HAProtocolError(refused, f"brokerId {slave_id} (incarnation {hs.incarnation[:16] or '-'}) "
                                               f"is not a registered replica process of group {self.group}")
            old = self._conns.get(slave_id)
            if old is not None and not old.closed:
                # The live connection keeps its slot; a restarted slave gets in once the old
                # socket is seen closed or silent (housekeeping). Without credentials a newcomer
                # cannot prove it is the same broker, and its acks would count for the SSS member.
                raise HAProtocolError("replica_already_connected", f"brokerId {slave_id} is connected from "
                                                                   f"{old.addr}")
            if len(self._conns) >= self.config.max_slaves:
                raise HAProtocolError("too_many_slaves", f"limit {self.config.max_slaves}")
            writer.write(encode_master_handshake(session.on_handshake(hs, self._clock())))
            conn = SlaveConn(session, writer, addr, clog, hs.incarnation)
            self._conns[slave_id] = conn
            self.tracker.on_connect(slave_id, hs.async_learner, self._clock())
            if self.registry is not None:
                zones.learn(self.tracker, self.registry)
            clog.info("slave_connected", syncFromLastFile=hs.sync_from_last_file)
            tls = writer.get_extra_info("ssl_object") is not None
            writer.transport.set_write_buffer_limits(high=TLS_WRITE_BUFFER_HIGH if tls else self.config.write_buffer_high)
            pending = frames[1:]
            while True:
                for f in pending:
                    if isinstance(f, DigestReport):
                        if self.digests.on_report(conn, f):
                            self._on_progress()
                        continue
                    if not isinstance(f, Ack):
                        raise HAProtocolError("unexpected_handshake", "second handshake on one connection")
                    res = session.on_ack(f, self._clock())
                    self.tracker.on_ack(res.broker_id, res.offset, res.caught_up_at, self.log.max_offset,
                                        self._clock())
                    if res.first:
                        clog.info("slave_transfer_start", ack=res.offset, start=session.next_offset)
                        conn.task = asyncio.create_task(transfer_loop(conn, self.config, self.digests, self._clock,
                                                                   lambda: self.confirm_offset, self._wake_all))
                    self._on_progress()
                    if session.held_until is not None:
                        conn.wake.set()         # the ack a held tail waits for
                # A slave acks every heartbeat; one silent this long is gone (or stuck): drop it
                # (RocketMQ haHousekeepingInterval), so a dead peer cannot pin a connection.
                pending = await read_frames(reader, dec, self.config.housekeeping_interval_s, self.config.read_chunk_size)
        except (FrameError, HAProtocolError) as e:
            reason = e.reason
            self.rejected[reason] = self.rejected.get(reason, 0) + 1
            self._refusals.warning((_host(addr), reason), "slave_connection_rejected", addr=addr,
                                   reason=e.reason, detail=e.message)
        except TimeoutError:
            reason = "handshake_timeout" if conn is None else "slave_silent"
            self.rejected[reason] = self.rejected.get(reason, 0) + 1
            self._refusals.warning((_host(addr), reason), "slave_connection_rejected", addr=addr, reason=reason)
        except (ConnectionError, OSError) as e:
            reason = "connection_lost"
            clog.info("slave_disconnected", detail=str(e))
        except asyncio.CancelledError:
            reason = "stopping" if self._stopped else "evicted_pending"
        except Exception as e:  # noqa: BLE001 - a bug must cost one connection, never the master
            reason = "internal_error"
            clog.error("slave_connection_failed", exc_info=e, error=type(e).__name__)
        finally:
            self._pending.pop(task, None)
            session.close()
            if conn is not None:
                conn.close()
                # Remove only our own entry: a newer connection of the same slave may own it (PR #9897).
                if session.slave_id is not None and self._conns.get(session.slave_id) is conn:
                    del self._conns[session.slave_id]
                    self.tracker.on_disconnect(session.slave_id, self._clock())
                    self._on_progress()
            else:
                writer.close()
            clog.debug("slave_connection_closed", reason=reason)
            self._handlers.discard(task)


def _host(addr: str) -> str:
    return addr.rsplit(":", 1)[0]
