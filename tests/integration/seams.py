"""The product's own parts composed in one process for the safety-seam tests (issue 58): real
stores on real files, HAMaster/HASlave over sockets on 127.0.0.1, the real controller state
machine and election policy, the real ReplicasManager core and run marker. Only the wiring
between them is here (what the adapters and the controller's servicer do), nothing they decide.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import Any

from autoswitch.broker.replicas import replicas_manager as rmm
from autoswitch.broker.replicas.identity import BrokerIdentity, LoadedIdentity
from autoswitch.broker.storage import checkpoint as ckpt
from autoswitch.broker.storage.record import Message
from autoswitch.broker.storage.segment import parse_segment_name
from autoswitch.broker.storage.store import MessageStore
from autoswitch.broker.storage.store_config import StoreConfig
from autoswitch.controller.messages import (
    TRIGGER_BROKER,
    TRIGGER_CONTROLLER,
    AlterSyncStateSetRequest,
    ApplyBrokerIdRequest,
    BrokerLiveInfo,
    ElectMasterRequest,
    FinalizeFeaturesRequest,
    RegisterBrokerRequest,
    encode_request,
)
from autoswitch.controller.state.sm_config import SMConfig
from autoswitch.controller.state.statemachine import ControllerStateMachine
from autoswitch.ha.config import HAConfig

from autoswitch.base.features import SUPPORTED_LEVEL

C, G = "c1", "g1"
STORE = StoreConfig(segment_bytes=256 * 1024, max_message_bytes=16 * 1024, flush_mode="async")


def ha_config(**kw: Any) -> HAConfig:
    base = dict(heartbeat_interval_s=0.05, housekeeping_interval_s=1.0, reconnect_backoff_min_s=0.02,
                reconnect_backoff_max_s=0.1, sync_state_check_interval_s=0.05, handshake_timeout_s=1.0)
    base.update(kw)
    return HAConfig(**base).validate()


def messages(n: int, tag: str, size: int = 100) -> list[Message]:
    return [Message("t", f"{tag}-{i}".encode().ljust(size, b"."), f"{tag}-{i}-{uuid.uuid4().hex[:6]}", 1)
            for i in range(n)]


def power_cut(store: MessageStore) -> tuple[int, int]:
    """The host lost power: the process is gone (no flush, no checkpoint) and every byte of the
    commit log past what it had fsynced (the store's synced offset) is gone with the page cache
    (the worst case: a kernel may have written some of them back on its own). Returns the log end
    (before, after)."""
    before, synced = store.max_offset, store.synced_offset
    directory = store.dir
    store.abandon()
    assert ckpt.load(directory / "checkpoint") is not None
    for p in (directory / "commitlog").iterdir():
        base = parse_segment_name(p.name)
        if base is None:
            continue
        if base >= synced:
            os.truncate(p, 0)
        elif base + p.stat().st_size > synced:
            os.truncate(p, synced - base)
    return before, synced


def all_bytes(store: MessageStore, upto: int | None = None) -> bytes:
    end = store.max_offset if upto is None else upto
    out, off = [], store.min_offset
    while off < end:
        chunk = store.read_raw(off, 1 << 20, end)
        assert chunk, off
        out.append(chunk)
        off += len(chunk)
    return b"".join(out)


class Controller:
    """The controller's replicated state machine, fed as the servicer feeds it (each write an
    encoded log entry applied in order)."""

    def __init__(self, level: int = SUPPORTED_LEVEL, **cfg: Any) -> None:
        self.sm = ControllerStateMachine(SMConfig(**cfg))
        self.index = 0
        self.ts = 1_000_000
        if level > self.sm.state.feature_level:
            assert self.write(FinalizeFeaturesRequest(level=level)).ok     # as a new cluster starts

    def write(self, req: Any) -> Any:
        self.index += 1
        return self.sm.apply(self.index, encode_request(req))

    def view(self) -> Any:
        return self.sm.replica_view(G)

    def register(self, *ids: int) -> None:
        for bid in ids:
            r = self.write(ApplyBrokerIdRequest(C, G, bid, f"127.0.0.1:{9000 + bid};{bid}", ts_ms=self.ts))
            assert r.ok, r
            r = self.write(RegisterBrokerRequest(C, G, bid, f"127.0.0.1:{9000 + bid}", ts_ms=self.ts))
            assert r.ok, r

    def elect(self, alive: list[BrokerLiveInfo], broker_id: int = 0) -> Any:
        return self.write(ElectMasterRequest(C, G, TRIGGER_BROKER, broker_id, False, tuple(alive), ts_ms=self.ts))

    def failover(self, alive: list[BrokerLiveInfo], dead: tuple[int, ...]) -> Any:
        """The leader's scan: the master is agreed dead, the alive reports carried in."""
        return self.write(ElectMasterRequest(C, G, TRIGGER_CONTROLLER, 0, False, tuple(alive), ts_ms=self.ts,
                                             dead_broker_ids=dead))

    def alter(self, new: set[int], alive: set[int] | None = None) -> Any:
        """The master's proposal as the leader proposes it (``alive``: the majority view; default
        every member)."""
        v = self.view()
        return self.write(AlterSyncStateSetRequest(G, v.master_broker_id, v.master_epoch, tuple(sorted(new)),
                                                   v.sync_state_set_epoch,
                                                   alive_broker_ids=tuple(sorted(new if alive is None else alive))))


