"""The broker process: one MessageStore, a role (fenced | master | slave), HA, the gRPC service.

Role switches are serialized by one lock and take effect only with a higher MasterEpoch
(RocketMQ's ReplicasManager rule), so a delayed or replayed instruction cannot move a
replica backwards. During a switch the role is "fenced": no reads, no writes.

Static-role mode (this module + the CLI) is the ReplicasManager-less deployment: an operator
or a test decides roles with `--role` / `admin switch-role`. The controller-driven
ReplicasManager calls the same two methods.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from autoswitch.broker.config import BrokerConfig, parse_hostport
from autoswitch.broker.health import HealthReport
from autoswitch.broker.long_poll import WakeSignal
from autoswitch.broker.self_watch import SelfWatch, WatchedLog
from autoswitch.broker.stall_watch import StallFacts
from autoswitch.broker.traffic import Rates, TrafficMeter
from autoswitch.broker.write_path import GroupFlusher, WritePath

# Imported with the broker, not at its first role switch: importing the HA master's modules
# costs ~30 ms of CPU, which a lazy import added to every handover's write pause (bench-rolling).
from autoswitch.ha.io.master import HAMaster
from autoswitch.ha.io.slave import HASlave
from autoswitch.ha.seams import LocalSyncStateProposer

from autoswitch.base.errors import CorruptionError
from autoswitch.base.limits import MAX_SWITCH_HOLDS
from autoswitch.base.log import get_logger
from autoswitch.base.tls import client_ssl_context, server_ssl_context
from autoswitch.base.write_errors import BadRequest, Fenced, NotMaster, StaleEpoch

if TYPE_CHECKING:
    from autoswitch.broker.replicas.replicas_adapter import ReplicasAdapter
    from autoswitch.ha.seams import ReplicaRegistry, SyncStateProposer

Role = Literal["master", "slave", "fenced"]
RoleHook = Callable[[str, int], Awaitable[None] | None]

DIGEST_CHUNK_BYTES = 1024 * 1024
MAX_DIGEST_BYTES = 4 * 1024 * 1024 * 1024
LOG_RANGES_MAX = 1024           # ranges per LogRanges answer


@dataclass(frozen=True)
class ControllerSeams:
    """What controller mode hands the broker, once, before the ReplicasManager starts (the process
    that builds both wires them: autoswitch.broker.process). ``write_fence``: the core's reason
    while writes must not be acknowledged (lease, deposed, a handover in doubt), checked before the
    append and again before an OK reply; ``proposer``: the SyncStateSet proposals HAMaster makes;
    ``registry``: who may handshake on the HA port; ``replicas``: the adapter itself (status, the
    run marker, handovers)."""

    write_fence: Callable[[], str | None]
    proposer: SyncStateProposer | None = None
    registry: ReplicaRegistry | None = None
    replicas: ReplicasAdapter | None = None


class Broker:
    """One broker's log, roles and HA. Static mode as constructed; controller mode once
    ``enter_controller_mode`` handed it the ReplicasManager's seams."""

    def __init__(self, cfg: BrokerConfig, fatal: Callable[[str], None] | None = None) -> None:
        """``fatal(reason)``: ends the process after an error it must not outlive (a failed fsync);
        None in-process (the store still refuses every later call)."""
        from autoswitch.broker.storage.store import MessageStore

        self.fatal = fatal
        self.cfg = cfg
        self.group = cfg.group
        self.log = get_logger("broker", group=cfg.group, brokerId=cfg.known_broker_id)
        self._broker_id = cfg.broker_id
        # Static mode: the configured id is ours. Controller mode: unknown until registration names
        # it (the setter below); until then nothing may announce us under the placeholder id.
        self.broker_id_known = asyncio.Event()
        if not cfg.controller_mode:
            self.broker_id_known.set()
        # keys `admin broker-config-set` changed since this process started (broker-config says so)
        self.runtime_changed_keys: set[str] = set()
        # Controller mode (enter_controller_mode): the ReplicasAdapter (status, marker, handovers)
        self.replicas: ReplicasAdapter | None = None
        self._fence_listeners: list[Callable[[str | None], None]] = []  # e.g. re-register the route
        self.resume_own_epoch = False  # controller mode: see become_master
        self._unfinished_master_epoch = 0  # appended to the EpochFile by a become_master that then failed
        # Built (and so checked) at start: a bad [ha] key stops the start (exit 2) instead of an
        # elected master failing every role change and never serving.
        self.ha_config = cfg.ha_config()
        cfg.data_path.mkdir(parents=True, exist_ok=True)
        self.store = MessageStore(cfg.data_path, cfg.store_config(), on_fsync_failed=self._fsync_failed)
        self.confirm_signal = WakeSignal(cfg.max_waiting_consumes)
        self.role_signal = WakeSignal(64)   # role changes (a handover waits for its step-down)
        self.switch_signal = WakeSignal(MAX_SWITCH_HOLDS)   # role or fence changed: held produces look again
        self.store.on_confirm_advanced = self.confirm_signal.pulse
        self.role: Role = "fenced"
        self.master_epoch = 0
        self.master_ha_addr: tuple[str, int] | None = None
        self.master_addr: str | None = cfg.master_addr
        self.ha_master: HAMaster | None = None
        self.ha_slave: HASlave | None = None
        self.write_path: WritePath | None = None
        # What the loop is doing on disk, and the thread that gives the master role up when it
        # or its loop hangs (broker/stall_watch.py), and its health signals (broker/self_watch.py)
        self.self_watch = SelfWatch(cfg, self._stall_facts, lambda: self.log.bind(epoch=self.master_epoch,
                                                                                   role=self.role))
        self.io_watch = self.self_watch.io
        self.master_since = 0.0
        self.flusher = GroupFlusher(self.store, cfg.flush, cfg.flush_interval_ms / 1000.0, self.io_watch,
                                    on_flushed=self._flushed, sync_watch=self.self_watch.sync_io)
        # fsync before every acknowledgement, as master (group commit or per-append) and as slave
        # (before each ack to the master): what a power cut cannot take (docs/replicas-manager.md)
        self.durable_acks = cfg.flush == "sync" or self.store.config.flush_mode == "sync"
        self.switch_lock = asyncio.Lock()     # held while the role switches (service.py waits on it)
        self._hooks: list[RoleHook] = []
        # The SyncStateProposer HAMaster uses; None: static mode, the master is the authority
        # (LocalSyncStateProposer). Controller mode: the ReplicasManager's (ControllerSeams).
        self.proposer: SyncStateProposer | None = None
        # Controller mode: who may handshake on the HA port (None: static mode, anyone).
        self.replica_registry: ReplicaRegistry | None = None
        # The write fence (ControllerSeams.write_fence); None: static mode, never fenced.
        self.write_fence: Callable[[], str | None] | None = None
        self.started_at = time.monotonic()
        self.produced_msgs = 0
        self.consumed_msgs = 0
        self.traffic = TrafficMeter(int(time.time() * 1000))   # rates for heartbeats (broker/traffic.py)
        self._closed = False
        self.log.info(
            "store_opened",
            max_offset=self.store.max_offset,
            min_offset=self.store.min_offset,
            epochs=[(e.epoch, e.start_offset) for e in self.store.epochs.entries()],
        )

    @property
    def broker_id(self) -> int:
        return self._broker_id

    def adopt_broker_id(self, broker_id: int) -> None:
        """Controller mode replaces the configured id by the registered one before the first role;
        every later log line carries the real id, and routes wait for it (broker_id_known)."""
        assert broker_id >= 1, broker_id
        self._broker_id = broker_id
        self.log = get_logger("broker", group=self.group, brokerId=broker_id)
        self.broker_id_known.set()

    # ----------------------------------------------------------------- lifecycle

    def enter_controller_mode(self, seams: ControllerSeams) -> None:
        """Called once, before the ReplicasManager starts: from now on the controllers name this
        broker's roles and epochs, so a fresh process may resume the MasterEpoch the controllers
        name it master of (become_master), and writes pass the core's fence."""
        assert self.write_fence is None and self.role == "fenced", "controller mode is entered once, before a role"
        self.write_fence = seams.write_fence
        self.proposer = seams.proposer
        self.replica_registry = seams.registry
        self.replicas = seams.replicas
        self.resume_own_epoch = True

    def add_role_hook(self, hook: RoleHook) -> None:
        """Called after every role change with (role, master_epoch) (the role-switch hooks)."""
        self._hooks.append(hook)

    def traffic_rates(self) -> Rates:
        return self.traffic.rates(int(time.time() * 1000))

    def count_produced(self, n: int, topic: str) -> None:
        self.produced_msgs += n
        self.traffic.count(0, topic, n, int(time.time() * 1000))

    def count_consumed(self, n: int, topic: str) -> None:
        self.consumed_msgs += n
        if n:
            self.traffic.count(1, topic, n, int(time.time() * 1000))

    def add_fence_listener(self, listener: Callable[[str | None], None]) -> None:
        """Called with the reason whenever the write fence goes up, with None when it comes down."""
        self._fence_listeners.append(listener)

    async def start(self) -> None:
        self.flusher.start()
        self.self_watch.start()

    def health_report(self) -> HealthReport:
        return self.self_watch.report()

    def diverged(self) -> bool:
        """This replica's range digests found bytes that differ from its master's, not repaired and
        re-verified yet (durable: across role changes and restarts, broker/storage/divergence.py)."""
        return self.store.divergence is not None

    def _stall_facts(self, now: float) -> StallFacts:
        """For the watchdog thread: plain reads of state the loop writes (it may be frozen)."""
        progress = None
        ha = self.ha_master
        if ha is not None:
            t = ha.tracker
            for b in tuple(t.sync_state_set):
                r = t.replicas.get(b)
                if b != self._broker_id and r is not None and r.connected and r.progress_at is not None:
                    progress = r.progress_at if progress is None else max(progress, r.progress_at)
        w, g = self.io_watch, self.self_watch.sync_io
        # the disk operation in progress longest: the loop's, or the group commit thread's fdatasync
        op, since = (g.op, g.since) if g.since and (not w.since or g.since < w.since) else (w.op, w.since)
        return StallFacts(now, op, since, self.role == "master", self.master_since, progress, w.loop_at)

    async def stop(self) -> None:
        if self._closed:
            return
        self._closed = True
        await self.self_watch.stop()
        async with self.switch_lock:
            self.role = "fenced"
            await self._stop_replication()
            await self.flusher.stop()
            self.store.close()
        self.log.info("broker_stopped", max_offset=self.store.max_offset)

    # ----------------------------------------------------------------- role switch

    def last_local_epoch(self) -> int:
        """The newest MasterEpoch in this replica's EpochFile (0: none): a master's epoch starts above it."""
        last = self.store.epochs.last()
        return last.epoch if last is not None else 0

    async def become_master(
        self,
        master_epoch: int,
        sync_state_set: frozenset[int] = frozenset(),
        sync_state_set_epoch: int = 0,
    ) -> None:
        async with self.switch_lock:
            last_local = self.last_local_epoch()
            # Resume: a fresh process (no role taken yet) told to master the epoch its own EpochFile
            # ends with was that epoch's master before a restart the controller did not notice.
            # The entry is already there; appending it again would fail and refusing would leave
            # the group without a master (RocketMQ ignores the duplicate entry the same way).
            # Only in controller mode: there the controller's ReplicaInfo names THIS broker master of
            # that epoch. The EpochFile cannot tell a former master from a former slave of the same
            # epoch, so a static switch-role keeps refusing it.
            resume = (self.resume_own_epoch and self.master_epoch == 0 and master_epoch == last_local
                      and last_local > 0)
            # Also a retry of this process's own become_master that appended the epoch and then
            # failed (e.g. its HA port was taken for a moment): refusing it as stale would leave
            # the group without a master until another election (bench-failover found it).
            resume = resume or (master_epoch == last_local == self._unfinished_master_epoch > 0)
            floor = max(self.master_epoch, last_local)
            if master_epoch <= floor and not resume:
                raise StaleEpoch(
                    f"become_master epoch {master_epoch} is not higher than {floor}",
                    epoch=master_epoch, current=floor,
                )
            old_role = self.role
            self.role = "fenced"
            await self._stop_replication()
            # The log ends on a whole record (recovery and append_raw guarantee it); truncating at
            # max_offset drops EpochFile entries that start past the end (a crash between epoch
            # append and data) while keeping a zero-message epoch that starts exactly there.
            end = self.store.max_offset
            self.store.truncate(end)
            if not resume:
                self.store.append_epoch(master_epoch, end)
            self._unfinished_master_epoch = master_epoch
            self.flusher.reset()
            self.flusher.flush_now()
            sss = frozenset(sync_state_set) or frozenset({self.broker_id})
            if self.broker_id not in sss:
                raise BadRequest(f"SyncStateSet {sorted(sss)} does not contain the master {self.broker_id}")
            host, port = parse_hostport(self.cfg.ha_listen, "ha_listen")
            ha = HAMaster(
                self.store,
                self.ha_config,
                self.broker_id,
                self.group,
                master_epoch,
                sss,
                sync_state_set_epoch or 1,
                self.proposer if self.proposer is not None else LocalSyncStateProposer(),
                fenced=lambda: self.fence_reason() is not None,
                registry=self.replica_registry,
                bind_identities=self.cfg.auth,
                degraded=lambda: self.self_watch.health.degraded,
                zone=self.cfg.zone,
                durable_own=self.durable_acks,
            )
            await ha.start(host, port, ssl=server_ssl_context(self.cfg.tls) if self.cfg.tls.enabled else None,
                           accept_plaintext=self.cfg.tls.accept_plaintext)
            self.ha_master = ha
            self.master_epoch = master_epoch
            self.master_ha_addr = None
            self.master_addr = self.cfg.listen
            self.write_path = WritePath(
                self.store, ha, self.flusher, self.cfg, master_epoch, self.broker_id,
                self.log.bind(epoch=master_epoch), self.io_watch, fence=self.fence_reason,
            )
            self.master_since = time.monotonic()
            self.role = "master"
            self._unfinished_master_epoch = 0
            self.log.info(
                "role_changed", old_role=old_role, role="master", epoch=master_epoch,
                start_offset=end, sync_state_set=sorted(sss), resumed=resume,
            )
        await self._run_hooks()

    async def become_slave(
        self, master_epoch: int, master_ha_addr: tuple[str, int], master_addr: str | None = None,
        master_id: int = 0, replicate: bool = True,
    ) -> None:
        """``master_id``: the controller's master (controller mode); the HA handshake must then be
        from that master at ``master_epoch``. ``replicate`` False (a broker stopping after its
        handover): clients are sent to the new master, but no HA connection is opened."""
        async with self.switch_lock:
            if master_epoch <= self.master_epoch or master_epoch < self.last_local_epoch():
                floor = max(self.master_epoch + 1, self.last_local_epoch())
                raise StaleEpoch(
                    f"become_slave epoch {master_epoch} is stale (need >= {floor})",
                    epoch=master_epoch, current=self.master_epoch,
                )
            old_role = self.role
            self.role = "fenced"
            await self._stop_replication()
            if replicate:
                ha = HASlave(WatchedLog(self.store, self.io_watch), self.ha_config, self.broker_id, self.group,
                             master_ha_addr,
                             ssl=functools.partial(client_ssl_context, self.cfg.tls) if self.cfg.tls.dials_tls else None,
                             bind_identities=self.cfg.auth, on_caught_up=self._slave_caught_up,
                             sync_before_ack=self.durable_acks,
                             expect_master=(master_id, master_epoch) if master_id else None,
                             incarnation=self.replicas.core.incarnation if self.replicas is not None else "")
                await ha.start()
                self.ha_slave = ha
            self.master_epoch = master_epoch
            self.master_ha_addr = master_ha_addr
            self.master_addr = master_addr or None
            self.role = "slave"
            self.log.info("role_changed", old_role=old_role, role="slave", epoch=master_epoch,
                          master_ha=f"{master_ha_addr[0]}:{master_ha_addr[1]}", max_offset=self.store.max_offset,
                          replicating=replicate)
        await self._run_hooks()

    def _flushed(self) -> None:
        if self.ha_master is not None:
            self.ha_master.on_flushed()

    def _fsync_failed(self, error: Exception) -> None:
        """The store refuses every call from now on (MessageStore._poison); the process must end
        and its next start be unclean: ``fatal`` (the process's composition) does both."""
        self.role = "fenced"
        if self.fatal is not None:
            self.fatal(f"fsync failed: {error}")

    def _slave_caught_up(self, master_epoch: int) -> None:
        if self.replicas is not None:
            self.replicas.slave_caught_up(master_epoch)

    async def become_fenced(self, master_epoch: int, reason: str = "") -> None:
        """Demotion without a successor (deposed master): no reads, no writes, no HA.

        Same-epoch fencing is allowed: it only takes powers away."""
        async with self.switch_lock:
            if master_epoch < self.master_epoch:
                raise StaleEpoch(
                    f"become_fenced epoch {master_epoch} < current {self.master_epoch}",
                    epoch=master_epoch, current=self.master_epoch,
                )
            old_role = self.role
            self.role = "fenced"
            await self._stop_replication()
            self.master_epoch = master_epoch
            self.log.warning("role_changed", old_role=old_role, role="fenced", epoch=master_epoch, reason=reason)
        await self._run_hooks()

    async def _stop_replication(self) -> None:
        if self.write_path is not None:
            self.write_path.close()
            self.write_path = None
        if self.ha_master is not None:
            ha, self.ha_master = self.ha_master, None
            await ha.stop()
        if self.ha_slave is not None:
            slave, self.ha_slave = self.ha_slave, None
            await slave.stop()

    async def _run_hooks(self) -> None:
        self.confirm_signal.wake_all()  # long-polling consumers answer under the new role
        self.role_signal.wake_all()
        self.switch_signal.wake_all()
        for hook in self._hooks:
            try:
                r = hook(self.role, self.master_epoch)
                if asyncio.iscoroutine(r):
                    await r
            except Exception as e:  # noqa: BLE001 - a user hook must not wedge the broker in a half-switched state
                self.log.error("role_hook_failed", hook=repr(hook), error=repr(e))

    # ----------------------------------------------------------------- reads

    def fence_reason(self) -> str | None:
        return self.write_fence() if self.write_fence is not None else None

    @property
    def confirm_offset(self) -> int:
        """Commit point; consumers never read past it. A master's is its HA commit point
        (ha/commit_point.py: held while the master is fenced); a slave's is what its master sent."""
        if self.role == "master" and self.ha_master is not None:
            return self.ha_master.confirm_offset
        return min(self.store.confirm_offset, self.store.max_offset)

    def log_position(self) -> tuple[int, int, int]:
        """(maxOffset, confirmOffset, last EpochFile MasterEpoch or 0): what heartbeats report."""
        last = self.store.epochs.last()
        return self.store.max_offset, self.confirm_offset, int(last.epoch) if last is not None else 0

    def learn_sync_state_set(self, sync_state_set: frozenset[int], sync_state_set_epoch: int) -> None:
        """The controller's SyncStateSet for this group (a master's HA tracker adopts it)."""
        if self.ha_master is not None:
            self.ha_master.update_sync_state_set(sync_state_set, sync_state_set_epoch)

    def require_readable(self) -> None:
        if self.role == "fenced":
            raise Fenced("broker has no role yet (or is switching)")

    def fence_changed(self, reason: str | None) -> None:
        """The write fence (its owner: ``write_fence``) went up with ``reason`` or came down (None)."""
        # the frozen commit point first: a listener that fails must not keep it moving
        if reason is not None and self.role == "master" and self.ha_master is not None:
            # hold the commit point at this instant (not at the next read: acks may arrive between)
            self.ha_master.commit.freeze(self.store.max_offset)
        self.log.warning("write_fence", fenced=reason is not None, reason=reason, epoch=self.master_epoch)
        for listener in self._fence_listeners:
            listener(reason)
        self.switch_signal.wake_all()

    # ----------------------------------------------------------------- for a handover (rm_handover.py)

    def handover_view(self) -> tuple[dict[int, int], int] | None:
        ha = self.ha_master
        if self.role != "master" or ha is None or self.write_path is None:
            return None
        return {b: ha.replica_acked(b) for b in ha.sync_state_set}, self.store.max_offset

    def pause_writes(self) -> None:
        if self.write_path is not None:
            self.write_path.pause()

    def resume_writes(self) -> None:
        if self.write_path is not None:
            self.write_path.resume()

    async def wait_replica(self, broker_id: int, offset: int, timeout_s: float) -> tuple[bool, int]:
        ha = self.ha_master
        if ha is None:
            return False, -1
        ok = await ha.wait_replica(broker_id, offset, timeout_s)
        return ok, ha.replica_acked(broker_id)

    def check_write_fence(self) -> None:
        reason = self.fence_reason()
        if reason:
            raise Fenced(f"writes fenced: {reason}")

    def writer(self) -> WritePath:
        if self.role == "fenced":
            raise Fenced("broker has no role yet (or is switching)")
        self.check_write_fence()
        if self.role != "master" or self.write_path is None:
            raise NotMaster("this broker is a slave", master_addr=self.master_addr)
        return self.write_path

    async def log_digest(self, from_offset: int, to_offset: int) -> tuple[int, int, str]:
        """sha256 of raw log bytes in [from, to); both must be record boundaries."""
        lo = max(from_offset, self.store.min_offset)
        hi = self.store.max_offset if to_offset < 0 else to_offset
        if hi > self.store.max_offset or lo > hi:
            raise BadRequest(f"range [{lo}, {hi}) outside log [{self.store.min_offset}, {self.store.max_offset})")
        if hi - lo > MAX_DIGEST_BYTES:
            raise BadRequest(f"digest range {hi - lo} bytes over the {MAX_DIGEST_BYTES} limit")
        h = hashlib.sha256()
        off = lo
        while off < hi:
            try:
                chunk = self.store.read_raw(off, DIGEST_CHUNK_BYTES, hi)
            except CorruptionError as e:
                if off != lo:
                    raise
                # The caller's offset, not the log, is wrong (what is on disk there is the middle
                # of a record). Answer like any bad argument and keep the path in our own log.
                self.log.warning("log_digest_refused", from_offset=lo, error=str(e))
                raise BadRequest(f"from_offset {lo} is not a record boundary") from None
            if not chunk:
                raise BadRequest(f"no whole record at {off} before {hi}")
            h.update(chunk)
            off += len(chunk)
            await asyncio.sleep(0)  # keep serving while hashing a big log
        assert off == hi
        return lo, hi, h.hexdigest()

    async def log_ranges(self, from_offset: int, to_offset: int, range_bytes: int) -> tuple[list[Any], int]:
        """The log cut into range digests from ``from_offset`` (a record boundary), as a master
        cuts them (ha/digest.py): up to LOG_RANGES_MAX ranges and MAX_DIGEST_BYTES read per call;
        returns (ranges, where the next call continues)."""
        from autoswitch.ha.digest import RangeBook

        st = self.store
        lo = st.min_offset if from_offset < 0 else from_offset
        hi = st.max_offset if to_offset < 0 else min(to_offset, st.max_offset)
        if not st.min_offset <= lo <= hi:
            raise BadRequest(f"range [{lo}, {hi}) outside log [{st.min_offset}, {st.max_offset})")
        if not 64 <= range_bytes <= 1 << 30:
            raise BadRequest(f"range_bytes {range_bytes} outside [64, 1 GiB]")
        book = RangeBook(st, range_bytes, LOG_RANGES_MAX + 1, 0.0, 0.0, start=lo)
        budget = MAX_DIGEST_BYTES
        try:
            while book.seq < LOG_RANGES_MAX and (n := book.read_next(budget, DIGEST_CHUNK_BYTES, hi)) > 0:
                budget -= n
                await asyncio.sleep(0)  # keep serving while reading a big log
        except CorruptionError as e:
            if book.cursor != lo:
                raise
            self.log.warning("log_ranges_refused", from_offset=lo, error=str(e))
            raise BadRequest(f"from_offset {lo} is not a record boundary") from None
        if book.seq < LOG_RANGES_MAX and budget > 0:
            book.close()
        ranges = [r for _, r in book.history][:LOG_RANGES_MAX]
        return ranges, ranges[-1].end if ranges else lo

    def sync_state_set(self) -> tuple[list[int], int]:
        if self.ha_master is not None:
            return sorted(self.ha_master.sync_state_set), int(self.ha_master.sync_state_set_epoch)
        return [], 0

    def epoch_entries(self) -> list[tuple[int, int, int]]:
        cache = self.store.epochs
        maxo = self.store.max_offset
        return [(e.epoch, e.start_offset, cache.end_offset(e.epoch, maxo)) for e in cache.entries()]
