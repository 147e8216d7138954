"""A deterministic in-process network of RaftCores with virtual time (tests, and a seed of the simulator).

Everything is driven by ``SimNet.run(ms)``: virtual milliseconds, a seeded RNG for the cores and
for message latency, partitions, crashes (optionally losing unsynced storage writes) and restarts.
The Ready contract is followed exactly as the real driver does (persist before send, apply in order).
"""

from __future__ import annotations

import heapq
import json
import random
from collections.abc import Callable
from dataclasses import dataclass, field

from autoswitch.controller.consensus.membership import Membership

from .config import RaftConfig
from .core import RaftCore
from .membership import pack_snapshot, unpack_snapshot
from .messages import Entry, EntryKind, Message, Role, Snapshot
from .storage import MemoryStorage, Storage


class KVStateMachine:
    """Trivial deterministic state machine: b"key=value" sets a key; apply returns the index."""

    def __init__(self) -> None:
        self.kv: dict[str, str] = {}
        self.last_index = 0

    def apply(self, index: int, data: bytes) -> int:
        assert index > self.last_index, (index, self.last_index)
        self.last_index = index
        if data:
            k, _, v = data.decode().partition("=")
            self.kv[k] = v
        return index

    def after_apply_batch(self) -> None:
        pass

    def snapshot(self) -> bytes:
        return json.dumps({"kv": self.kv, "last": self.last_index}, sort_keys=True).encode()

    def restore(self, data: bytes) -> None:
        d = json.loads(data)
        self.kv, self.last_index = dict(d["kv"]), int(d["last"])


@dataclass
class SimNode:
    core: RaftCore
    storage: Storage
    sm: KVStateMachine
    applied: list[Entry] = field(default_factory=list)   # every non-noop entry applied, in order
    alive: bool = True


