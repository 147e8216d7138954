"""asyncio driver of the sans-IO ReplicasManager.

It owns the clock, performs the core's commands through two typed seams --
``BrokerControllerApi`` (autoswitch.controller.api; the gRPC one comes from ``connect``)
and ``BrokerRoleTarget`` (satisfied by ``autoswitch.broker.server.Broker``) -- and
the identity files, and feeds every outcome back. WatchReplicaInfo pushes are an
accelerator: the core polls GetReplicaInfo every ``sync_interval_ms`` regardless,
so a broken stream only costs latency.

Every command runs as its own task; the core bounds how many are in flight (one
registration step, one heartbeat per controller, one sync, one election, one
SyncStateSet change, one role change), and each task is bounded in time.

Why one long module: it is the single executor of every command type; the decisions are in the
ReplicasManager parts (rm_*.py).
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from autoswitch.broker.replicas.controller_sessions import ControllerSessions
from autoswitch.broker.replicas.hooks import HookRunner
from autoswitch.broker.replicas.identity import IdentityStore
from autoswitch.broker.replicas.lease import ClockGapDetector
from autoswitch.broker.replicas.replica_registry import ControllerReplicaRegistry
from autoswitch.broker.replicas.replicas_manager import (
    AdoptControllers,
    AlterSyncStateSet,
    ApplyBrokerId,
    BecomeFenced,
    BecomeMaster,
    BecomeSlave,
    Command,
    CommitIdentity,
    DrainTo,
    ElectMaster,
    FailKind,
    Failure,
    FindLeader,
    GetNextBrokerId,
    GetReplicaInfo,
    HandoverDone,
    HandoverElect,
    HandoverResult,
    NotifyRoleChange,
    PauseWrites,
    ProposalResult,
    RegisterBroker,
    RemoveTempIdentity,
    ReplicaInfo,
    ReplicasConfig,
    ReplicasManager,
    ResumeWrites,
    SendHeartbeat,
    SetFenced,
    SyncStateSetLearned,
    WriteTempIdentity,
)
from autoswitch.broker.replicas.role_target import BrokerRoleTarget
from autoswitch.broker.replicas.run_marker import DirectoryFiles, RunMarker
from autoswitch.controller.api import (
    AckMode,
    BrokerControllerApi,
    BrokerHealth,
    BrokerReport,
    BrokerTraffic,
    ControllerCallFailed,
    Heartbeat,
    HeartbeatAnswer,
    RegisteredReplica,
    TopicRate,
)

from autoswitch.base import supervise
from autoswitch.base.addr import split_hostport
from autoswitch.base.backoff import Backoff
from autoswitch.base.crashpoints import crash_point
from autoswitch.base.errors import AutoswitchError
from autoswitch.base.features import SUPPORTED_LEVEL
from autoswitch.base.log import get_logger
from autoswitch.base.version import VERSION
from autoswitch.base.waits import wait_event

MAX_PENDING_PROPOSALS = 16
FAREWELL_TIMEOUT_S = 1.0
EXIT_INTERNAL = supervise.EXIT_INTERNAL    # the core raised (ReplicasAdapter._step), or a loop ended


# Crash points (autoswitch.base.crashpoints) after each registration step, for the tests that
# prove a broker killed between two steps registers cleanly on its next start.
_CRASH_POINTS = {
    GetNextBrokerId: "registration.get_next_id",
    WriteTempIdentity: "registration.temp_identity",
    ApplyBrokerId: "registration.apply_id",
    CommitIdentity: "registration.identity_file",
    RegisterBroker: "registration.register",
}

# The broker's ack modes as a heartbeat states them (the config's names; anything else: not stated).
_STATED_ACK_MODES: dict[str, AckMode] = {"all": "all", "quorum": "quorum", "master": "master"}

class SyncStateSetRejected(AutoswitchError):
    code = "SYNC_STATE_SET_REJECTED"


class LeaseConfigUnsafe(AutoswitchError):
    """The controllers declare a broker dead sooner than this broker's lease assumes."""

    code = "LEASE_CONFIG_UNSAFE"


def default_ha_addr(master_id: int, master_addr: str) -> tuple[str, int]:
    """RocketMQ's default: haListenPort = listenPort + 1 (10911 -> 10912)."""
    host, port = split_hostport(master_addr)
    return host, port + 1


