"""Phase B with the real ReplicasManager core (broker/replicas/replicas_manager.py) as the broker brain.

This is the simulator's stand-in for ReplicasAdapter: it executes the core's commands against
the simulated controller (RPCs over the seeded network, each with a deadline) and the simulated
broker (role switches, SyncStateSet proposals, the handover's held writes and drain) and feeds
replies and failures back.
Heartbeat answers go to the core as the controller gave them; the core counts one toward the
lease only with ``lease_granted`` (the documented seam). ``DataSim(honor_lease_granted=False)``
plants the old adapter, which counted every reply (docs/verification.md, bug #2).
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

from autoswitch.broker.replicas import replicas_manager as rmm
from autoswitch.broker.replicas.identity import BrokerIdentity, LoadedIdentity
from autoswitch.broker.replicas.run_marker import RunMarker
from autoswitch.controller.api import HeartbeatAnswer
from autoswitch.controller.codes import Code
from autoswitch.controller.messages import (
    TRIGGER_BROKER,
    TRIGGER_HANDOVER,
    AlterSyncStateSetRequest,
    ElectMasterRequest,
    RegisterBrokerRequest,
)
from autoswitch.epochfile.errors import EpochRuleError

from autoswitch.base.log import get_logger

if TYPE_CHECKING:
    from .data_sim import Broker, DataSim

RPC_TIMEOUT_MS = 500


_MARKER_LOG = get_logger("sim.run_marker")

def new_rm(sim: DataSim, b: Broker) -> rmm.ReplicasManager:
    from .data_sim import CLUSTER, GROUP, HB_INTERVAL, LEASE, POLL_INTERVAL

    cfg = rmm.ReplicasConfig(CLUSTER, GROUP, sim.bname(b.key), tuple(sim.ctl_ids), heartbeat_interval_ms=HB_INTERVAL,
                             sync_interval_ms=POLL_INTERVAL, backoff_min_ms=50, backoff_max_ms=500, lease=LEASE)
    # every process named by the seed (the core's default is random, and the run marker keeps the
    # name: a run must replay exactly)
    sim.processes += 1
    rm = rmm.ReplicasManager(cfg, new_check_code=lambda: f"code-{b.bid}", rand=sim.rng.random,
                             incarnation=b.incarnation or f"{b.key}p{sim.processes}")
    if "resume_epoch_after_unclean" in sim.bugs:
        rm.roles.refusing_resume = lambda: False     # planted: resume our epoch after an unclean restart
    last = b.log.epochs.last()
    # what the broker's start reads from its data directory, as ReplicasAdapter.start does: the
    # real run marker's verdict (intact, the incarnation it continues, whether the last run crashed)
    b.marker = RunMarker(sim.marker_files(b.key), sim.durable, _MARKER_LOG)
    intact, continues, crashed = b.marker.arm(b.marker.previous_incarnation())
    if "report_restart_clean" in sim.bugs:
        intact = True       # planted: a crashed broker reports an intact log
    cmds = rm.start(sim.local_s(b), LoadedIdentity(BrokerIdentity(CLUSTER, GROUP, b.bid), None),
                    intact, last.epoch if last else 0, continues, crashed=crashed)
    b.rm = rm
    perform(sim, b, cmds)
    return rm


def _info(view: Any) -> rmm.ReplicaInfo:
    return rmm.ReplicaInfo(view.master_broker_id or 0, view.master_address or "", view.master_epoch,
                           frozenset(view.sync_state_set), view.sync_state_set_epoch)


def _rpc(sim: DataSim, b: Broker, cmd: Any, payload: Any) -> None:
    rid = sim._request(b, payload)
    b.rm_pending[rid] = (cmd, sim.now + RPC_TIMEOUT_MS)


def perform(sim: DataSim, b: Broker, cmds: list) -> None:
    """Execute commands (and the commands their completions produce), bounded."""
    todo = list(cmds)
    for _ in range(1000):
        if not todo or not b.alive or b.rm is None:
            return
        cmd = todo.pop(0)
        todo.extend(_one(sim, b, cmd))
    raise AssertionError("ReplicasManager command storm")


def _reply(sim: DataSim, b: Broker, req: int, value: Any) -> list:
    return b.rm.on_reply(req, value, sim.local_s(b))


def _fail(sim: DataSim, b: Broker, req: int, kind: rmm.FailKind, code: str) -> list:
    return b.rm.on_failure(req, rmm.Failure(kind, code, code), sim.local_s(b))


def _one(sim: DataSim, b: Broker, cmd: Any) -> list:
    from .data_sim import CLUSTER, GROUP

    match cmd:
        case rmm.FindLeader():
            _rpc(sim, b, cmd, "find_leader")
        case rmm.RegisterBroker():
            # the process's incarnation as the simulator names it ("" outside power-loss runs, as
            # the model states none there); everything else as the core decided it
            _rpc(sim, b, cmd, RegisterBrokerRequest(CLUSTER, GROUP, cmd.broker_id, cmd.broker_addr,
                                                    cmd.clean_shutdown, 1,
                                                    incarnation=b.incarnation,
                                                    previous_incarnation=cmd.previous_incarnation,
                                                    crashed=cmd.crashed))
        case rmm.GetReplicaInfo():
            _rpc(sim, b, cmd, "replica_info")
        case rmm.ElectMaster():
            _rpc(sim, b, cmd, ElectMasterRequest(CLUSTER, GROUP, TRIGGER_BROKER, cmd.broker_id))
        case rmm.HandoverElect():
            _rpc(sim, b, cmd, ElectMasterRequest(CLUSTER, GROUP, TRIGGER_HANDOVER, cmd.to_id, True,
                                                 handover_from=cmd.from_id,
                                                 expect_master_epoch=cmd.expect_master_epoch,
                                                 expect_sync_state_set_epoch=cmd.expect_sync_state_set_epoch))
        case rmm.PauseWrites():
            b.paused = True
        case rmm.ResumeWrites():
            b.paused = False
        case rmm.DrainTo():
            b.drain = (cmd.target, cmd.offset, sim.now + int(cmd.timeout_s * 1000))
        case rmm.HandoverDone():
            r = cmd.result
            sim.note(f"b{b.key} handover done: ok {r.ok} ({r.reason}) master {r.master_id} epoch {r.master_epoch}")
            key = "graceful_handovers_ok" if r.ok else "graceful_handovers_failed"
            sim.stats.extra[key] = sim.stats.extra.get(key, 0) + 1
        case rmm.AlterSyncStateSet():
            _rpc(sim, b, cmd, AlterSyncStateSetRequest(GROUP, cmd.master_id, cmd.master_epoch,
                                                       tuple(sorted(cmd.new_set)), cmd.sync_state_set_epoch))
        case rmm.SendHeartbeat():
            rid = sim.next_rid()
            b.rm_pending[rid] = (cmd, sim.now + RPC_TIMEOUT_MS)
            sim.send_heartbeat(b, cmd, rid)
        case rmm.BecomeMaster() | rmm.BecomeSlave() | rmm.BecomeFenced():
            return _role(sim, b, cmd)
        case rmm.SetFenced():
            pass    # the fence is the core's answer (may_acknowledge), asked at every ack as the broker does
        case rmm.SyncStateSetLearned():
            if b.tracker is not None:
                b.tracker.on_sync_state_set(cmd.sync_state_set, cmd.sync_state_set_epoch)
        case rmm.ProposalResult():
            sim.note(f"b{b.bid} proposal {cmd.proposal}: {sorted(cmd.sync_state_set or ())} "
                     f"epoch {cmd.sync_state_set_epoch} error {cmd.error and cmd.error.code}")
            if b.tracker is not None and b.proposal_req == cmd.proposal:
                b.proposal_req = None
                if cmd.error is None:
                    b.tracker.on_proposal_accepted(cmd.sync_state_set, cmd.sync_state_set_epoch, sim.local_s(b))
                else:
                    b.tracker.on_proposal_failed(sim.local_s(b))
        case rmm.NotifyRoleChange() | rmm.RemoveTempIdentity():
            pass
        case _:
            raise AssertionError(f"the simulator has no executor for {cmd!r}")
    return []


def _role(sim: DataSim, b: Broker, cmd: Any) -> list:
    if isinstance(cmd, rmm.BecomeMaster):
        last = b.log.epochs.last()
        # Broker.become_master: refuse an epoch the log already passed; a fresh process may
        # resume the epoch it owns (interfaces.md Request 1, implemented in 94864be)
        if last is not None and (last.epoch > cmd.epoch or (last.epoch == cmd.epoch and b.epoch != 0)):
            return _fail(sim, b, cmd.req, rmm.FailKind.REJECTED, "STALE_EPOCH")
        view = SimpleNamespace(master_epoch=cmd.epoch, master_broker_id=b.bid, sync_state_set=cmd.sync_state_set,
                               sync_state_set_epoch=cmd.sync_state_set_epoch)
    elif isinstance(cmd, rmm.BecomeSlave):
        view = SimpleNamespace(master_epoch=cmd.epoch, master_broker_id=cmd.master_id, sync_state_set=(),
                               sync_state_set_epoch=0)
    else:
        view = SimpleNamespace(master_epoch=cmd.epoch, master_broker_id=None, sync_state_set=(),
                               sync_state_set_epoch=0)
    b.epoch = cmd.epoch
    try:
        sim._change_role(b, view)
    except EpochRuleError:
        return _fail(sim, b, cmd.req, rmm.FailKind.REJECTED, "STALE_EPOCH")
    return _reply(sim, b, cmd.req, None)


def on_message(sim: DataSim, b: Broker, msg: tuple) -> None:
    kind = msg[0]
    if kind == "hb_ok":
        _, cid, rid, granted, _epoch = msg
        ent = b.rm_pending.pop(rid, None)
        if ent is None:
            return
        # the answer as the controller gave it: counting it is the core's decision (a planted
        # adapter that counts every reply turns every answer into a grant)
        answer = HeartbeatAnswer(is_leader=cid == sim.ctl_leader(), lease_granted=granted or not sim.honor_lease_granted,
                                 master_epoch=_epoch)
        perform(sim, b, _reply(sim, b, ent[0].req, answer))
        return
    if kind == "push":
        perform(sim, b, b.rm.on_replica_info(_info(msg[1]), sim.local_s(b), "push"))
        return
    if kind != "rep":
        return
    _, rid, reply = msg
    sim._requests.pop(rid, None)
    ent = b.rm_pending.pop(rid, None)
    if ent is None:
        return
    cmd = ent[0]
    match cmd:
        case rmm.FindLeader():
            out = _reply(sim, b, cmd.req, reply)
        case rmm.GetReplicaInfo():
            out = (_reply(sim, b, cmd.req, _info(reply)) if reply is not None
                   else _fail(sim, b, cmd.req, rmm.FailKind.REJECTED, "METADATA_NOT_EXIST"))
        case rmm.RegisterBroker() | rmm.ElectMaster() | rmm.HandoverElect():
            if isinstance(cmd, rmm.RegisterBroker) and reply.ok:
                b.register_pending = False      # the controllers accepted it: the abort marker names it
                if b.marker is not None:
                    b.marker.registered(b.rm.incarnation)
            out = (_reply(sim, b, cmd.req, _info(reply.replica)) if reply.ok
                   else _fail(sim, b, cmd.req, rmm.FailKind.REJECTED, _code(reply)))
        case rmm.AlterSyncStateSet():
            out = (_reply(sim, b, cmd.req, (frozenset(reply.replica.sync_state_set), reply.replica.sync_state_set_epoch))
                   if reply.ok else _fail(sim, b, cmd.req, rmm.FailKind.REJECTED, _code(reply)))
        case _:
            out = []
    perform(sim, b, out)


def _code(reply: Any) -> str:
    """The reply code's name, as the adapter classifies it (ControllerCallFailed.reply_name)."""
    return reply.code if isinstance(reply.code, str) else Code(reply.code).name


