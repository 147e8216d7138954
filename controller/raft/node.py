"""asyncio driver around the sans-IO RaftCore (etcd's ``node.go`` role).

One task owns the core's Ready cycle: send the leader's messages early, persist (fsync in a thread, so the
loop keeps stepping messages and accepting proposals meanwhile: group commit), send replies, apply
committed entries in order and resolve ``propose()`` futures with ``apply()``'s result, answer read-index
barriers, take snapshots every ``snapshot_every`` entries. The network is a ``RaftTransport``
(transport_api.py) handed in by the caller; this module knows no gRPC (``transport.GrpcRaftTransport``).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

from autoswitch.controller.consensus import StateMachine
from autoswitch.controller.consensus.errors import (
    NotLeader,
    ProposalDropped,
    ProposalTimeout,
    QuorumUnavailable,
    RaftError,
    RaftStopped,
)
from autoswitch.controller.consensus.membership import Membership

from autoswitch.base import supervise
from autoswitch.base.fsutil import fsync_dir, write_atomic
from autoswitch.base.log import get_logger
from autoswitch.base.waits import cancel_and_wait, wait_event

from .config import RaftConfig
from .core import RaftCore
from .errors import RaftStorageCorrupt
from .membership import pack_snapshot, unpack_snapshot
from .messages import EntryKind, Message, ReadState, Ready, Role, Snapshot
from .proposals import PENDING, Proposal, ProposeExpired, expire, wake_up
from .storage import FileStorage, Storage
from .transport_api import RaftTransport

# A file in the raft data dir: present while a recovered node may not vote or campaign.
CATCH_UP_MARKER = "catch_up"
_MAX_SEND_PASSES = 4

class RaftNode:
    def __init__(self, node_id: str, peers: dict[str, str], data_dir: Path, state_machine: StateMachine,
                 config: RaftConfig | None = None, *, transport: RaftTransport,
                 seed: int | None = None, storage: Storage | None = None,
                 min_log_index: int = 0, membership: Membership | None = None,
                 on_membership: Callable[[Membership, int], None] | None = None,
                 on_caught_up: Callable[[], None] | None = None) -> None:
        """``min_log_index``: an index this node is known to have applied (the controller's event
        history); a log or snapshot that ends before it lost committed entries, and start refuses.

        ``membership``: the bootstrap configuration (default: every node of ``peers`` a voter); an
        empty one joins a running cluster. The log's newest configuration overrides it; whenever
        the configuration in force changes, the transport follows it and ``on_membership`` hears
        of it (on the event loop)."""
        self.node_id = node_id
        self.bootstrap = membership
        self.on_membership = on_membership
        self.on_caught_up = on_caught_up    # a node that started empty caught up (after that Ready's entries applied)
        self._conf_version = -1
        self.min_log_index = min_log_index
        self.cfg = config or RaftConfig()
        self.addrs = dict(peers)
        self.data_dir = Path(data_dir)
        self.sm = state_machine
        self.seed = seed
        self.log = get_logger("raft", node=node_id)
        self.core: RaftCore | None = None
        self._storage = storage
        self._transport = transport
        self._transport_started = False
        self._task: asyncio.Task | None = None
        self._kicked = False                       # new input since the loop last looked
        self._sleep: asyncio.Future | None = None  # what the loop awaits while idle
        self._stopped = False
        self._waiters: dict[int, tuple[int, Proposal, int]] = {}   # index -> (term, proposal, position)
        self._reads: dict[object, asyncio.Future[None]] = {}   # keyed by the read context (ReadState.ctx)
        self._read_ids = itertools.count(1)
        self._ready_reads: list[ReadState] = []
        self._last_snap_index = 0
        self._leader_changed = asyncio.Event()
        self._io_future: asyncio.Future | None = None

    # ---------------------------------------------------------------- lifecycle
    def _now_ms(self) -> int:
        return int(asyncio.get_running_loop().time() * 1000)

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        if self._storage is None:
            self._storage = FileStorage(self.data_dir, self.cfg.segment_bytes, self.cfg.fsync)
        rec = await loop.run_in_executor(None, self._storage.load)
        last = max(rec.snapshot.index if rec.snapshot else 0, rec.entries[-1].index if rec.entries else 0)
        if last < self.min_log_index:
            raise RaftStorageCorrupt(
                f"raft log in {self.data_dir} ends at {last} but this node applied entries up to "
                f"{self.min_log_index}: committed entries are gone (a truncated or deleted segment); refusing to "
                "start. If this disk was lost or replaced, rejoin with `autoswitch recover-member` "
                "(docs/operations-controller.md)", path=str(self.data_dir), offset=None)
        rng = random.Random(self.seed if self.seed is not None else int.from_bytes(os.urandom(8), "big"))
        peers = [p for p in self.addrs if p != self.node_id]
        catch_up = (self.data_dir / CATCH_UP_MARKER).exists()
        core = RaftCore(self.node_id, peers, self.cfg, rng, self._now_ms(), rec.hard_state, rec.snapshot, rec.entries,
                        catch_up=catch_up, membership=self.bootstrap)
        if catch_up:
            self.log.warning("raft_catching_up", note="no votes, campaign or grants until a leader caught it up")
        if rec.snapshot is not None:
            self.sm.restore(unpack_snapshot(rec.snapshot.data)[1])
            self._last_snap_index = rec.snapshot.index
        self.core = core
        self._follow_membership(core)
        await self._transport.start(self._deliver)
        self._transport_started = True
        self._task = loop.create_task(self._run(), name=f"raft-{self.node_id}")
        supervise.essential_task(self._task, f"raft-{self.node_id}", lambda: not self._stopped, self.log)
        self.log.info("raft_node_started", term=core.term, commit=core.commit, last_index=core.log.last_index(),
                      peers=peers)

    async def stop(self) -> None:
        self._stopped = True
        await cancel_and_wait([self._task])      # a failure was logged already
        if self._transport_started:
            await self._transport.stop()
        if self._io_future is not None and not self._io_future.done():
            # the loop task was cancelled mid-write: let the thread finish before closing its fd
            await asyncio.wait([self._io_future])
        if self._storage is not None:
            self._storage.close()
        self._fail_all(RaftStopped("raft node stopped"))
        self.log.info("raft_node_stopped")

    def _fail_all(self, exc: RaftError) -> None:
        for _, prop, pos in list(self._waiters.values()):
            prop.decide(pos, exc)
        for fut in self._reads.values():
            if not fut.done():
                fut.set_exception(exc)
        self._waiters.clear()
        self._reads.clear()

    def _clear_catch_up(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            (self.data_dir / CATCH_UP_MARKER).unlink()
        fsync_dir(self.data_dir)

    # ---------------------------------------------------------------- inputs
    def _deliver(self, msgs: list[Message]) -> None:
        core = self.core
        if core is None or self._stopped:
            return
        for m in msgs:
            try:
                core.step(m)
            except RaftError as exc:
                self.log.warning("raft_step_rejected", error=exc.to_dict(), type=m.type.name, frm=m.frm)
            except Exception:   # an invariant broke on input we do not understand: keep serving, loudly
                self.log.error("raft_step_failed", exc_info=True, type=m.type.name, frm=m.frm)
        self._kick()

    def _kick(self) -> None:
        """New input (a message, a proposal, a read): the loop runs a Ready cycle soon."""
        self._kicked = True
        if self._sleep is not None:
            wake_up(self._sleep)

    # ---------------------------------------------------------------- the loop
    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        tick_s = self.cfg.tick_interval_ms / 1000
        next_tick = loop.time()
        core = self.core
        assert core is not None
        while not self._stopped:
            delay = next_tick - loop.time()
            if delay > 0 and not self._kicked:
                # one future and one timer per sleep (wait_for on an Event made a task per wake:
                # measurable on every commit's path)
                fut = self._sleep = loop.create_future()
                timer = loop.call_later(delay, wake_up, fut)
                try:
                    await fut
                finally:
                    timer.cancel()
                    self._sleep = None
            self._kicked = False
            if loop.time() >= next_tick:
                core.tick(self._now_ms())
                next_tick = loop.time() + tick_s
            try:
                while core.has_ready():
                    rd = core.ready()
                    await self._handle_ready(core, rd)
                    if len(rd.committed_entries) >= self.cfg.max_apply_entries:
                        # a full slice of a long replay: let gRPC deliver and the senders send before
                        # the next one (else a fresh leader misses heartbeats); steady state never
                        # fills a slice, so it pays nothing here
                        await asyncio.sleep(0)
                    if loop.time() >= next_tick:
                        # sustained load keeps Ready coming: timers (heartbeats, check-quorum) must still run
                        core.tick(self._now_ms())
                        next_tick = loop.time() + tick_s
                await self._maybe_snapshot(core)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                # storage failed (disk full, I/O error): we must not go on acking what we could not persist
                self.log.error("raft_ready_failed", exc_info=True)
                self._stopped = True
                self._fail_all(RaftStopped(f"raft node stopped after a persistence failure: {exc!r}"))
                raise

    async def _io(self, fn, *args) -> None:
        """Run a storage call in a thread; remembered so stop() never closes files under it."""
        fut = asyncio.get_running_loop().run_in_executor(None, fn, *args)
        self._io_future = fut
        await fut

    def _follow_membership(self, core: RaftCore) -> None:
        """The configuration in force changed (a CONFIG entry appended or truncated, a snapshot):
        the transport talks to exactly its members, and the owner hears of it."""
        if core.conf_version == self._conf_version:
            return
        self._conf_version = core.conf_version
        conf = core.membership
        addrs = {n: m.raft_addr or self.addrs.get(n, "") for n, m in conf.all().items()}
        if not conf.empty:
            self.addrs.update({n: a for n, a in addrs.items() if a})
            self._transport.set_members({n: a for n, a in addrs.items() if a and n != self.node_id})
        if self.on_membership is not None:
            self.on_membership(conf, core.confs.index)

    @property
    def membership(self) -> Membership:
        assert self.core is not None
        return self.core.membership

    async def _handle_ready(self, core: RaftCore, rd: Ready) -> None:
        assert self._transport is not None and self._storage is not None
        self._follow_membership(core)       # a new member must be reachable for this Ready's messages
        if rd.catch_up_started:     # durable before this Ready's entries: a restart keeps not voting
            await self._io(write_atomic, self.data_dir / CATCH_UP_MARKER, b"empty data dir, existing cluster\n")
        self._transport.send(rd.messages_early)
        if rd.snapshot is not None:
            snap = rd.snapshot
            await self._io(self._storage.install_snapshot, snap)
            self.sm.restore(unpack_snapshot(snap.data)[1])
            self._last_snap_index = snap.index
            for idx in [i for i in self._waiters if i <= snap.index]:
                _, prop, pos = self._waiters.pop(idx)
                prop.decide(pos, NotLeader(core.leader_id, self.addrs.get(core.leader_id or ""),
                                           "outcome unknown: replaced by a snapshot from the leader"))
        if rd.hard_state is not None or rd.entries:
            await self._io(self._storage.save, rd.hard_state, rd.entries)
        if rd.caught_up:
            await self._io(self._clear_catch_up)
        self._transport.send(rd.messages)
        if rd.messages and rd.committed_entries:
            # Acks (and votes) first: the senders are other tasks, so applying a long batch right
            # now would hold them back for its whole duration, and this ack is what the leader's
            # next commit waits for (measured: quorum ack 4.9 -> 2.5 ms p50 under the write bench).
            # A few loop passes let them hand the messages to gRPC; a stuck peer is not waited for.
            for _ in range(_MAX_SEND_PASSES):
                await asyncio.sleep(0)
                if self._transport.handed_over(rd.messages):
                    break
        for e in rd.committed_entries:
            result: Any = None
            err: BaseException | None = None
            if e.kind == EntryKind.NORMAL:
                try:
                    result = self.sm.apply(e.index, e.data)
                except Exception as exc:    # deterministic on every node; report to the proposer
                    self.log.error("raft_apply_failed", exc_info=True, index=e.index)
                    err = exc
            w = self._waiters.pop(e.index, None)
            if w is not None:
                term, prop, pos = w
                if term != e.term:
                    prop.decide(pos, NotLeader(core.leader_id, self.addrs.get(core.leader_id or ""),
                                               "entry was overwritten by a new leader"))
                else:
                    prop.decide(pos, err if err is not None else result)
        if rd.committed_entries:
            self.sm.after_apply_batch()
        if rd.caught_up and self.on_caught_up is not None:
            self.on_caught_up()
        if rd.soft_state is not None:
            self.log.info("raft_role", role=rd.soft_state.role.value, leader=rd.soft_state.leader_id,
                          term=rd.soft_state.term)
            if rd.soft_state.role != Role.LEADER:
                for fut in self._reads.values():
                    if not fut.done():
                        fut.set_exception(NotLeader(rd.soft_state.leader_id,
                                                    self.addrs.get(rd.soft_state.leader_id or "")))
                self._reads.clear()
                self._ready_reads.clear()
            self._leader_changed.set()
        self._ready_reads.extend(rd.read_states)
        core.advance(rd)
        self._follow_membership(core)
        if self._ready_reads:
            keep = []
            for rs in self._ready_reads:
                if core.applied >= rs.index:
                    waiter = self._reads.pop(rs.ctx, None)
                    if waiter is not None and not waiter.done():
                        waiter.set_result(None)
                else:
                    keep.append(rs)
            self._ready_reads = keep

    async def _maybe_snapshot(self, core: RaftCore) -> None:
        if self.cfg.snapshot_every <= 0 or core.applied - self._last_snap_index < self.cfg.snapshot_every:
            return
        idx = core.applied
        term = core.log.term(idx)
        if term is None:
            return
        conf_index, conf = core.confs.newest_at(idx)
        snap = Snapshot(idx, term, pack_snapshot(conf, self.sm.snapshot(), conf_index))
        assert self._storage is not None
        await self._io(self._storage.save_snapshot, snap)
        core.compact(snap, keep=self.cfg.compaction_keep)
        self._last_snap_index = idx
        self.log.info("raft_snapshot_taken", index=idx, term=term, size=len(snap.data))

    # ---------------------------------------------------------------- API (docs/interfaces.md)
    @property
    def is_leader(self) -> bool:
        return self.core is not None and not self._stopped and self.core.role == Role.LEADER

    @property
    def leader_id(self) -> str | None:
        return self.core.leader_id if self.core is not None else None

    @property
    def leader_addr(self) -> str | None:
        return self.addrs.get(lid) if (lid := self.leader_id) is not None else None

    @property
    def catching_up(self) -> bool:
        """No lease grants: its log may lack committed entries (RaftCore.may_lack_committed; a
        catching-up core neither votes nor campaigns either)."""
        return self.core is None or self.core.may_lack_committed

    @property
    def term(self) -> int:
        return self.core.term if self.core is not None else 0

    def status(self) -> dict:
        c = self.core
        if c is None:
            return {"node": self.node_id, "started": False}
        return {"node": self.node_id, "role": c.role.value, "term": c.term, "leader": c.leader_id,
                "commit": c.commit, "applied": c.applied, "last_index": c.log.last_index(),
                "first_index": c.log.first_index(), "snapshot_index": self._last_snap_index,
                "peers": {p: {"match": pr.match, "next": pr.next, "state": pr.state} for p, pr in c.prs.items()},
                "voters": list(c.voters), "learners": list(c.learners), "config_index": c.confs.index,
                "catching_up": c.catching_up}

    def _not_leader(self) -> NotLeader:
        return NotLeader(lid := self.leader_id, self.addrs.get(lid) if lid else None)

    def _leader_core(self) -> RaftCore:
        """The core, if this node may propose now; else RaftStopped / NotLeader."""
        if self._stopped:
            raise RaftStopped("raft node is stopped")
        core = self.core
        if core is None or core.role != Role.LEADER:
            raise self._not_leader()
        return core

    async def propose(self, data: bytes, timeout_s: float) -> Any:
        """Propose one entry; returns ``apply()``'s result once it is applied here, or raises
        NotLeader / QuorumUnavailable / ProposalTimeout / RaftStopped (or what apply raised)."""
        out = (await self.propose_many([data], timeout_s))[0]
        if isinstance(out, BaseException):
            raise out
        return out

    async def propose_many(self, datas: list[bytes], timeout_s: float) -> list[Any]:
        """Propose entries in order (they usually share one append and one fsync); one wait for
        all. Returns one outcome per entry: ``apply()``'s result, or the exception that entry got
        (an entry refused at propose time, e.g. by the uncommitted-bytes limit, does not stop
        the others). Raises only when nothing could be proposed (not leader, stopped)."""
        core = self._leader_core()
        loop = asyncio.get_running_loop()
        prop = Proposal(loop.create_future(), len(datas))
        term = core.term
        for pos, data in enumerate(datas):
            try:
                idx = core.propose(data)
            except NotLeader:
                prop.decide(pos, self._not_leader())
                continue
            except ProposalDropped as dropped:
                if dropped.reason == "leadership_transfer":
                    prop.decide(pos, NotLeader(core.transferee, self.addrs.get(core.transferee or ""),
                                               "leadership transfer in progress"))
                else:
                    prop.decide(pos, QuorumUnavailable(str(dropped), reason=dropped.reason))
                continue
            self._waiters[idx] = (term, prop, pos)
            prop.where.append((idx, pos))
        if prop.left == 0:
            return prop.out
        self._kick()
        # A timer instead of wait_for(shield(...)): no extra task per call, and the apply loop
        # ignores outcomes for a proposal that already timed out (or whose caller was cancelled).
        timer = loop.call_later(timeout_s, expire, prop.fut)
        try:
            return await prop.fut
        except ProposeExpired:
            exc: RaftError
            if core.role != Role.LEADER:
                exc = self._not_leader()
            # two heartbeats without a majority answering: the leader is cut off (it steps down
            # after max_heartbeat_leak of them); anything else is just slow
            elif not core.quorum_active(2 * self.cfg.heartbeat_interval_ms):
                exc = QuorumUnavailable("leader cannot reach a majority", index=prop.where[0][0])
            else:
                first, last = prop.where[0][0], prop.where[-1][0]
                what = f"entry {first}" if first == last else f"entries {first}..{last}"
                exc = ProposalTimeout(f"{what} not applied within {timeout_s}s", index=first)
            for idx, pos in prop.where:
                if prop.out[pos] is PENDING:
                    self._waiters.pop(idx, None)
                    prop.out[pos] = exc
            return prop.out
        finally:
            timer.cancel()

    async def propose_membership(self, conf: Membership, timeout_s: float) -> None:
        """Replicate a configuration change (one voter added or removed at most) and wait until it
        is applied here; raises like ``propose`` (BadMembership and ProposalDropped("change_in_progress",
        "no_commit_in_term") when the core refuses it now)."""
        core = self._leader_core()
        loop = asyncio.get_running_loop()
        prop = Proposal(loop.create_future(), 1)
        idx = core.propose_conf(conf)
        self._waiters[idx] = (core.term, prop, 0)
        prop.where.append((idx, 0))
        self._kick()
        try:
            out = (await asyncio.wait_for(asyncio.shield(prop.fut), timeout_s))[0]
        except TimeoutError:
            self._waiters.pop(idx, None)
            raise ProposalTimeout(f"membership change (entry {idx}) not applied within {timeout_s}s",
                                  index=idx) from None
        if isinstance(out, BaseException):
            raise out

    def promotable(self) -> list[str]:
        return self.core.promotable() if self.core is not None else []

    def conf_change_blocked(self) -> str | None:
        return self.core.conf_change_blocked() if self.core is not None else "not_started"

    def voters_settled(self) -> tuple[int | None, int]:
        """RaftCore.voters_settled; (None, 0) before start."""
        return self.core.voters_settled() if self.core is not None else (None, 0)

    def applied_conf(self) -> tuple[int, Membership, bool]:
        """RaftCore.applied_conf; (0, no members, False) before start."""
        return self.core.applied_conf() if self.core is not None else (0, Membership(), False)

    async def read_index(self, timeout_s: float) -> None:
        core = self.core
        if core is None or self._stopped or core.role != Role.LEADER:
            raise self._not_leader()
        ctx = next(self._read_ids)
        try:
            core.read_index(ctx)
        except NotLeader:
            raise self._not_leader() from None
        except ProposalDropped as exc:
            raise QuorumUnavailable(str(exc), reason=exc.reason) from None
        fut: asyncio.Future = asyncio.get_running_loop().create_future()
        self._reads[ctx] = fut
        self._kick()
        try:
            await asyncio.wait_for(asyncio.shield(fut), timeout_s)
        except TimeoutError:
            self._reads.pop(ctx, None)
            if core.role != Role.LEADER:
                raise self._not_leader() from None
            raise QuorumUnavailable("read index not confirmed by a majority in time") from None

    def silence(self, reason: str) -> None:
        """See RaftCore.silence (the state hash check found this member's state differs)."""
        if self.core is not None:
            self.core.silence(reason)
            self._kick()

    def set_no_campaign(self, on: bool) -> None:
        """See RaftCore.no_campaign (the member is in maintenance)."""
        if self.core is not None:
            self.core.no_campaign = on

    async def transfer_leadership(self, to: str, timeout_s: float | None = None) -> None:
        core = self.core
        if core is None or core.role != Role.LEADER:
            raise self._not_leader()
        core.transfer_leadership(to)
        self._kick()
        limit = timeout_s if timeout_s is not None else 4 * self.cfg.election_timeout_min_ms / 1000
        loop = asyncio.get_running_loop()
        deadline = loop.time() + limit
        while not (core.role != Role.LEADER and core.leader_id == to):
            if core.role == Role.LEADER and core.transferee is None:
                raise ProposalTimeout(f"leadership transfer to {to} aborted (target did not catch up in time)",
                                      to=to)
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise ProposalTimeout(f"leadership not transferred to {to} within {limit}s", to=to)
            self._leader_changed.clear()
            await wait_event(self._leader_changed, remaining)