def classify(exc: BaseException) -> Failure:
    """The core's Failure for what a command raised. Controller failures come classified
    (ControllerCallFailed); the network's and the disk's are retried; anything else is a refusal."""
    if isinstance(exc, ControllerCallFailed):
        return Failure(exc.kind, exc.reply_name, exc.message, exc.leader_addr)
    if isinstance(exc, TimeoutError):
        return Failure(FailKind.RETRY, "TIMEOUT", str(exc) or "timed out")
    if isinstance(exc, OSError):
        return Failure(FailKind.RETRY, "IO_ERROR", repr(exc))
    if isinstance(exc, AutoswitchError):
        return Failure(FailKind.REJECTED, exc.code, exc.message)
    return Failure(FailKind.REJECTED, type(exc).__name__, str(exc))


class _Proposer:
    """SyncStateProposer (docs/interfaces.md, HA) backed by the ReplicasManager."""

    def __init__(self, adapter: ReplicasAdapter) -> None:
        self._a = adapter

    async def propose(
        self, master_epoch: int, sync_state_set_epoch: int, new_set: frozenset[int], leaving: tuple[tuple[int, str], ...] = ()
    ) -> tuple[frozenset[int], int]:
        return await self._a.propose(master_epoch, sync_state_set_epoch, new_set, leaving)