def tick(sim: DataSim, b: Broker) -> None:
    now_s = sim.local_s(b)
    if b.drain is not None and b.rm is not None:
        # the DrainTo of a handover: the target's acknowledged offset on its live HA link
        target, offset, deadline = b.drain
        r = b.tracker.replicas.get(target) if b.tracker is not None else None
        acked = r.ack_offset if r is not None and r.connected else -1
        if acked >= offset or sim.now >= deadline or b.tracker is None:
            b.drain = None
            perform(sim, b, b.rm.on_handover_drained(now_s, acked >= offset, acked))
    for rid, (cmd, deadline) in list(b.rm_pending.items()):
        if sim.now >= deadline:
            del b.rm_pending[rid]
            sim._requests.pop(rid, None)
            perform(sim, b, b.rm.on_failure(cmd.req, rmm.Failure(rmm.FailKind.RETRY, "TIMEOUT", "no answer"), now_s))
    perform(sim, b, b.rm.tick(now_s))


def caught_up(sim: DataSim, b: Broker) -> None:
    """The HA slave session reached its master's confirmOffset (the adapter's on_caught_up)."""
    if b.rm is not None:
        perform(sim, b, b.rm.on_caught_up(b.epoch, sim.local_s(b)))


def propose(sim: DataSim, b: Broker, prop: Any) -> None:
    sim._proposal_seq += 1
    b.proposal_req = sim._proposal_seq
    perform(sim, b, b.rm.propose(sim._proposal_seq, prop.master_epoch, prop.base_sync_state_set_epoch,
                                 frozenset(prop.new_set), sim.local_s(b)))


def may_acknowledge(sim: DataSim, b: Broker, ignore_lease: bool) -> bool:
    rm = b.rm
    if rm is None or b.role != "master" or rm.role != "master":
        return False
    if ignore_lease:
        return rm.fenced_reason(sim.local_s(b)) in (None, "lease_expired")
    return rm.may_acknowledge(sim.local_s(b))