class SimNet:
    def __init__(self, ids: list[str], seed: int = 0, config: RaftConfig | None = None,
                 latency_ms: tuple[int, int] = (1, 3), storages: dict[str, Storage] | None = None) -> None:
        self.ids = list(ids)
        self.cfg = config or RaftConfig()
        self.rng = random.Random(seed)
        self.seed = seed
        self.now = 0
        self.latency = latency_ms
        self.queue: list[tuple[int, int, Message]] = []
        self._seq = 0
        self.blocked: set[tuple[str, str]] = set()
        self.filter: Callable[[Message], bool] | None = None    # return False to drop a message
        self.sent: list[Message] = []
        self.nodes: dict[str, SimNode] = {}
        self.joined: set[str] = set()        # added with add_node: they boot knowing no members
        for nid in ids:
            st = (storages or {}).get(nid) or MemoryStorage()
            self.nodes[nid] = self._boot(nid, st)

    def _boot(self, nid: str, storage: Storage) -> SimNode:
        rec = storage.load()
        core = RaftCore(nid, [p for p in self.ids if p != nid], self.cfg, random.Random(f"{self.seed}/{nid}/{self.now}"),
                        self.now, rec.hard_state, rec.snapshot, rec.entries,
                        membership=Membership() if nid in self.joined else None)
        sm = KVStateMachine()
        if rec.snapshot is not None:
            sm.restore(unpack_snapshot(rec.snapshot.data)[1])
        return SimNode(core, storage, sm)

    def add_node(self, nid: str, storage: Storage | None = None) -> SimNode:
        """A new, empty node that joins the running cluster (a leader adds it with a CONFIG entry)."""
        self.ids.append(nid)
        self.joined.add(nid)
        self.nodes[nid] = self._boot(nid, storage or MemoryStorage())
        return self.nodes[nid]

    # ---------------------------------------------------------------- faults
    def isolate(self, nid: str) -> None:
        for p in self.ids:
            if p != nid:
                self.blocked |= {(nid, p), (p, nid)}

    def cut(self, a: str, b: str) -> None:
        self.blocked |= {(a, b), (b, a)}

    def heal(self) -> None:
        self.blocked.clear()

    def crash(self, nid: str) -> None:
        n = self.nodes[nid]
        n.alive = False
        if isinstance(n.storage, MemoryStorage):
            n.storage.crash()

    def restart(self, nid: str) -> SimNode:
        self.nodes[nid] = self._boot(nid, self.nodes[nid].storage)
        return self.nodes[nid]

    def wipe(self, nid: str) -> SimNode:
        """Crash the node and boot it on an empty storage: its data directory was wiped."""
        self.crash(nid)
        self.nodes[nid] = self._boot(nid, MemoryStorage())
        return self.nodes[nid]

    # ---------------------------------------------------------------- driving
    def _enqueue(self, m: Message) -> None:
        self.sent.append(m)
        if (m.frm, m.to) in self.blocked or (self.filter is not None and not self.filter(m)):
            return
        self._seq += 1
        heapq.heappush(self.queue, (self.now + self.rng.randint(*self.latency), self._seq, m))

    def process(self, nid: str) -> None:
        n = self.nodes[nid]
        while n.alive and n.core.has_ready():
            rd = n.core.ready()
            for m in rd.messages_early:
                self._enqueue(m)
            if rd.snapshot is not None:
                n.storage.install_snapshot(rd.snapshot)
                n.sm.restore(unpack_snapshot(rd.snapshot.data)[1])
            if rd.hard_state is not None or rd.entries:
                n.storage.save(rd.hard_state, rd.entries)
            if isinstance(n.storage, MemoryStorage):
                n.storage.sync()        # the "fsync" that must precede sending replies
            for m in rd.messages:
                self._enqueue(m)
            for e in rd.committed_entries:
                if e.index <= n.sm.last_index:
                    continue
                if e.kind == EntryKind.NORMAL:
                    n.sm.apply(e.index, e.data)
                    n.applied.append(e)
                else:
                    n.sm.last_index = e.index
            n.core.advance(rd)

    def step_ms(self) -> None:
        self.now += 1
        while self.queue and self.queue[0][0] <= self.now:
            _, _, m = heapq.heappop(self.queue)
            dst = self.nodes.get(m.to)
            if dst is None or not dst.alive or (m.frm, m.to) in self.blocked:
                continue
            dst.core.step(m)
            self.process(m.to)
        for nid in self.ids:
            n = self.nodes[nid]
            if n.alive:
                n.core.tick(self.now)
                self.process(nid)

    def run(self, ms: int) -> None:
        for _ in range(ms):
            self.step_ms()

    def run_until(self, pred: Callable[[], bool], max_ms: int = 10_000) -> bool:
        for _ in range(max_ms):
            if pred():
                return True
            self.step_ms()
        return pred()

    # ---------------------------------------------------------------- queries
    def leaders(self) -> list[str]:
        return [nid for nid, n in self.nodes.items() if n.alive and n.core.role == Role.LEADER]

    def leader(self) -> str | None:
        """The leader of the highest term among live nodes, if any."""
        ls = self.leaders()
        if not ls:
            return None
        return max(ls, key=lambda nid: self.nodes[nid].core.term)

    def wait_leader(self, max_ms: int = 10_000) -> str:
        def stable() -> bool:
            ld = self.leader()
            if ld is None:
                return False
            c = self.nodes[ld].core
            return c.log.term(c.commit) == c.term     # its no-op committed
        assert self.run_until(stable, max_ms), f"no leader within {max_ms} ms (seed {self.seed})"
        ld = self.leader()
        assert ld is not None
        return ld

    def propose(self, nid: str, data: bytes) -> int:
        idx = self.nodes[nid].core.propose(data)
        self.process(nid)
        return idx

    def take_snapshot(self, nid: str) -> Snapshot:
        n = self.nodes[nid]
        idx = n.core.applied
        conf_index, conf = n.core.confs.newest_at(idx)
        snap = Snapshot(idx, n.core.log.term(idx) or n.core.log.offset_term,
                        pack_snapshot(conf, n.sm.snapshot(), conf_index))
        n.storage.save_snapshot(snap)
        n.core.compact(snap)
        return snap
