"""Test doubles for the ReplicasManager tests (no tests here).

FakeController models the controller's registration rules (RocketMQ's): GetNextBrokerId is a
read; ApplyBrokerId succeeds for the next id or for an id already applied with the SAME
registerCheckCode (idempotent) and conflicts otherwise; RegisterBroker needs an applied id.
Harness drives the pure core synchronously, executing its commands against the fake controller
and real identity files, and can "crash" after any executed command.
"""

from __future__ import annotations

import itertools
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

from autoswitch.broker.replicas.identity import IdentityStore
from autoswitch.broker.replicas.lease import LeaseConfig
from autoswitch.broker.replicas.replicas_manager import (
    AlterSyncStateSet,
    ApplyBrokerId,
    BecomeFenced,
    BecomeMaster,
    BecomeSlave,
    CommitIdentity,
    ElectMaster,
    FailKind,
    Failure,
    FindLeader,
    GetNextBrokerId,
    GetReplicaInfo,
    HandoverElect,
    RegisterBroker,
    RemoveTempIdentity,
    ReplicaInfo,
    ReplicasConfig,
    ReplicasManager,
    SendHeartbeat,
    WriteTempIdentity,
)
from autoswitch.controller.api import HeartbeatAnswer

CONTROLLERS = ("c1:9878", "c2:9878", "c3:9878")


def make_config(**kw) -> ReplicasConfig:
    lease = kw.pop("lease", LeaseConfig())
    base = dict(cluster="C", group="g1", broker_addr="127.0.0.1:10911", controllers=CONTROLLERS, lease=lease)
    base.update(kw)
    return ReplicasConfig(**base)


class Conflict(Exception):
    pass


@dataclass
class FakeController:
    applied: dict[tuple[str, int], str] = field(default_factory=dict)  # (group, id) -> check code
    addresses: dict[tuple[str, int], str] = field(default_factory=dict)
    info: dict[str, ReplicaInfo] = field(default_factory=dict)
    leader: str = "c1:9878"

    def next_id(self, group: str) -> int:
        return 1 + max((i for (g, i) in self.applied if g == group), default=0)

    def apply(self, group: str, broker_id: int, code: str) -> None:
        have = self.applied.get((group, broker_id))
        if have is not None:
            if have != code:
                raise Conflict(f"id {broker_id} belongs to {have}")
            return
        if broker_id != self.next_id(group):
            raise Conflict(f"id {broker_id} is not the next id")
        self.applied[(group, broker_id)] = code

    def register(self, group: str, broker_id: int, addr: str) -> ReplicaInfo:
        assert (group, broker_id) in self.applied, "register before apply"
        self.addresses[(group, broker_id)] = addr
        return self.info.setdefault(group, ReplicaInfo(0, "", 0, frozenset(), 0))

    def elect(self, group: str, broker_id: int) -> ReplicaInfo:
        cur = self.info.get(group, ReplicaInfo(0, "", 0, frozenset(), 0))
        if cur.master_id:
            return cur
        new = ReplicaInfo(broker_id, self.addresses[(group, broker_id)], cur.master_epoch + 1,
                          frozenset({broker_id}), cur.sync_state_set_epoch + 1)
        self.info[group] = new
        return new


    def hand_over(self, group: str, from_id: int, to_id: int, expect_epoch: int,
                  expect_sss_epoch: int) -> ReplicaInfo | None:
        """The controller's compare-and-set handover; None when stale."""
        cur = self.info[group]
        if ((cur.master_id, cur.master_epoch, cur.sync_state_set_epoch) != (from_id, expect_epoch, expect_sss_epoch)
                or to_id not in cur.sync_state_set):
            return None
        new = ReplicaInfo(to_id, self.addresses[(group, to_id)], cur.master_epoch + 1, frozenset({to_id}),
                          cur.sync_state_set_epoch + 1)
        self.info[group] = new
        return new


class Crash(Exception):
    pass


