"""StoreLogNode: the controller's replicated log on an external store, behind the same surface the
controller node uses of RaftNode (controller/consensus.py).

Every node applies the store's log in index order to its state machine, as a Raft follower applies
committed entries: the leader applies its own entries once their fenced write committed, the others
tail the log every ``poll_ms``. A node that becomes leader first applies everything up to the
store's last index, then writes. Writes are batched (one fenced transaction per batch, like one
Raft append); a write whose outcome is unknown (the store went away mid-commit) makes the node
re-read the log before it writes again, so its state never diverges from the store.

Membership is static (the ``peers`` of the configuration); leadership moves only by lease expiry.
The store calls block, so they run on two worker threads of this node: one for the lock (renewals
must not wait behind a long log write), one for the log."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from autoswitch.controller.consensus import StateMachine
from autoswitch.controller.consensus.errors import NotLeader, ProposalTimeout, QuorumUnavailable, RaftStopped
from autoswitch.controller.consensus.membership import Membership

from autoswitch.base import supervise
from autoswitch.base.log import get_logger
from autoswitch.base.waits import cancel_and_wait, wait_event

from .base import Store
from .config import StoreBackendConfig
from .errors import Fenced, StoreCorrupt, StoreError, StoreUnavailable
from .lock import LeaderLease

# How often an unavailable store is reported (one log line per this many seconds at most).
_REPORT_EVERY_S = 5.0
# How long a starting node waits for its store to answer before it gives up.
START_WAIT_S = 60.0


class _Pending:
    __slots__ = ("data", "fut")

    def __init__(self, data: bytes, fut: asyncio.Future) -> None:
        self.data = data
        self.fut = fut


class StoreLogNode:
    def __init__(self, node_id: str, peers: dict[str, str], state_machine: StateMachine, cfg: StoreBackendConfig,
                 store: Store, membership: Membership, *, min_log_index: int = 0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        """``min_log_index``: an index this node is known to have applied (its event history); a
        store whose log ends before it lost committed entries, and start refuses."""
        self.node_id = node_id
        self.min_log_index = min_log_index
        self.addrs = dict(peers)
        self.sm = state_machine
        self.cfg = cfg
        self.store = store
        self._membership = membership
        self.clock = clock
        self.lease = LeaderLease(node_id, cfg.lease_ms)
        self.log = get_logger("store", node=node_id, backend=store.kind)
        self.applied = 0
        self._snap_index = 0
        self._ready_term = 0               # the term in which this node caught up and may write
        self._unknown_outcome = False      # a write's commit is in doubt: re-read before writing
        self._queue: list[_Pending] = []
        self._wake = asyncio.Event()
        self._lock_wake = asyncio.Event()
        self._apply_lock = asyncio.Lock()
        self._tasks: list[asyncio.Task] = []
        self._stopped = False
        self._silenced: str | None = None      # the state hash check found our state differs
        self._lock_ex = ThreadPoolExecutor(1, thread_name_prefix=f"store-lock-{node_id}")
        self._log_ex = ThreadPoolExecutor(1, thread_name_prefix=f"store-log-{node_id}")
        self._last_report = 0.0

    def _now_ms(self) -> int:
        return int(self.clock() * 1000)

    async def _call(self, ex: ThreadPoolExecutor, fn, *args):
        return await asyncio.get_running_loop().run_in_executor(ex, fn, *args)

    # ---------------------------------------------------------------- lifecycle

    async def start(self) -> None:
        last = await self._first_contact()
        if last < self.min_log_index:
            raise StoreCorrupt(f"the store's controller log ends at {last} but this node applied entries up to "
                               f"{self.min_log_index}: committed entries are gone (another database, or it was "
                               "restored from an older backup); refusing to start", index=last)
        await self._catch_up()
        loop = asyncio.get_running_loop()
        self.store.set_wakeup(lambda: self._wake_lock_loop(loop))
        self._tasks = [loop.create_task(self._lock_loop(), name=f"store-lock-{self.node_id}"),
                       loop.create_task(self._tail_loop(), name=f"store-tail-{self.node_id}"),
                       loop.create_task(self._write_loop(), name=f"store-write-{self.node_id}")]
        for t in self._tasks:       # each runs until stop()
            supervise.essential_task(t, t.get_name(), lambda: not self._stopped, self.log)
        self.log.info("store_node_started", applied=self.applied, lease_ms=self.cfg.lease_ms,
                      observer=self.cfg.observer)

    def _wake_lock_loop(self, loop: asyncio.AbstractEventLoop) -> None:
        """From the store's own thread (a ZooKeeper watch): look at the lock now."""
        with contextlib.suppress(RuntimeError):       # the loop is already closed: we are stopping
            loop.call_soon_threadsafe(self._lock_wake.set)

    async def _first_contact(self) -> int:
        """Create the tables if needed and read the log's end, retrying while the store is not
        reachable yet (started together with the controllers), at most START_WAIT_S."""
        deadline = time.monotonic() + START_WAIT_S
        delay = 0.1
        while True:
            try:
                await self._call(self._log_ex, self.store.create_schema)
                return await self._call(self._log_ex, self.store.last_index)
            except StoreUnavailable as e:
                if time.monotonic() + delay > deadline:
                    raise
                self._report("store_unavailable_at_start", e)
                await asyncio.sleep(delay)
                delay = min(2 * delay, 2.0)

    async def stop(self) -> None:
        self._stopped = True
        await cancel_and_wait(self._tasks)
        self._fail_queue(RaftStopped("controller node is stopped"))
        self._lock_ex.shutdown(wait=False, cancel_futures=True)
        self._log_ex.shutdown(wait=False, cancel_futures=True)
        await asyncio.get_running_loop().run_in_executor(None, self.store.close)

    # ---------------------------------------------------------------- facts (RaftNode's surface)

    @property
    def is_leader(self) -> bool:
        term = self.lease.leading(self._now_ms())
        return not self._stopped and term != 0 and term == self._ready_term

    @property
    def leader_id(self) -> str | None:
        if self.lease.leading(self._now_ms()):
            return self.node_id
        owner = self.lease.owner
        return owner if owner != self.node_id else None

    @property
    def term(self) -> int:
        return self.lease.term

    @property
    def catching_up(self) -> bool:
        return False        # the store holds the log; a node never has one of its own to lose

    @property
    def membership(self) -> Membership:
        return self._membership

    def status(self) -> dict:
        return {"node": self.node_id, "role": "leader" if self.is_leader else "follower", "term": self.term,
                "leader": self.leader_id, "commit": self.applied, "applied": self.applied,
                "last_index": self.applied, "snapshot_index": self._snap_index, "peers": {},
                "voters": list(self._membership.voter_ids), "learners": [], "config_index": 0,
                "backend": self.store.kind}

    def applied_conf(self) -> tuple[int, Membership, bool]:
        return 0, self._membership, True      # static: the configuration is always in force

    def promotable(self) -> list[str]:
        return []

    def conf_change_blocked(self) -> str | None:
        return "static_membership"

    def voters_settled(self) -> tuple[int | None, int]:
        return -(1 << 62), 0                  # static: the voters stood from the beginning

    async def propose_membership(self, conf: Membership, timeout_s: float) -> None:
        raise QuorumUnavailable("controller membership is static with a store backend: change peers and restart",
                                reason="static_membership")

    async def transfer_leadership(self, to: str, timeout_s: float | None = None) -> None:
        raise QuorumUnavailable("a store backend moves leadership only when the lock expires "
                                "(stop the leader to move it)", reason="not_supported")

    def _not_leader(self) -> NotLeader:
        lid = self.leader_id
        return NotLeader(lid, self.addrs.get(lid) if lid else None)

    # ---------------------------------------------------------------- the lock

    def _report(self, event: str, e: BaseException) -> None:
        now = time.monotonic()
        if now - self._last_report >= _REPORT_EVERY_S:
            self._last_report = now
            self.log.warning(event, error=str(e), kind=type(e).__name__, term=self.term)

    def set_no_campaign(self, on: bool) -> None:
        """Controller maintenance is for the Raft backend (the operations refuse it here): no-op."""

    def silence(self, reason: str) -> None:
        """The state hash check found our state differs: never take the lock again; a leader
        stops writing (its lock runs out and another member takes it)."""
        if self._silenced is None:
            self.log.error("store_node_silenced", reason=reason)
        self._silenced = reason
        self._lost("state_corrupt")

    async def _lock_loop(self) -> None:
        period = self.cfg.heartbeat_ms / 1000
        while not self._stopped:
            if self._silenced is not None:
                await asyncio.sleep(period)
                continue
            sent = self._now_ms()
            try:
                out = await self._call(self._lock_ex, self.store.lock_round, self.node_id, self.cfg.lease_ms,
                                       self.cfg.observer, sent)
            except StoreError as e:
                self._report("store_lock_unavailable", e)
                if self.lease.expire(self._now_ms()):
                    self._lost("lease_expired_store_unavailable")
            else:
                became, stopped = self.lease.observe(out)
                if stopped:     # (and became: our own expired lock re-taken in a new term)
                    self._lost("lock_taken" if out.row is not None and out.row.owner != self.node_id else "lock_lost",
                               resign=not became)
                if became:
                    asyncio.get_running_loop().create_task(self._become_leader(self.lease.leading(self._now_ms())))
            if self.lease.expire(self._now_ms()):
                self._lost("lease_expired")
            await wait_event(self._lock_wake, period)      # or earlier, when the store says so
            self._lock_wake.clear()

    async def _become_leader(self, term: int) -> None:
        """Apply everything the store holds before writing in ``term`` (a deposed leader's last
        batch may have committed just before our takeover)."""
        try:
            await self._catch_up()
        except StoreError as e:
            self._report("store_catch_up_failed", e)
            return
        if self.lease.leading(self._now_ms()) == term:
            self._ready_term = term
            self.log.info("store_leader", term=term, applied=self.applied)
            self._wake.set()

    def _lost(self, why: str, resign: bool = True) -> None:
        """Stop writing in the current term: queued proposals answer NOT_LEADER."""
        if self._ready_term:
            self.log.warning("store_leadership_lost", reason=why, term=self._ready_term)
        self._ready_term = 0
        if resign:
            self.lease.resign()
        self._fail_queue(self._not_leader())

    # ---------------------------------------------------------------- applying the log

    async def _catch_up(self) -> int:
        """Apply the store's log from ``applied + 1`` to its end (restoring the snapshot first when
        the log was trimmed past us); returns how many entries were applied."""
        n = 0
        async with self._apply_lock:
            while True:
                snap_index, entries = await self._call(self._log_ex, self.store.read, self.applied + 1,
                                                       self.cfg.max_read_entries)
                gap = entries[0].index > self.applied + 1 if entries else snap_index > self.applied
                if gap:
                    snap = await self._call(self._log_ex, self.store.load_snapshot)
                    if snap is None or snap.index <= self.applied or entries and snap.index + 1 < entries[0].index:
                        raise StoreCorrupt(f"the log resumes after {self.applied} with a hole no snapshot covers",
                                           index=self.applied)
                    self.sm.restore(snap.data)
                    self.applied = self._snap_index = snap.index
                    self.log.info("store_snapshot_restored", index=snap.index)
                    continue
                if not entries:
                    return n
                for e in entries:
                    self.sm.apply(e.index, e.data)
                    self.applied = e.index
                self.sm.after_apply_batch()
                n += len(entries)

    async def _tail_loop(self) -> None:
        period = self.cfg.poll_ms / 1000
        while not self._stopped:
            if not self._ready_term or self._unknown_outcome:
                try:
                    await self._catch_up()
                    self._unknown_outcome = False
                except StoreCorrupt as e:
                    self.log.error("store_corrupt", error=str(e), applied=self.applied)
                    await asyncio.sleep(1.0)
                except StoreError as e:
                    self._report("store_read_unavailable", e)
                except Exception:   # a bug in applying must not end the follower's loop for good
                    self.log.error("store_apply_failed", exc_info=True, applied=self.applied)
                    await asyncio.sleep(1.0)
            await asyncio.sleep(period)

    # ---------------------------------------------------------------- writes

    def _fail_queue(self, exc: BaseException) -> None:
        q, self._queue = self._queue, []
        for p in q:
            if not p.fut.done():
                p.fut.set_result(exc)

    async def propose(self, data: bytes, timeout_s: float) -> Any:
        out = (await self.propose_many([data], timeout_s))[0]
        if isinstance(out, BaseException):
            raise out
        return out

    async def propose_many(self, datas: list[bytes], timeout_s: float) -> list[Any]:
        """One outcome per entry (apply()'s result or the exception it got), as RaftNode's."""
        if self._stopped:
            raise RaftStopped("controller node is stopped")
        if not self.is_leader:
            raise self._not_leader()
        loop = asyncio.get_running_loop()
        mine = [_Pending(d, loop.create_future()) for d in datas]
        self._queue.extend(mine)
        self._wake.set()
        done, _ = await asyncio.wait([p.fut for p in mine], timeout=timeout_s)
        out = []
        for p in mine:
            if p.fut.done():
                out.append(p.fut.result())
            else:
                p.fut.cancel()
                out.append(ProposalTimeout(f"not committed to the store within {timeout_s}s"))
        return out

    def _take_batch(self) -> list[_Pending]:
        batch: list[_Pending] = []
        size = 0
        max_entries = min(self.cfg.max_batch_entries, self.store.max_batch_entries)
        max_bytes = min(self.cfg.max_batch_bytes, self.store.max_batch_bytes)
        while self._queue and len(batch) < max_entries:
            p = self._queue[0]
            if batch and size + len(p.data) > max_bytes:
                break
            self._queue.pop(0)
            if p.fut.done():            # its caller gave up before it was written: never write it
                continue
            batch.append(p)
            size += len(p.data)
        return batch

    async def _write_loop(self) -> None:
        while not self._stopped:
            await self._wake.wait()
            self._wake.clear()
            while self._queue and not self._stopped:
                term = self._ready_term if self.lease.leading(self._now_ms()) == self._ready_term else 0
                if not term or self._unknown_outcome:
                    self._fail_queue(self._not_leader() if not term else QuorumUnavailable(
                        "the store's state is being re-read after a write of unknown outcome", reason="store_resync"))
                    break
                batch = self._take_batch()
                if batch:
                    await self._write(term, batch)

    async def _write(self, term: int, batch: list[_Pending]) -> None:
        async with self._apply_lock:
            first = self.applied + 1
            datas = [p.data for p in batch]
            try:
                await self._call(self._log_ex, self.store.append, self.node_id, term, first, datas)
            except Fenced as e:
                self.log.warning("store_write_fenced", term=term, first=first, error=str(e))
                for p in batch:
                    if not p.fut.done():
                        p.fut.set_result(self._not_leader())
                self._lost("fenced")
                return
            except StoreUnavailable as e:
                self._report("store_write_unknown", e)
                self._unknown_outcome = True
                for p in batch:
                    if not p.fut.done():
                        p.fut.set_result(ProposalTimeout(f"the store did not confirm the write ({e}); it may "
                                                         "have committed", index=first))
                return
            for i, p in enumerate(batch):
                try:
                    result: Any = self.sm.apply(first + i, p.data)
                except Exception as e:  # noqa: BLE001 - apply's own error goes to its proposer
                    result = e
                self.applied = first + i
                if not p.fut.done():
                    p.fut.set_result(result)
            self.sm.after_apply_batch()
        if self.applied - self._snap_index >= self.cfg.snapshot_every:
            await self._snapshot(term)

    async def _snapshot(self, term: int) -> None:
        index, data = self.applied, self.sm.snapshot()
        try:
            await self._call(self._log_ex, self.store.save_snapshot, self.node_id, term, index, data)
        except StoreError as e:
            self._report("store_snapshot_failed", e)
            return
        self._snap_index = index
        self.log.info("store_snapshot_saved", index=index, bytes=len(data), term=term)

    async def read_index(self, timeout_s: float) -> None:
        """Linearizable-read barrier: the store confirms this node still holds the lock, and
        everything up to the store's last index is applied here."""
        term = self._ready_term
        if not self.is_leader:
            raise self._not_leader()
        try:
            last = await asyncio.wait_for(self._call(self._lock_ex, self.store.verify, self.node_id, term), timeout_s)
        except Fenced:
            self._lost("fenced_read")
            raise self._not_leader() from None
        except (StoreUnavailable, TimeoutError) as e:
            raise QuorumUnavailable(f"the store did not confirm leadership: {e}", reason="store_unavailable") from None
        if last > self.applied:
            await self._catch_up()