def live(bid: int, store: MessageStore, clean: bool = True, diverged: bool = False, incarnation: str = "") -> BrokerLiveInfo:
    last = store.epochs.last()
    return BrokerLiveInfo(bid, last.epoch if last else 0, store.max_offset, store.confirm_offset, 0, clean,
                          incarnation=incarnation, diverged=diverged)


def live_info(bid: int, max_offset: int = 100, epoch: int = 0) -> BrokerLiveInfo:
    """A report of a replica without a store behind it (state-machine-only schedules)."""
    return BrokerLiveInfo(bid, epoch, max_offset, max_offset)


def replica_info(view: Any) -> rmm.ReplicaInfo:
    return rmm.ReplicaInfo(view.master_broker_id or 0, view.master_address or "", view.master_epoch,
                           frozenset(view.sync_state_set), view.sync_state_set_epoch)


class Core:
    """The real ReplicasManager core of one broker, its commands executed against ``Controller``
    as ReplicasAdapter executes them against the controllers (the role switches are collected
    for the test to carry out on the real broker parts)."""

    def __init__(self, ctl: Controller, bid: int, addr: str) -> None:
        cfg = rmm.ReplicasConfig(C, G, addr, ("ctl",), heartbeat_interval_ms=1000, sync_interval_ms=5000)
        self.ctl = ctl
        self.bid = bid
        self.core = rmm.ReplicasManager(cfg, new_check_code=lambda: f"code-{bid}")
        self.now = 0.0
        self.roles: list[Any] = []          # BecomeMaster / BecomeSlave / BecomeFenced, in order
        self.elections: list[Any] = []      # ElectMaster commands sent
        self.registered: list[RegisterBrokerRequest] = []

    def start(self, *, log_intact: bool, log_last_epoch: int, previous_incarnation: str, crashed: bool) -> None:
        loaded = LoadedIdentity(BrokerIdentity(C, G, self.bid), None)
        self._run(self.core.start(self.now, loaded, log_intact=log_intact, log_last_epoch=log_last_epoch,
                                  previous_incarnation=previous_incarnation, crashed=crashed))

    def tick(self, dt: float = 0.2) -> None:
        self.now += dt
        self._run(self.core.tick(self.now))

    def _run(self, cmds: list[Any]) -> None:
        todo = list(cmds)
        for _ in range(1000):
            if not todo:
                return
            todo.extend(self._one(todo.pop(0)))
        raise AssertionError("command storm")

    def _one(self, cmd: Any) -> list[Any]:
        core, now = self.core, self.now
        match cmd:
            case rmm.FindLeader():
                return core.on_reply(cmd.req, "ctl", now)
            case rmm.RegisterBroker():
                req = RegisterBrokerRequest(C, G, cmd.broker_id, cmd.broker_addr, cmd.clean_shutdown, self.ctl.ts,
                                            incarnation=cmd.incarnation,
                                            previous_incarnation=cmd.previous_incarnation, crashed=cmd.crashed)
                self.registered.append(req)
                r = self.ctl.write(req)
                assert r.ok, r
                return core.on_reply(cmd.req, replica_info(r.replica), now)
            case rmm.GetReplicaInfo():
                return core.on_reply(cmd.req, replica_info(self.ctl.view()), now)
            case rmm.ElectMaster():
                self.elections.append(cmd)
                return []           # the test answers elections (it knows who is alive)
            case rmm.BecomeMaster() | rmm.BecomeSlave() | rmm.BecomeFenced():
                self.roles.append(cmd)
                return []           # the test carries the switch out on the real broker parts
            case rmm.SendHeartbeat():
                return []
            case _:
                return []

    def switched(self, cmd: Any) -> None:
        self._run(self.core.on_reply(cmd.req, None, self.now))

    def learn(self, view: Any) -> None:
        self._run(self.core.on_replica_info(replica_info(view), self.now, "push"))


