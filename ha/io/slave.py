"""HASlave: the asyncio adapter around SlaveSession.

Connect, handshake (truncate), transfer; any error closes the connection with a logged reason
and a fresh connection (fresh handshake) follows after a bounded, growing backoff. A master
silent for housekeeping_interval_s (no data, no heartbeat) is treated as gone.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import random
from collections.abc import Callable
from ssl import SSLContext
from typing import Any

from autoswitch.ha.codec import Ack, SlaveSideDecoder, encode_ack, encode_slave_handshake
from autoswitch.ha.codec_v4 import DIGEST_VERSION, encode_digest_report
from autoswitch.ha.config import HAConfig
from autoswitch.ha.digest import RangeDigest
from autoswitch.ha.errors import FrameError, HAProtocolError, OffsetMismatch, RangeRepaired
from autoswitch.ha.log_api import ReplicaLog
from autoswitch.ha.slave_session import SlaveSession, cut_at_or_below

from autoswitch.base import supervise
from autoswitch.base.auth import parse_broker_identity
from autoswitch.base.backoff import Backoff
from autoswitch.base.errors import AutoswitchError
from autoswitch.base.log import get_logger
from autoswitch.base.tls import ssl_peer_identity
from autoswitch.base.waits import cancel_and_wait

MAX_SYNCS_IN_FLIGHT = 1     # fdatasyncs of a durable slave at once (as the master's group commit)


class HASlave:
    def __init__(self, log: ReplicaLog, config: HAConfig, broker_id: int, group: str,
                 master_addr: tuple[str, int], async_learner: bool = False,
                 sync_from_last_file: bool = False, ssl: Callable[[], SSLContext] | None = None,
                 bind_identities: bool = False, on_caught_up: Callable[[int], None] | None = None,
                 expect_master: tuple[int, int] | None = None, sync_before_ack: bool = False,
                 incarnation: str = "") -> None:
        """``ssl``: connect to the master's HA port over TLS, with a context built by this factory
        for each connection attempt (autoswitch.base.tls.client_ssl_context: rotated files are
        picked up at the next reconnect);
        ``bind_identities``: the master's certificate must name a broker of our group (a broker of
        another group, or any other holder of a CA certificate, cannot feed us its log);
        ``on_caught_up(master_epoch)``: called once per connection, when the log first reaches a
        confirmOffset the master sent (the ReplicasManager then reports the log intact again);
        ``expect_master``: (brokerId, MasterEpoch) the controller named; the handshake must state
        that epoch and, with bound identities, the certificate must name that brokerId;
        ``sync_before_ack``: fsync what was appended before acknowledging it (the broker's
        ``flush = "sync"``): the master counts this replica's ack as a durable copy;
        ``incarnation``: this broker process as registered with the controllers, stated in the
        handshake (a master refuses a process of our brokerId that the controllers did not register).
        """
        self.incarnation = incarnation
        self.sync_before_ack = sync_before_ack
        # durable acks: the fdatasyncs run on the slave's own thread(s), the acks follow them
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._syncs: list[tuple[Any, asyncio.Future[None]]] = []
        self._ack_wanted = 0        # the highest offset received and to be acked once synced
        self._ack_sent = 0          # the highest offset acked on the current connection
        self.on_caught_up = on_caught_up
        self.expect_master = expect_master
        self.log = log
        self.ssl = ssl
        self.bind_identities = bind_identities
        self.config = config.validate()
        self.broker_id = broker_id
        self.group = group
        self.master_addr = master_addr
        self.async_learner = async_learner
        self.sync_from_last_file = sync_from_last_file
        self.state = "READY"
        self.master_epoch = 0
        self.connects = 0
        self.last_error: dict | None = None
        self._task: asyncio.Task | None = None
        self._writer: asyncio.BaseTransport | None = None   # closes the connection
        self._session: SlaveSession | None = None
        self._stopping = False
        self._reached = False
        self._caught_up_told = 0      # the MasterEpoch last reported caught up
        self._rng = random.Random()
        # Range digests verified against this replica's disk (metrics, status): rounds run,
        # ranges that matched, mismatches found, repairs done; the last mismatch as logged.
        self.digest_stats = {"rounds": 0, "verified": 0, "verified_bytes": 0, "mismatches": 0, "repairs": 0}
        self.last_mismatch: dict | None = None
        self._verify_task: asyncio.Task | None = None
        self._log = get_logger("ha", group=group, brokerId=broker_id, role="slave",
                               master=f"{master_addr[0]}:{master_addr[1]}")

    @property
    def confirm_offset(self) -> int:
        return self.log.confirm_offset

    @property
    def diverged_range(self) -> tuple[int, int] | None:
        """(epoch, start) of a range found to differ and not repaired and re-verified since: kept by
        the log on disk (across role changes and restarts), reported in heartbeats (never a clean
        election candidate meanwhile, controller/state/election.py)."""
        d = self.log.divergence
        return (d.epoch, d.start) if d is not None else None

    async def start(self) -> None:
        assert self._task is None, "HASlave.start() twice"
        if self.sync_before_ack:
            self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=MAX_SYNCS_IN_FLIGHT,
                                                               thread_name_prefix="ha-slave-sync")
        self._task = asyncio.create_task(self._run(), name="ha-slave")
        supervise.essential_task(self._task, "ha-slave", lambda: not self._stopping, self._log)

    async def stop(self) -> None:
        self._stopping = True
        self.state = "SHUTDOWN"
        if self._writer is not None:
            self._writer.close()
        await cancel_and_wait([self._task])
        if self._syncs:
            await asyncio.wait([f for _, f in self._syncs])     # their callbacks settle the log's account
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
        self._log.info("ha_slave_stopped")

    def disconnect(self) -> None:
        """Drop the current connection (tests, operator); the run loop reconnects."""
        if self._writer is not None:
            self._writer.close()

    async def _run(self) -> None:
        backoff = Backoff(self.config.reconnect_backoff_min_s, self.config.reconnect_backoff_max_s,
                          rand=self._rng.random)
        while not self._stopping:
            self._reached = False
            try:
                await self._connect_once()
            except asyncio.CancelledError:
                raise
            except RangeRepaired as e:
                self.digest_stats["repairs"] += 1
                self._note_cut()
                self._log.warning("digest_range_repaired", truncatedTo=e.details.get("offset"),
                                  maxOffset=self.log.max_offset, note="fetching the range again from the master")
                self._reached = True
            except OffsetMismatch as e:
                self._note_error("offset_mismatch", e.message)
            except (FrameError, HAProtocolError) as e:
                self._note_error(e.reason, e.message, level="error")
            except AutoswitchError as e:        # corrupt records from the master, store errors
                self._note_error(e.code, e.message, level="error")
            except TimeoutError:
                self._note_error("master_silent", "no frame within the housekeeping interval")
            except (ConnectionError, OSError, asyncio.IncompleteReadError) as e:
                self._note_error("connection_lost", str(e) or type(e).__name__, level="info")
            except Exception as e:  # noqa: BLE001 - a bug must cost one connection, never the replica
                self._log.error("ha_slave_failed", exc_info=e, error=type(e).__name__)
                self.last_error = {"reason": "internal_error", "detail": repr(e)}
            finally:
                await cancel_and_wait([self._verify_task])
                self._verify_task = None
                if self._writer is not None:
                    self._writer.close()
                    self._writer = None
                if self._session is not None:
                    self._session.close()
            if self._stopping:
                break
            self.state = "READY"
            if self._reached:
                # The connection applied transfers: the next try starts quickly.
                backoff.reset()
            await asyncio.sleep(backoff.next())

    def _note_error(self, reason: str, detail: str, level: str = "warning") -> None:
        self.last_error = {"reason": reason, "detail": detail}
        getattr(self._log, level)("ha_slave_disconnected", reason=reason, detail=detail,
                                  maxOffset=self.log.max_offset)

    async def _connect_once(self) -> None:
        cfg = self.config
        host, port = self.master_addr
        self.state = "HANDSHAKE"
        version = cfg.protocol_version if cfg.digests else min(cfg.protocol_version, DIGEST_VERSION - 1)
        session = SlaveSession(self.log, self.broker_id, self.async_learner, self.sync_from_last_file,
                               expect_epoch=self.expect_master[1] if self.expect_master else 0,
                               incarnation=self.incarnation, version=version, digest_keep=cfg.digest_history)
        # zero_copy: bodies are views into the decoder buffer, each appended before the next read.
        dec = SlaveSideDecoder(cfg.max_body_size, cfg.max_epoch_entries, zero_copy=True)
        loop = asyncio.get_running_loop()
        ctx = self.ssl() if self.ssl is not None else None
        transport, proto = await asyncio.wait_for(
            loop.create_connection(lambda: _SlaveProtocol(self, session, dec), host, port, ssl=ctx,
                                   server_hostname=host if ctx is not None else None),
            cfg.connect_timeout_s)
        self._writer = transport
        if self.bind_identities:
            who = ssl_peer_identity(transport.get_extra_info("ssl_object"))
            scope = parse_broker_identity(who) if who else None
            want_id = self.expect_master[0] if self.expect_master else 0
            if scope is None or scope[0] != self.group or (want_id and scope[1] != want_id):
                transport.abort()
                wanted = f"broker {want_id} of group {self.group}" if want_id else f"a broker of group {self.group}"
                raise HAProtocolError("identity_mismatch", f"the master's certificate names {(who or 'nobody')[:128]!r}, "
                                                           f"not {wanted}")
        self.connects += 1
        self._repair_before_fetch(session)
        self._session = session
        self._caught_up_told = 0      # the MasterEpoch last reported caught up
        transport.write(encode_slave_handshake(session.start()))
        if session.digests is not None:
            self._verify_task = asyncio.create_task(self._verify_rounds(session, transport))
        while True:
            # frames are handled in the protocol's callbacks; here only the watchdog and the end
            left = cfg.housekeeping_interval_s - (loop.time() - proto.last_heard)
            if left <= 0:
                raise TimeoutError("master silent")
            done, _ = await asyncio.wait({proto.done}, timeout=left)
            if done:
                proto.done.result()   # the reason the connection ended, raised
                return

    def _on_bytes(self, session: SlaveSession, dec: SlaveSideDecoder, transport: asyncio.Transport) -> None:
        ack = None
        for f in dec.frames():
            was = session.phase
            a = session.on_frame(f)
            if was == "HANDSHAKE":
                self._handshake_done(session, transport, a)
                continue
            if session.repaired_to is not None:
                raise RangeRepaired(f"log cut at {session.repaired_to} by the master's repair",
                                    offset=session.repaired_to)
            if a is not None:
                ack = a
        d = self.log.divergence
        if d is not None and d.cut and session.caught_up and self.log.max_offset >= d.end:
            # the range was cut and fetched again from this master, past its end and up to the
            # confirmOffset: this replica holds the master's bytes there (each record CRC-checked)
            self.log.clear_diverged("range_fetched_again")
        if ack is not None:
            # One ack per read: acks after appends and heartbeats, coalesced under load. A durable
            # one waits for the fdatasync covering it, which runs on the slave's own thread while
            # this loop goes on receiving (the next reads' bytes join the next sync).
            if self.sync_before_ack and ack.slave_max_offset > self.log.synced_offset:
                self._ack_when_synced(session, transport, ack.slave_max_offset)
            else:
                transport.write(encode_ack(ack))
            # Progress: the next failure retries quickly. A failure that repeats before any
            # transfer is applied (a batch the store refuses, no consistent point) backs off.
            self._reached = True
        self.state = session.phase
        self.master_epoch = max(self.master_epoch, session.master_epoch)
        if session.caught_up and session.master_epoch > self._caught_up_told:
            self._caught_up_told = session.master_epoch
            self._log.info("ha_slave_caught_up", masterEpoch=session.master_epoch, maxOffset=self.log.max_offset,
                           confirmOffset=self.log.confirm_offset)
            if self.on_caught_up is not None:
                self.on_caught_up(session.master_epoch)

    async def _verify_rounds(self, session: SlaveSession, transport: asyncio.Transport) -> None:
        """Every digest_interval_s, read back the master's ranges we hold and compare (newest
        first, at most digest_round_bytes); one range per step, so acks are never held up long."""
        cfg = self.config
        while True:
            await asyncio.sleep(cfg.digest_interval_s)
            verified: list[RangeDigest] = []
            bad: RangeDigest | None = None
            for r in session.digests_due(cfg.digest_round_bytes):
                if session is not self._session or transport.is_closing():
                    return
                why = session.verify_range(r)
                if why is not None:
                    bad = r
                    self.log.mark_diverged(r.epoch, r.start, r.end)     # durable: survives a restart
                    self.digest_stats["mismatches"] += 1
                    self.last_mismatch = {"epoch": r.epoch, "start": r.start, "end": r.end,
                                          "reason": why[0], "detail": why[1],
                                          "round": self.digest_stats["rounds"] + 1}
                    # The alert: this replica holds other bytes than its master for acknowledged
                    # offsets. It is quarantined (the master takes it out of the SyncStateSet) and
                    # repairs itself once no set the controller may hold names it.
                    self._log.error("digest_mismatch", epoch=r.epoch, rangeStart=r.start, rangeEnd=r.end,
                                    reason=why[0], detail=why[1], maxOffset=self.log.max_offset)
                    break
                verified.append(r)
                if self.diverged_range == (r.epoch, r.start):
                    # read back intact (fetched again on another connection): the repair is done
                    self.log.clear_diverged("range_verified")
                await asyncio.sleep(0)
            if session is not self._session or transport.is_closing():
                return
            self.digest_stats["rounds"] += 1
            self.digest_stats["verified"] += len(verified)
            self.digest_stats["verified_bytes"] += sum(r.end - r.start for r in verified)
            report = session.round_report(verified, bad)
            if report is not None:
                transport.write(encode_digest_report(report))

    def _ack_when_synced(self, session: SlaveSession, transport: asyncio.Transport, offset: int) -> None:
        """Ack ``offset`` once an fdatasync covers it (an ack never counts unsynced bytes): start
        one unless the syncs in flight already cover it (at most MAX_SYNCS_IN_FLIGHT)."""
        self._ack_wanted = max(self._ack_wanted, offset)
        covered = self._syncs[-1][0].target if self._syncs else self.log.synced_offset
        if offset <= covered or len(self._syncs) >= MAX_SYNCS_IN_FLIGHT or self._pool is None:
            return
        s = self.log.begin_log_sync()
        fut = asyncio.get_running_loop().run_in_executor(self._pool, s.run)
        self._syncs.append((s, fut))
        fut.add_done_callback(lambda f: self._synced(f, session, transport))

    def _synced(self, fut: asyncio.Future[None], session: SlaveSession, transport: asyncio.Transport) -> None:
        i = next(i for i, (_, f) in enumerate(self._syncs) if f is fut)
        s, _ = self._syncs.pop(i)
        error = fut.exception() if not fut.cancelled() else asyncio.CancelledError()
        try:
            self.log.finish_log_sync(s, error)
        except Exception as e:  # noqa: BLE001 - FsyncFailed poisons the store: this connection ends
            self._log.error("ha_slave_sync_failed", error=repr(e), maxOffset=self.log.max_offset)
            if not transport.is_closing():
                transport.abort()
            return
        if session is not self._session or transport.is_closing():
            return          # that connection ended: the next handshake acks (and syncs) for itself
        acked = min(self._ack_wanted, self.log.synced_offset)
        if acked > self._ack_sent:
            self._ack_sent = acked
            transport.write(encode_ack(Ack(acked)))
        if self._ack_wanted > self.log.synced_offset:
            self._ack_when_synced(session, transport, self._ack_wanted)

    def _note_cut(self) -> None:
        d = self.log.divergence
        if d is not None and not d.cut:
            self.log.mark_diverged(d.epoch, d.start, d.end, cut=True)

    def _repair_before_fetch(self, session: SlaveSession) -> None:
        """A divergence recorded earlier (by another master's connection, or before a restart):
        the range goes before anything is fetched, so it is fetched again from this master, and a
        repair the master still owes us for it is accepted (issue 58, item 4)."""
        d = self.log.divergence
        if d is None or d.cut:
            return      # cut already: being fetched again (verified or refetched clears it)
        if session.digests is not None:
            # a master that quarantined us may still send the repair for it: accepted, a no-op
            session.digests.mismatch = RangeDigest(d.epoch, d.start, d.end, 0)
        if self.log.max_offset > d.start:
            cut_at_or_below(self.log, d.start)
        self._note_cut()
        self._log.warning("diverged_range_cut", epoch=d.epoch, rangeStart=d.start, rangeEnd=d.end,
                          maxOffset=self.log.max_offset, note="fetching it again from the master")

    def _make_durable(self, ack) -> None:
        """With ``sync_before_ack`` an ack never counts a byte this replica has not fsynced: the
        master counts it as a durable copy. Asked of the log itself, not remembered here: bytes a
        failed read appended (a later frame of it refused, a write error) and the log a previous
        connection left are unsynced too, and the handshake's ack would otherwise count them
        (issue 58, item 2). A failed fsync raises (the store is poisoned: no later ack)."""
        if self.sync_before_ack and ack.slave_max_offset > self.log.synced_offset:
            self.log.sync_log()

    def _handshake_done(self, session: SlaveSession, writer: asyncio.Transport, a) -> None:
        self.master_epoch = session.master_epoch
        self._make_durable(a)
        self._ack_wanted = self._ack_sent = a.slave_max_offset
        if session.resynced_from is not None:
            self._log.warning("resync_from_master_first_offset", masterEpoch=session.master_epoch,
                              offset=session.resynced_from,
                              note="our whole log was older than the master's retained history")
        self._log.info("ha_slave_handshake_done", masterEpoch=session.master_epoch,
                       truncatedTo=session.truncated_to, maxOffset=self.log.max_offset)
        writer.write(encode_ack(a))   # the start position goes out before any transfer


class _SlaveProtocol(asyncio.BufferedProtocol):
    """The slave connection. The event loop receives straight into the
    frame decoder's buffer (get_buffer -> recv_into), and every arrival runs the sans-IO session
    at once: a StreamReader would copy each byte twice more and wake a task per read. Only the
    end of the connection (its reason) reaches HASlave._connect_once, through ``done``."""

    def __init__(self, slave: HASlave, session: SlaveSession, dec: SlaveSideDecoder) -> None:
        self.slave = slave
        self.session = session
        self.dec = dec
        self.chunk = slave.config.read_chunk_size
        self.loop = asyncio.get_running_loop()
        self.done: asyncio.Future = self.loop.create_future()
        # the reason may arrive after HASlave stopped waiting (stop, cancel): always retrieved
        self.done.add_done_callback(lambda f: f.cancelled() or f.exception())
        self.last_heard = self.loop.time()
        self.transport: asyncio.Transport | None = None
        self._scratch: bytearray | None = None

    def connection_made(self, transport) -> None:
        self.transport = transport

    def get_buffer(self, sizehint: int):
        if not self.done.done():
            try:
                return self.dec.recv_buffer(self.chunk)
            except FrameError as e:
                self._end(e)
        # ended: whatever still arrives before the close lands in a scratch buffer and is dropped
        if self._scratch is None:
            self._scratch = bytearray(64 * 1024)
        return self._scratch

    def buffer_updated(self, nbytes: int) -> None:
        if self.done.done():
            return
        self.dec.received(nbytes)
        self.last_heard = self.loop.time()
        try:
            assert self.transport is not None
            self.slave._on_bytes(self.session, self.dec, self.transport)
        except Exception as e:  # noqa: BLE001 - protocol, offset and store errors end this connection only
            self._end(e)

    def eof_received(self) -> bool:
        self._end(ConnectionResetError("master closed the connection"))
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self._end(exc or ConnectionResetError("connection closed"))

    def _end(self, exc: BaseException) -> None:
        if not self.done.done():
            self.done.set_exception(exc)
        if self.transport is not None and not self.transport.is_closing():
            self.transport.abort()
