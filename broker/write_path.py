"""The master's write path: validate -> append one batch -> flush policy -> notify HA -> wait per ack mode.

One writer: appends run on the event-loop thread, and the role, the lease's fence and a
handover's hold are checked again in the same callback as the append, so two batches never
interleave and no append can happen after a role switch began (the switch flips the role
first, under the same loop), once the lease ran out, or while a handover holds writes.

Group append: the writes that arrive in one turn of the event loop are appended together, one
store call (one write to the log and one to each topic's index) for all of them, as they would
be had they come in one request; each request still gets its own records and waits for its own
end offset. A group that the store refuses is appended again request by request, so one bad
request fails only itself. Concurrent one-message producers pay a store call each otherwise
(~22 us per one-message append against ~9 us per message in eights, docs/broker.md).

Ack modes (docs/broker.md):
- ``master``: acked once appended locally (and flushed with ``flush = "sync"``).
- ``all``: every SyncStateSet member has the batch (RocketMQ allAckInSyncStateSet=true).
- ``quorum``: the HA layer's in-sync-replicas rule (minInSyncReplicas members of the set).
For ``all``/``quorum`` a set smaller than ``min_in_sync_replicas`` is refused BEFORE the
append (IN_SYNC_REPLICAS_NOT_ENOUGH, nothing written, like RocketMQ's putMessage check); a
timeout AFTER the append gives FLUSH_SLAVE_TIMEOUT and the batch stays in the log.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol

from autoswitch.broker.config import BrokerConfig
from autoswitch.broker.consumer_offsets import RESERVED_PREFIX
from autoswitch.broker.stall_watch import IoWatch
from autoswitch.broker.storage.store_errors import BadMessage

from autoswitch.base import supervise
from autoswitch.base.limits import MAX_GATE_WAITS, MAX_MSG_ID_BYTES, MAX_TOPIC_BYTES
from autoswitch.base.log import get_logger
from autoswitch.base.waits import cancel_and_wait, wait_event
from autoswitch.base.write_errors import (
    BadRequest,
    Fenced,
    FlushSlaveTimeout,
    InSyncReplicasNotEnough,
    MessageTooLarge,
    NotMaster,
    Overloaded,
    WriteError,
)

# Group commits whose fdatasync may run at once (write_path.GroupFlusher). Two (a group appended
# during one starting its own at once) measured slower here: 70.7k vs 83.2k acked msg/s at one
# replica, CPU per message +20 % (two threads on one ext4 journal; bench/results/produce.md).
MAX_SYNCS_IN_FLIGHT = 1

# Milliseconds since the epoch; year 9999 is far enough and keeps the record field's u64 safe.
MAX_BORN_TS_MS = 253_402_300_799_999


class Store(Protocol):
    @property
    def max_offset(self) -> int: ...
    @property
    def synced_offset(self) -> int: ...

    def append_messages(self, msgs: list[Any]) -> Any: ...
    def flush(self) -> None: ...
    def sync_log(self) -> None: ...
    def begin_log_sync(self) -> Any: ...
    def finish_log_sync(self, s: Any, error: BaseException | None) -> None: ...


class Replicator(Protocol):
    @property
    def sync_state_set(self) -> frozenset[int]: ...

    def notify_appended(self) -> None: ...
    def zone_shortfall(self) -> str | None: ...
    async def wait_for_replicas(self, offset: int, timeout_s: float) -> None: ...


def validate_topic(topic: str) -> WriteError | None:
    """A produce batch's topic (it names the topic once, so it is checked once); returns the error
    instead of raising so a batch reports it per message."""
    if topic.startswith(RESERVED_PREFIX):
        return BadRequest(f"topics starting with {RESERVED_PREFIX!r} are the broker's own (consumer offsets)")
    tb = topic.encode("utf-8")
    if not tb:
        return BadRequest("empty topic")
    if len(tb) > MAX_TOPIC_BYTES:
        return MessageTooLarge(f"topic is {len(tb)} bytes, limit {MAX_TOPIC_BYTES}")
    return None


def validate_fields(body: bytes, msg_id: str, cfg: BrokerConfig, born_ts_ms: int = 0) -> WriteError | None:
    """The per-message check of what each message carries itself (the topic: ``validate_topic``)."""
    if not (0 <= born_ts_ms <= MAX_BORN_TS_MS):
        return BadRequest(f"born_ts_ms {born_ts_ms} outside [0, {MAX_BORN_TS_MS}] (0 = stamped by the broker)")
    mb = msg_id.encode("utf-8")
    if not mb:
        return BadRequest("empty msg_id")
    if len(mb) > MAX_MSG_ID_BYTES:
        return MessageTooLarge(f"msg_id is {len(mb)} bytes, limit {MAX_MSG_ID_BYTES}")
    if len(body) > cfg.max_message_bytes:
        return MessageTooLarge(f"body is {len(body)} bytes, limit {cfg.max_message_bytes}")
    return None


class GroupFlusher:
    """Flush policy driver.

    sync: a writer waits until an fdatasync of the commit log covering its end offset finished.
    Group commit, pipelined: one fdatasync at a time runs on the flusher's own thread (``_sync``),
    started the moment a group is appended (``appended``) or a writer waits, while the event loop
    appends and replicates the next group; when it completes, the writers it covers are released
    and, if more was appended meanwhile, the next one starts at once (RocketMQ's GroupCommitService,
    Kafka's log flusher). Only the commit log's bytes are synced per group (``store.begin_log_sync``:
    what an acknowledgement needs); recovery walks whole records past the checkpoint.
    Both modes flush fully (indexes and checkpoint too) every ``interval`` (async mode relies on
    it; on a slave it is what makes replicated bytes durable), on the loop thread: apart from the
    fdatasync itself, the store is single-threaded by contract.
    """

    def __init__(self, store: Store, mode: str, interval_s: float, io_watch: IoWatch | None = None,
                 on_flushed: Callable[[], None] | None = None, sync_watch: IoWatch | None = None) -> None:
        """``on_flushed``: called after every flush (a durable master's own copy counts up to it).
        ``sync_watch``: what the group commit's thread is doing on disk (the stall watchdog reads
        it beside ``io_watch``, the loop's)."""
        assert mode in ("sync", "async")
        self._on_flushed = on_flushed
        self._store = store
        self._io = io_watch or IoWatch()
        self._sync_io = sync_watch or IoWatch()
        self.mode = mode
        self.interval_s = interval_s
        self.flushed_offset = store.max_offset
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None   # the group commit's threads
        # the fdatasyncs in flight, oldest first: a group appended while one runs starts its own at
        # once (an fdatasync covers every page of the file dirty when it began, so a later one that
        # completes first covers the earlier one's bytes too)
        self._syncs: list[tuple[Any, asyncio.Future[None]]] = []
        self._full_due = 0.0            # loop time of the next full flush (indexes, checkpoint)
        self._kick = asyncio.Event()
        self._task: asyncio.Task | None = None
        self._stopping = False
        self._waiters: list[tuple[int, asyncio.Future]] = []
        self._log = get_logger("broker.flush")
        self.flushes = 0

    def start(self) -> None:
        assert self._task is None
        self._stopping = False
        if self.mode == "sync":
            self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=MAX_SYNCS_IN_FLIGHT,
                                                               thread_name_prefix="group-commit")
        self._task = asyncio.get_running_loop().create_task(self._run(), name="flusher")
        supervise.essential_task(self._task, "flusher", lambda: not self._stopping, self._log)

    async def stop(self) -> None:
        self._stopping = True
        await cancel_and_wait([self._task])
        self._task = None
        if self._syncs:
            await asyncio.wait([f for _, f in self._syncs])     # their callbacks settle the store's account
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
        self.flush_now()

    def flush_now(self, full: bool = True) -> None:
        """fsync what the log holds now, on this thread; ``full``: the indexes and the checkpoint
        too (waits for no group commit in flight: both are whole-log fsyncs)."""
        target = self._store.max_offset
        self._io.begin("fsync")
        try:
            if full:
                self._store.flush()
            else:
                self._store.sync_log()
        finally:
            self._io.end()
        self.flushes += 1
        self._flushed(target)

    def appended(self) -> None:
        """A group was appended (the write path, right after the store call): with flush = "sync"
        its fdatasync starts now, or as soon as the one in flight completes."""
        if self.mode == "sync":
            self._start_sync()

    def _start_sync(self) -> None:
        if len(self._syncs) >= MAX_SYNCS_IN_FLIGHT or self._pool is None or self._stopping:
            return
        covered = self._syncs[-1][0].target if self._syncs else self._store.synced_offset
        if covered >= self._store.max_offset:
            if not self._syncs:
                self._flushed(self._store.max_offset)
            return
        try:
            s = self._store.begin_log_sync()
        except Exception as e:  # noqa: BLE001 - a poisoned or closed store: its waiters fail
            self._fail_waiters(e)
            return
        if not self._syncs:
            self._sync_io.begin("fsync")
        fut = asyncio.get_running_loop().run_in_executor(self._pool, s.run)
        self._syncs.append((s, fut))
        fut.add_done_callback(self._sync_done)

    def _sync_done(self, fut: asyncio.Future[None]) -> None:
        i = next(i for i, (_, f) in enumerate(self._syncs) if f is fut)
        s, _ = self._syncs.pop(i)
        if not self._syncs:
            self._sync_io.end()
        error = fut.exception() if not fut.cancelled() else asyncio.CancelledError()
        try:
            self._store.finish_log_sync(s, error)
        except Exception as e:  # noqa: BLE001 - the store is poisoned (FsyncFailed) or closed: waiters fail
            self._log.error("flush_failed", error=repr(e))
            self._fail_waiters(e)
            return
        self.flushes += 1
        self._flushed(s.target)
        if self._waiters or self._store.max_offset > self.flushed_offset:
            self._start_sync()          # appended meanwhile: the next group's sync starts at once

    def _fail_waiters(self, e: BaseException) -> None:
        for _, f in self._waiters:
            if not f.done():
                f.set_exception(WriteError(f"flush failed: {e!r}"))
        self._waiters = []

    def _flushed(self, target: int) -> None:
        # the store's own word: a sync begun before a cut covers nothing after it (commitlog.finish_sync)
        self.flushed_offset = max(self.flushed_offset, min(target, self._store.synced_offset))
        if self._on_flushed is not None:
            self._on_flushed()
        done = self.flushed_offset
        still = []
        for off, fut in self._waiters:
            if off <= done:
                if not fut.done():
                    fut.set_result(None)
            else:
                still.append((off, fut))
        self._waiters = still

    def reset(self) -> None:
        """After a truncation the flushed offset may be past the end; restart from the log end."""
        self.flushed_offset = min(self.flushed_offset, self._store.max_offset)

    async def wait_flushed(self, offset: int) -> None:
        if self.flushed_offset >= offset:
            return
        fut = asyncio.get_running_loop().create_future()
        self._waiters.append((offset, fut))
        if self.mode == "sync" and self._pool is not None:
            self._start_sync()
        else:
            self._kick.set()
        await fut

    async def _run(self) -> None:
        while True:
            # Both modes also flush fully on the interval: a slave's appends (HA) never wait on the
            # flusher, and must still reach the disk within flush_interval_ms; with group commits
            # the indexes and the checkpoint follow here.
            loop = asyncio.get_running_loop()
            kicked = await wait_event(self._kick, max(0.0, self._full_due - loop.time()))
            self._kick.clear()
            if kicked:
                # Let the writers that are already runnable append first: one fsync for all of them.
                await asyncio.sleep(0)
            full = loop.time() >= self._full_due
            if self._store.max_offset > self.flushed_offset or self._waiters or full:
                try:
                    self.flush_now(full=full)
                    if full:
                        self._full_due = loop.time() + self.interval_s
                except Exception as e:  # noqa: BLE001 - a failed fsync must fail the waiters, not hang them
                    self._log.error("flush_failed", error=repr(e))
                    self._fail_waiters(e)


class Piece(NamedTuple):
    """One request's part of a group append."""

    start_offset: int
    end_offset: int
    records: list[tuple[int, int, str]]     # (phy_offset, queue_offset, msg_id), request order


def split_append(start: int, end: int, records: list, counts: list[int]) -> list[Piece]:
    """One append of several requests' messages (``counts`` each, in order) cut back into the
    requests: each ends where the next one's first record starts (padding before that record,
    at a segment's end, counts as the earlier request's: waiting for a larger offset is safe),
    the last at the append's end."""
    assert sum(counts) == len(records) and all(n > 0 for n in counts), (counts, len(records))
    out: list[Piece] = []
    i = 0
    for k, n in enumerate(counts):
        recs = records[i : i + n]
        i += n
        out.append(Piece(start if k == 0 else recs[0][0], records[i][0] if i < len(records) else end, recs))
    return out


def plan_groups(counts: list[int], max_messages: int) -> list[tuple[int, int]]:
    """Consecutive runs ``[i, j)`` of queued requests (message ``counts``) of at most
    ``max_messages`` messages each; a request is never split."""
    out: list[tuple[int, int]] = []
    i = 0
    while i < len(counts):
        j, n = i + 1, counts[i]
        while j < len(counts) and n + counts[j] <= max_messages:
            n += counts[j]
            j += 1
        out.append((i, j))
        i = j
    return out


@dataclass(frozen=True)
class PutResult:
    records: list[tuple[int, int, str]]   # (phy_offset, queue_offset, msg_id), request order
    start_offset: int
    end_offset: int
    epoch: int


class WritePath:
    """Owned by the Broker while it is master; dropped (never reused) on a role change."""

    def __init__(
        self,
        store: Store,
        replicator: Replicator,
        flusher: GroupFlusher,
        cfg: BrokerConfig,
        epoch: int,
        broker_id: int,
        log: Any,
        io_watch: IoWatch | None = None,
        fence: Callable[[], str | None] | None = None,
    ) -> None:
        self._store = store
        self._fence = fence     # why writes are fenced now (the lease), or None: checked again at the append
        self._io = io_watch or IoWatch()
        self._ha = replicator
        self._flusher = flusher
        self._cfg = cfg
        self.epoch = epoch
        self.broker_id = broker_id
        self._log = log
        self._inflight = 0
        self.closed = False
        self.appended_msgs = 0
        self._gate: asyncio.Event | None = None   # set while a handover holds new writes
        # writes admitted in this turn of the loop, appended together by _append_queued
        self._queued: list[tuple[list[Any], asyncio.Future[Piece | None]]] = []

    def close(self) -> None:
        self.closed = True
        self.resume()

    def pause(self) -> None:
        """Hold new writes (a handover drains the master); writes already appended go on."""
        if self._gate is None:
            self._gate = asyncio.Event()

    def resume(self) -> None:
        """Let held writes go: they append here, or get NOT_MASTER if the role changed meanwhile."""
        gate, self._gate = self._gate, None
        if gate is not None:
            gate.set()

    @property
    def paused(self) -> bool:
        return self._gate is not None

    async def put(self, msgs: list[Any]) -> PutResult:
        """msgs: already validated store Messages. Raises the typed errors above."""
        # A writer released by a failed handover must look again: the next handover may have
        # paused writes before this task ran, and its drain counts on nobody slipping past.
        for _ in range(MAX_GATE_WAITS):
            gate = self._gate
            if gate is not None:
                await gate.wait()   # bounded: the handover resumes in every outcome
                continue
            self._admit(msgs)
            piece = await self._queue(msgs)
            if piece is not None:
                break   # None: a handover paused writes before the group was appended
        else:
            raise Overloaded("writes held by one handover after another")
        self._inflight += 1
        try:
            if self._flusher.mode == "sync":
                await self._flusher.wait_flushed(piece.end_offset)
            if self._cfg.ack_mode != "master":
                t0 = time.monotonic()
                try:
                    await self._ha.wait_for_replicas(piece.end_offset, self._cfg.ack_timeout_s)
                except Exception as e:
                    mapped = _map_ha_error(e)
                    self._log.warning(
                        "produce_not_acked",
                        code=mapped.code,
                        end_offset=piece.end_offset,
                        waited_ms=int((time.monotonic() - t0) * 1000),
                        reason=str(e),
                    )
                    raise mapped from e
        finally:
            self._inflight -= 1
        return PutResult(piece.records, piece.start_offset, piece.end_offset, self.epoch)

    def _admit(self, msgs: list[Any]) -> None:
        """The checks made before anything is appended (nothing is written when one refuses)."""
        if self.closed:
            raise NotMaster("role changed")
        if not msgs:
            raise BadRequest("empty batch")
        if len(msgs) > self._cfg.max_batch_messages:
            raise BadRequest(f"batch of {len(msgs)} messages, limit {self._cfg.max_batch_messages}")
        if self._inflight >= self._cfg.max_inflight_produce:
            raise Overloaded(f"{self._inflight} produce requests in flight")
        if self._cfg.ack_mode != "master":
            sss = self._ha.sync_state_set
            if len(sss) < self._cfg.min_in_sync_replicas:
                raise InSyncReplicasNotEnough(
                    f"SyncStateSet {sorted(sss)} has {len(sss)} members, "
                    f"minInSyncReplicas={self._cfg.min_in_sync_replicas}",
                    sync_state_set=sorted(sss),
                )
            short = self._ha.zone_shortfall()
            if short is not None:
                raise InSyncReplicasNotEnough(f"SyncStateSet {short}", sync_state_set=sorted(sss))

    def _queue(self, msgs: list[Any]) -> asyncio.Future[Piece | None]:
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[Piece | None] = loop.create_future()
        if not self._queued:
            loop.call_soon(self._append_queued)     # after the writes already runnable this turn
        self._queued.append((msgs, fut))
        return fut

    def _append_queued(self) -> None:
        """The group append: the role, the lease's fence and the handover's hold checked again,
        then every write queued this turn (but those whose callers went away) in as few store
        calls as the batch limit allows, and the replicas woken once."""
        queued = [(m, f) for m, f in self._queued if not f.done()]
        self._queued = []
        try:
            fenced = self._fence() if self._fence is not None else None
            if self.closed or fenced or self._gate is not None:
                for _, f in queued:
                    if self.closed:
                        f.set_exception(NotMaster("role changed"))
                    elif fenced:
                        f.set_exception(Fenced(f"writes fenced: {fenced}"))
                    else:
                        f.set_result(None)      # back to the gate
                return
            counts = [len(m) for m, _ in queued]
            for i, j in plan_groups(counts, self._cfg.max_batch_messages):
                self._append_group(queued[i:j], counts[i:j])
            if queued:
                self._flusher.appended()        # flush = "sync": its fdatasync starts now, beside replication
                self._ha.notify_appended()
        finally:
            for _, f in queued:     # a broken invariant (an assert) must not leave a caller waiting
                if not f.done():
                    f.set_exception(WriteError("append failed"))

    def _append_group(self, group: list[tuple[list[Any], asyncio.Future[Piece | None]]], counts: list[int]) -> None:
        try:
            self._io.begin("append")
            try:
                res = self._store.append_messages([m for ms, _ in group for m in ms])
            finally:
                self._io.end()
        except BadMessage as e:
            # Refused while validating, before anything was written; one request may be the
            # cause (a topic over the limit, the group over max_batch_bytes): each alone, as it came.
            if len(group) == 1:
                group[0][1].set_exception(e)
            else:
                for one, n in zip(group, counts, strict=True):
                    self._append_group([one], [n])
            return
        except Exception as e:  # noqa: BLE001 - OSError and the store's other errors: every caller gets it
            for _, f in group:
                f.set_exception(e)
            return
        assert res.end_offset > res.start_offset, "an append must grow the log"
        assert res.end_offset <= self._store.max_offset
        self.appended_msgs += len(res.records)
        for (_, f), piece in zip(group, split_append(res.start_offset, res.end_offset, res.records, counts),
                                 strict=True):
            f.set_result(piece)


def _map_ha_error(e: Exception) -> WriteError:
    if isinstance(e, WriteError):
        return e          # HA's own write errors are the write path's (base/write_errors.py)
    if isinstance(e, TimeoutError):
        return FlushSlaveTimeout(str(e) or "replicas did not ack in time")
    # HAMaster stopped under us (role switch): the batch is in the log but not acked.
    return NotMaster(f"replication interrupted: {e!r}")