def store(path: Path) -> MessageStore:
    return MessageStore(path, STORE)


def replace_record(st: MessageStore, offset: int) -> tuple[int, int]:
    """Change the record at ``offset`` on disk under the running store: the same header, another
    body, and a CRC that matches it (only a comparison with another replica finds it). Returns
    the record's [start, end)."""
    import struct
    import zlib

    from autoswitch.broker.storage.record import HEADER_SIZE, peek_total

    seg_base = offset - offset % st.config.segment_bytes
    path = st.dir / "commitlog" / f"{seg_base:020d}"
    fd = os.open(path, os.O_RDWR)
    try:
        head = os.pread(fd, HEADER_SIZE, offset - seg_base)
        total = peek_total(head, 0)
        rec = bytearray(os.pread(fd, total, offset - seg_base))
        body = HEADER_SIZE + rec[32] + rec[33]
        rec[body:] = bytes(x ^ 0xFF for x in rec[body:])
        rec[0:4] = struct.pack(">I", zlib.crc32(bytes(rec[4:])))
        os.pwrite(fd, bytes(rec), offset - seg_base)
    finally:
        os.close(fd)
    return offset, offset + total


def record_starts(st: MessageStore) -> list[int]:
    return [r.phy_offset for r in st.scan()]


class CtlProposer:
    """The master's SyncStateSet proposals carried to ``Controller`` as the ReplicasManager
    carries them (with why members leave); every member counts as alive."""

    def __init__(self, ctl: Controller) -> None:
        self.ctl = ctl
        self.sent: list[Any] = []

    async def propose(self, master_epoch: int, sync_state_set_epoch: int, new_set: frozenset[int],
                      leaving: tuple[tuple[int, str], ...] = ()) -> tuple[frozenset[int], int]:
        from autoswitch.ha.errors import SyncStateProposalRejected

        v = self.ctl.view()
        req = AlterSyncStateSetRequest(G, v.master_broker_id, master_epoch, tuple(sorted(new_set)),
                                       sync_state_set_epoch, alive_broker_ids=tuple(sorted(new_set)),
                                       leaving=tuple(leaving))
        self.sent.append(req)
        r = self.ctl.write(req)
        if not r.ok:
            raise SyncStateProposalRejected(r.remark)
        return frozenset(r.replica.sync_state_set), r.replica.sync_state_set_epoch