class ReplicasAdapter:
    def __init__(
        self,
        config: ReplicasConfig,
        api: BrokerControllerApi,
        broker: BrokerRoleTarget,
        data_dir: Path,
        hooks: HookRunner | None = None,
        *,
        rpc_timeout_s: float = 3.0,
        role_change_timeout_s: float = 60.0,
        use_watch: bool = True,
        ha_addr_of: Callable[[int, str], tuple[str, int]] = default_ha_addr,
        ha_address: str = "",
        clock: Callable[[], float] = time.monotonic,
        boot_clock: Callable[[], float] | None = None,
        core: ReplicasManager | None = None,
        ack_mode: str = "",
        crash_sessions: bool = True,
        durable_acks: bool = False,
        exit_process: Callable[[int], None] = os._exit,
        owns_api: bool = False,
    ) -> None:
        """``durable_acks``: this broker fsyncs before it acknowledges, as master and as slave
        (``flush = "sync"`` or the store's ``flush_mode = "sync"``): a power cut cannot take what
        it acknowledged, so a crash of such a run is not reported as an unclean restart.
        ``exit_process``: how a bug in the core ends the process (``_step``)."""
        self.durable_acks = durable_acks
        self.exit_process = exit_process
        self.core = core or ReplicasManager(config)
        self.ack_mode: AckMode = _STATED_ACK_MODES.get(ack_mode, "")   # stated in heartbeats
        # Crash-fast failover: a session per controller node, whose end tells them we died.
        self.sessions = ControllerSessions(api, self.config.controllers, self.config.cluster, self.config.group,
                                           ack_mode, self.config.backoff_min_ms / 1000.0,
                                           self.config.backoff_max_ms / 1000.0,
                                           self.core.incarnation, exit_process) if crash_sessions else None
        self.api = api
        self.broker = broker
        self._adopted_id: int | None = None     # the registered brokerId, once given to the broker
        self.identity = IdentityStore(Path(data_dir))
        self._log = get_logger("broker.replicas_adapter", group=config.group, cluster=config.cluster)
        self.marker = RunMarker(DirectoryFiles(self.identity.directory), durable_acks, self._log)
        self.hooks = hooks
        self.rpc_timeout_s = rpc_timeout_s
        # The heartbeat RPC must give up well inside the lease, or a hung call could not renew it anyway.
        self.heartbeat_timeout_s = min(rpc_timeout_s, config.heartbeat_interval_ms / 1000.0)
        self.role_change_timeout_s = role_change_timeout_s
        self.use_watch = use_watch
        self.ha_addr_of = ha_addr_of
        # Registered with the controller, which hands it to our slaves as master_ha_address.
        self.ha_address = ha_address
        # (master brokerId, master address) -> the master_ha_address the controller last gave for it
        self._master_ha: dict[tuple[int, str], str] = {}
        self.clock = clock
        # CLOCK_BOOTTIME goes on while the host is suspended; without it (not Linux) no gap is seen
        self.boot_clock = boot_clock or (
            (lambda: time.clock_gettime(time.CLOCK_BOOTTIME)) if hasattr(time, "CLOCK_BOOTTIME") else clock)
        self._gaps = ClockGapDetector(max(config.lease.margin_ms(), 1.0) / 2000.0)
        self.proposer = _Proposer(self)
        self.registry = ControllerReplicaRegistry(self.registered_members, lambda: self.clock(), self._log)
        self._wake = asyncio.Event()
        self._sleeping_until = float("inf")     # when the run loop wakes by itself (its clock)
        # the run loop, the watch and every command's job; stop() cancels them together
        self._jobs = supervise.Tasks(self._log, exit_process)
        self._proposals: dict[int, asyncio.Future] = {}
        self._handover: asyncio.Future[HandoverResult] | None = None
        self._next_proposal = 1
        self._stopping = False
        self.watch_events = 0
        self._owns_api = owns_api     # aclose closes the client (the process built it for us)

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        # Corrupt or foreign identity files raise here, before anything talks to a controller.
        loaded = self.identity.load(self.config.cluster, self.config.group)
        intact, previous, crashed = self.marker.arm(self.marker.previous_incarnation())
        _, _, log_epoch = self.broker.log_position()
        self._perform(self.core.start(self.clock(), loaded, log_intact=intact, log_last_epoch=log_epoch,
                                      previous_incarnation=previous, crashed=crashed))
        # Both run until stop(): one that ends before is a bug (autoswitch/base/supervise.py).
        self._jobs.spawn(self._run(), "replicas-manager", essential=True)
        if self.sessions is not None:
            self.sessions.start()
        if self.use_watch:
            self._jobs.spawn(self._watch(), "replica-info-watch", essential=True)

    def mark_clean_shutdown(self) -> None:
        """Call after the broker has stopped and its store is flushed and closed (RunMarker.clean_stop)."""
        self.marker.clean_stop(self.core.log_intact, self.core.incarnation)

    async def aclose(self, keep_client: bool = False) -> None:
        """stop(), then close the hook runner and (when it owns the client, unless ``keep_client``
        for a later ``farewell``) the client."""
        await self.stop()
        if self.hooks is not None:
            await self.hooks.close()
        if self._owns_api and not keep_client:
            await self.api.close()

    async def farewell(self) -> None:
        """After a clean stop (the broker serves nothing any more): tell every controller this
        incarnation is gone, so a successor registers at once instead of waiting a heartbeat
        timeout (another live incarnation of the id is refused). Best effort, bounded."""
        cfg = self.config
        bid = self.core.broker_id
        try:
            if bid is not None:
                hb = Heartbeat(cfg.cluster, cfg.group, BrokerReport(
                    broker_id=bid, address=cfg.broker_addr, election_priority=cfg.election_priority,
                    assumed_timeout_ms=cfg.lease.heartbeat_timeout_ms, incarnation=self.core.incarnation,
                    feature_level=SUPPORTED_LEVEL, version=VERSION), stopping=True)
                calls = [self.api.heartbeat(c, hb, FAREWELL_TIMEOUT_S) for c in cfg.controllers]
                results = await asyncio.wait_for(asyncio.gather(*calls, return_exceptions=True),
                                                 FAREWELL_TIMEOUT_S + 0.5)
                self._log.info("farewell_sent", controllers=len(cfg.controllers),
                               failed=sum(isinstance(r, BaseException) for r in results))
        except TimeoutError:
            self._log.warning("farewell_timeout")
        finally:
            if self._owns_api:
                await self.api.close()

    async def stop(self) -> None:
        if self._stopping:
            return
        self._stopping = True
        self.core.shutdown(self.clock())
        await self._jobs.stop(timeout_s=5)
        if self.sessions is not None:
            await self.sessions.stop()
        for fut in self._proposals.values():
            if not fut.done():
                fut.set_exception(SyncStateSetRejected("replicas manager stopped"))
        self._proposals.clear()
        if self._handover is not None and not self._handover.done():
            self._handover.set_result(HandoverResult(False, "the replicas manager stopped"))
            self.broker.resume_writes()

    # ------------------------------------------------------------------ public queries

    def may_acknowledge(self) -> bool:
        """The write path asks before acknowledging a put and before advancing confirmOffset."""
        return self.core.may_acknowledge(self._now())

    def _now(self) -> float:
        """The monotonic clock, after checking it did not stand still (ClockGapDetector)."""
        now = self.clock()
        gap = self._gaps.observe(now, self.boot_clock())
        if gap is not None:
            self._step(self.core.on_clock_gap, gap, now)
        return now

    def write_fence(self) -> str | None:
        """For ``Broker.write_fence``: the core's reason while this broker is master but must not
        acknowledge (lease expired, deposed by a newer epoch, a handover in doubt); None
        otherwise. A slave gets None so the broker still answers NOT_MASTER with the master's
        address."""
        if self.core.role != "master":
            return None
        now = self.clock()
        if self.core.may_acknowledge(now):
            return None
        return self.core.fenced_reason(now) or "fenced"

    def status(self) -> dict:
        s = self.core.status(self.clock())
        s["watchEvents"] = self.watch_events
        if self.sessions is not None:
            s["controllerSessions"] = len(self.sessions.open)
        if self.hooks is not None:
            s["hooks"] = {"completed": self.hooks.completed, "failures": self.hooks.failures,
                          "dropped": self.hooks.dropped}
        return s

    async def propose(
        self, master_epoch: int, sync_state_set_epoch: int, new_set: frozenset[int], leaving: tuple[tuple[int, str], ...] = ()
    ) -> tuple[frozenset[int], int]:
        if len(self._proposals) >= MAX_PENDING_PROPOSALS:
            raise SyncStateSetRejected("too many pending SyncStateSet proposals")
        pid = self._next_proposal
        self._next_proposal += 1
        fut: asyncio.Future = asyncio.get_running_loop().create_future()
        self._proposals[pid] = fut
        self._perform(self.core.propose(pid, master_epoch, sync_state_set_epoch, frozenset(new_set), self.clock(),
                                        leaving))
        return await fut

    async def hand_over(self, to: int | None, timeout_s: float, leaving: bool = False) -> HandoverResult:
        """Hand the master role to broker ``to`` (None: the best in-sync slave): the core's
        handover sub-machine (rm_handover.py) decides, this performs its commands. Never raises
        for a refusal: the result says why."""
        if self._handover is not None and not self._handover.done():
            return HandoverResult(False, "a handover is already running")
        view = self.broker.handover_view()       # None unless a master with HA running
        if view is None or self._stopping:
            return HandoverResult(False, "not a master")
        fut: asyncio.Future[HandoverResult] = asyncio.get_running_loop().create_future()
        self._handover = fut
        acked, max_offset = view
        self._perform(self.core.start_handover(self.clock(), to, acked, max_offset, timeout_s, leaving))
        return await fut

    async def _drain(self, cmd: DrainTo) -> None:
        """Wait until the handover's target acknowledged ``cmd.offset`` on its HA connection."""
        ok, acked = await self.broker.wait_replica(cmd.target, cmd.offset, cmd.timeout_s)
        if not self._stopping:
            self._step(self.core.on_handover_drained, self.clock(), ok, acked)

    def _handover_done(self, cmd: HandoverDone) -> None:
        fut, self._handover = self._handover, None
        if fut is not None and not fut.done():
            fut.set_result(cmd.result)

    # ------------------------------------------------------------------ loops

    async def _run(self) -> None:
        while not self._stopping:
            deadline = self.core.next_deadline()
            now = self.clock()
            # Wake at least every second: a missed wake-up costs at most that.
            timeout = 1.0 if deadline is None else min(1.0, max(0.0, deadline - now))
            self._sleeping_until = now + 1.0 if deadline is None else min(deadline, now + 1.0)
            if timeout > 0:
                await wait_event(self._wake, timeout)
            self._wake.clear()
            self._step(self.core.tick, self._now())

    async def _watch(self) -> None:
        backoff = Backoff(self.config.backoff_min_ms / 1000.0, self.config.backoff_max_ms / 1000.0, jitter=False)
        attempt = 0
        failures = 0
        while not self._stopping:
            # The leader if we know it and it has not just failed us; else rotate, so one dead
            # node cannot pin the stream.
            leader = self.core.leader
            ctrls = self.config.controllers
            addr = leader if leader in ctrls and failures == 0 else ctrls[attempt % len(ctrls)]
            attempt += 1
            failures += 1
            try:
                async for info in self.api.watch_replica_info(self.config.group, addr):
                    self.watch_events += 1
                    failures = 0
                    backoff.reset()
                    self._step(self.core.on_replica_info, self._info(info), self.clock())
                self._log.info("watch_ended", controller=addr)
            except asyncio.CancelledError:
                raise
            except ControllerCallFailed as e:
                self._log.info("watch_rejected", controller=addr, code=e.reply_name, message=e.message)
            except Exception as e:  # noqa: BLE001 - polling keeps us correct; the stream only makes us fast
                self._log.info("watch_failed", controller=addr, error=repr(e)[:300])
            await asyncio.sleep(backoff.next())

    # ------------------------------------------------------------------ commands

    def slave_caught_up(self, master_epoch: int) -> None:
        """The HA slave reached its master's confirmOffset (Broker wires HASlave to this)."""
        self._step(self.core.on_caught_up, master_epoch, self.clock())

    def _step(self, event: Callable[..., list[Command]], *args: Any) -> None:
        """One input to the core, then its commands. The core answers what peers and disks do
        with a Failure or a refusal, never an exception: one is a bug, and the manager's state is
        unknown then. It must not keep a role in that state (a master would hold its role until
        the lease lapses and stay fenced, a slave would never rejoin; seen once, as a broker that
        logged the same exception as a failed watch stream every 100 ms), so the process ends
        with one critical line and exit code 70; a supervisor restarts it, reported unclean."""
        try:
            self._perform(event(*args))
        except Exception as e:  # noqa: BLE001 - see above: a bug, never an expected outcome
            self._log.critical("replicas_manager_failed", exc_info=e, error=type(e).__name__,
                               input=getattr(event, "__name__", "?"), action=f"exit {EXIT_INTERNAL}")
            self.exit_process(EXIT_INTERNAL)

    def _perform(self, cmds: list[Command]) -> None:
        for cmd in cmds:
            match cmd:
                case AdoptControllers():
                    self._adopt_controllers(cmd)
                case SetFenced():
                    self._set_fenced(cmd)
                case ProposalResult():
                    self._resolve(cmd)
                case SyncStateSetLearned():
                    self.broker.learn_sync_state_set(cmd.sync_state_set, cmd.sync_state_set_epoch)
                case NotifyRoleChange():
                    if self.hooks is not None:
                        self.hooks.submit(cmd.change)
                case PauseWrites():
                    self.broker.pause_writes()
                case ResumeWrites():
                    self.broker.resume_writes()
                case DrainTo():
                    self._jobs.spawn(self._drain(cmd), "drain")
                case HandoverDone():
                    self._handover_done(cmd)
                case RemoveTempIdentity():
                    try:
                        self.identity.remove_temp()
                    except OSError as e:
                        self._log.warning("temp_identity_remove_failed", error=repr(e))
                case _:
                    self._jobs.spawn(self._execute(cmd), type(cmd).__name__)
        # Commands, or a deadline the input moved before the run loop's wake-up (a lease re-ask).
        deadline = self.core.next_deadline()
        if cmds or (deadline is not None and deadline < self._sleeping_until):
            self._wake.set()

    async def _execute(self, cmd: Command) -> None:
        req = cmd.req  # type: ignore[union-attr]
        try:
            value = await self._call(cmd)
            point = _CRASH_POINTS.get(type(cmd))
            if point is not None:
                crash_point(point)
        except asyncio.CancelledError:
            raise
        except Exception as e:  # noqa: BLE001 - every failure goes back to the core, classified
            failure = classify(e)
            if self._stopping:
                return
            self._step(self.core.on_failure, req, failure, self.clock())
            return
        if self._stopping:
            return
        self._step(self.core.on_reply, req, value, self.clock())

    async def _call(self, cmd: Command) -> Any:
        api, t = self.api, self.rpc_timeout_s
        match cmd:
            case FindLeader():
                leader = await asyncio.wait_for(api.leader_address(), t)
                if not leader:
                    raise TimeoutError("controller cluster has no leader yet")
                await asyncio.wait_for(self._check_controller_timeout(), t)
                return leader
            case GetNextBrokerId():
                return int(await asyncio.wait_for(api.get_next_broker_id(cmd.cluster, cmd.group), t))
            case WriteTempIdentity():
                await asyncio.to_thread(self.identity.write_temp, cmd.temp)
                return None
            case ApplyBrokerId():
                await asyncio.wait_for(
                    api.apply_broker_id(cmd.cluster, cmd.group, cmd.broker_id, cmd.register_check_code), t
                )
                return None
            case CommitIdentity():
                await asyncio.to_thread(self.identity.commit, cmd.identity)
                return None
            case RegisterBroker():
                info = await asyncio.wait_for(
                    api.register_broker(cmd.cluster, cmd.group, cmd.broker_id, cmd.broker_addr, self.ha_address,
                                        clean_shutdown=cmd.clean_shutdown, incarnation=cmd.incarnation,
                                        previous_incarnation=cmd.previous_incarnation, crashed=cmd.crashed), t
                )
                self.marker.registered(self.core.incarnation)     # a crash now continues this run
                return self._info(info)
            case SendHeartbeat():
                return await self._heartbeat(cmd)
            case GetReplicaInfo():
                return self._info(await asyncio.wait_for(api.get_replica_info(cmd.group), t))
            case ElectMaster():
                info = await asyncio.wait_for(api.elect_master(cmd.cluster, cmd.group, cmd.broker_id), t)
                return self._info(info)
            case HandoverElect():
                return self._info(await asyncio.wait_for(api.hand_over_master(
                    cmd.cluster, cmd.group, cmd.from_id, cmd.to_id, cmd.expect_master_epoch,
                    cmd.expect_sync_state_set_epoch), cmd.timeout_s))
            case AlterSyncStateSet():
                members, epoch = await asyncio.wait_for(
                    api.alter_sync_state_set(
                        cmd.group, cmd.master_id, cmd.master_epoch, cmd.new_set, cmd.sync_state_set_epoch,
                        cmd.leaving,
                    ),
                    t,
                )
                return members, epoch
            case BecomeMaster():
                self._adopt_broker_id()
                await asyncio.wait_for(
                    self.broker.become_master(cmd.epoch, cmd.sync_state_set, cmd.sync_state_set_epoch),
                    self.role_change_timeout_s,
                )
                return None
            case BecomeSlave():
                self._adopt_broker_id()
                ha = self.master_ha_addr(cmd.master_id, cmd.master_addr)
                await asyncio.wait_for(
                    self.broker.become_slave(cmd.epoch, ha, cmd.master_addr, master_id=cmd.master_id,
                                            replicate=cmd.replicate),
                    self.role_change_timeout_s
                )
                return None
            case BecomeFenced():
                await asyncio.wait_for(self.broker.become_fenced(cmd.epoch, cmd.reason), self.role_change_timeout_s)
                return None
        raise AssertionError(f"no executor for {cmd!r}")

    async def registered_members(self) -> dict[int, RegisteredReplica]:
        """The brokerIds the controller has registered for our group, each with its incarnation."""
        return await self.api.group_members(self.config.group)

    async def _check_controller_timeout(self) -> None:
        """The lease argument needs the controllers' heartbeat timeout >= the one the lease was
        sized for. The controller applies its own (replicated) value, so check it before
        registering; an unsafe pair keeps the broker fenced with a clear error."""
        lease = self.config.lease
        if not lease.enabled:
            return
        ctl = await self.api.heartbeat_timeout_ms()
        if ctl is None:
            self._log.warning("controller_heartbeat_timeout_unknown", leaseMs=lease.master_lease_ms)
            return
        if ctl < lease.heartbeat_timeout_ms:
            raise LeaseConfigUnsafe(
                f"controllers use heartbeat_timeout_ms={ctl} but this broker's master lease "
                f"({lease.master_lease_ms} ms) was sized for {lease.heartbeat_timeout_ms} ms; "
                "lower master_lease_ms/heartbeat_timeout_ms here or raise it on the controllers",
                controller_heartbeat_timeout_ms=ctl, heartbeat_timeout_ms=lease.heartbeat_timeout_ms,
            )
        if ctl > lease.heartbeat_timeout_ms:
            self._log.info("controller_heartbeat_timeout_longer", controllerMs=ctl,
                           assumedMs=lease.heartbeat_timeout_ms, note="safe; failover is slower than assumed")

    def _info(self, info: ReplicaInfo) -> ReplicaInfo:
        """Remember the master's HA address the controller gave with the ReplicaInfo."""
        if info.master_ha_addr:
            self._master_ha[(info.master_id, info.master_addr)] = info.master_ha_addr
        return info

    def master_ha_addr(self, master_id: int, master_addr: str) -> tuple[str, int]:
        """Where a slave of this master connects: the HA address the master registered with the
        controller, else ``ha_addr_of`` (RocketMQ's convention: listen port + 1)."""
        ha = self._master_ha.get((master_id, master_addr))
        if ha:
            return split_hostport(ha)
        return self.ha_addr_of(master_id, master_addr)

    async def _heartbeat(self, cmd: SendHeartbeat) -> HeartbeatAnswer:
        """The answer goes to the core as it came: whether it counts for the lease, and whether
        the membership it names is adopted, are the core's decisions."""
        max_offset, confirm_offset, log_epoch = self.broker.log_position()
        health = self.broker.health_report()
        rates = self.broker.traffic_rates()
        # The controller ranks candidates by (epoch, maxOffset) of their LOG (RocketMQ sends the
        # EpochFile's last epoch): a replica holding a diverged tail of an old epoch must lose to
        # one holding the newer epoch's data even if its offset is higher.
        report = BrokerReport(
            broker_id=cmd.broker_id, address=cmd.broker_addr, epoch=log_epoch, max_offset=max_offset,
            confirm_offset=min(confirm_offset, max_offset), election_priority=cmd.election_priority,
            clean_shutdown=cmd.clean_shutdown, assumed_timeout_ms=cmd.heartbeat_timeout_ms,
            min_in_sync_replicas=self.config.min_in_sync_replicas, incarnation=self.core.incarnation,
            ack_mode=self.ack_mode, diverged=self.broker.diverged(),
            health=BrokerHealth(tuple(health.reasons), health.append_ms, health.fsync_ms, health.loop_lag_ms),
            feature_level=SUPPORTED_LEVEL, version=VERSION, zone=self.config.zone,
            min_in_sync_zones=self.config.min_in_sync_zones,
            traffic=BrokerTraffic(rates.produce_per_s, rates.consume_per_s,
                                  tuple(TopicRate(t, p, c) for t, p, c in rates.topics)))
        hb = Heartbeat(cmd.cluster, cmd.group, report, lease_quorum=cmd.lease_quorum,
                       controllers_index=cmd.controllers_index)
        return await asyncio.wait_for(
            self.api.heartbeat(cmd.controller, hb, self.heartbeat_timeout_s), self.heartbeat_timeout_s + 0.5,
        )

    @property
    def config(self) -> ReplicasConfig:
        return self.core.config        # the core owns it (its controller list follows the membership)

    def _adopt_controllers(self, cmd: AdoptControllers) -> None:
        """The core adopted another controller membership: calls and sessions follow it."""
        self.api.set_controllers(cmd.controllers)
        if self.sessions is not None:
            self.sessions.set_controllers(cmd.controllers)

    def _adopt_broker_id(self) -> None:
        # In controller mode the brokerId comes from registration, not from the broker's config;
        # HA handshakes carry it, so the broker must use it before its first role.
        # Assigned once even when equal to the configured placeholder: the assignment is what
        # tells the broker its id is known (routes wait for it).
        bid = self.core.broker_id
        if bid is not None and bid != self._adopted_id:
            self._log.info("broker_id_adopted", brokerId=bid, configured=self.broker.broker_id)
            self.broker.adopt_broker_id(bid)
            self._adopted_id = bid
            if self.sessions is not None:
                self.sessions.set_broker_id(bid)

    def _set_fenced(self, cmd: SetFenced) -> None:
        try:
            self.broker.fence_changed(cmd.reason if cmd.fenced else None)
        except Exception as e:  # noqa: BLE001 - a fence listener failed; the fence is the core's answer anyway
            self._log.error("fence_changed_failed", error=repr(e))

    def _resolve(self, res: ProposalResult) -> None:
        fut = self._proposals.pop(res.proposal, None)
        if fut is None or fut.done():
            return
        if res.error is not None:
            fut.set_exception(SyncStateSetRejected(f"{res.error.code}: {res.error.message}", reason=res.error.code))
        else:
            assert res.sync_state_set is not None and res.sync_state_set_epoch is not None
            fut.set_result((res.sync_state_set, res.sync_state_set_epoch))