class Harness:
    """Runs one core incarnation; `crash_after` = number of executed commands before it dies."""

    def __init__(self, data_dir: Path, ctrl: FakeController, config: ReplicasConfig | None = None,
                 crash_after: int | None = None, codes=None, now: float = 0.0) -> None:
        self.store = IdentityStore(data_dir)
        self.ctrl = ctrl
        self.config = config or make_config()
        self.codes = codes or (f"code-{i}" for i in itertools.count())
        self.core = ReplicasManager(self.config, new_check_code=lambda: next(self.codes), rand=lambda: 1.0)
        self.crash_after = crash_after
        self.executed = 0
        self.now = now
        self.queue: deque = deque()
        self.log: list = []  # every command seen, in order
        self.faults: dict[type, deque] = {}  # command type -> queued Failures to return instead
        self.unreachable = lambda cmd: False  # True: the command times out (a RETRY failure)
        self.hb_answer = None   # SendHeartbeat -> HeartbeatAnswer, when a test shapes the answers

    def fail_next(self, cmd_type: type, failure: Failure) -> None:
        self.faults.setdefault(cmd_type, deque()).append(failure)

    def start(self, log_intact: bool = True, log_last_epoch: int = 0) -> None:
        loaded = self.store.load(self.config.cluster, self.config.group)
        self._push(self.core.start(self.now, loaded, log_intact=log_intact, log_last_epoch=log_last_epoch))

    def _push(self, cmds) -> None:
        self.log.extend(cmds)
        self.queue.extend(cmds)

    def tick(self, dt: float = 0.0) -> None:
        self.now += dt
        self._push(self.core.tick(self.now))

    def _outcome(self, cmd):
        if self.unreachable(cmd):
            return "fail", Failure(FailKind.RETRY, "TIMEOUT", "unreachable")
        faults = self.faults.get(type(cmd))
        if faults:
            return "fail", faults.popleft()
        c, g = self.ctrl, self.config.group
        match cmd:
            case FindLeader():
                return "ok", c.leader
            case GetNextBrokerId():
                return "ok", c.next_id(g)
            case WriteTempIdentity():
                self.store.write_temp(cmd.temp)
                return "ok", None
            case ApplyBrokerId():
                try:
                    c.apply(g, cmd.broker_id, cmd.register_check_code)
                except Conflict as e:
                    return "fail", Failure(FailKind.CONFLICT, "CONTROLLER_BROKER_ID_INVALID", str(e))
                return "ok", None
            case CommitIdentity():
                self.store.commit(cmd.identity)
                return "ok", None
            case RegisterBroker():
                return "ok", c.register(g, cmd.broker_id, cmd.broker_addr)
            case SendHeartbeat():
                if self.hb_answer is not None:
                    return "ok", self.hb_answer(cmd)
                return "ok", HeartbeatAnswer(is_leader=cmd.controller == c.leader, lease_granted=True, master_epoch=0)
            case GetReplicaInfo():
                return "ok", c.info[g]
            case ElectMaster():
                return "ok", c.elect(g, cmd.broker_id)
            case HandoverElect():
                info = c.hand_over(g, cmd.from_id, cmd.to_id, cmd.expect_master_epoch, cmd.expect_sync_state_set_epoch)
                if info is None:
                    return "fail", Failure(FailKind.REJECTED, "CONTROLLER_ELECT_MASTER_FAILED", "compare-and-set failed")
                return "ok", info
            case AlterSyncStateSet():
                cur = c.info[g]
                new = ReplicaInfo(cur.master_id, cur.master_addr, cur.master_epoch, cmd.new_set,
                                  cur.sync_state_set_epoch + 1)
                c.info[g] = new
                return "ok", (new.sync_state_set, new.sync_state_set_epoch)
            case BecomeMaster() | BecomeSlave() | BecomeFenced():
                return "ok", None
        raise AssertionError(cmd)

    def step(self) -> bool:
        """Execute one queued command. False when the queue is empty."""
        if not self.queue:
            return False
        cmd = self.queue.popleft()
        if not hasattr(cmd, "req"):
            if isinstance(cmd, RemoveTempIdentity):
                self.store.remove_temp()
            return True
        kind, value = self._outcome(cmd)
        self.executed += 1
        if self.crash_after is not None and self.executed >= self.crash_after:
            raise Crash(cmd)
        if kind == "ok":
            self._push(self.core.on_reply(cmd.req, value, self.now))
        else:
            self._push(self.core.on_failure(cmd.req, value, self.now))
        return True

    def drain(self, max_steps: int = 200) -> None:
        for _ in range(max_steps):
            if not self.step():
                return
        raise AssertionError("command queue did not drain")

    def run_until(self, pred, max_rounds: int = 200, dt: float = 0.05) -> None:
        for _ in range(max_rounds):
            self.drain()
            if pred():
                return
            self.tick(dt)
        raise AssertionError("condition not reached")

    def of_type(self, t: type) -> list:
        return [c for c in self.log if isinstance(c, t)]
