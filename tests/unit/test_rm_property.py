"""Random interleavings against the pure core: replies in any order, failures, stale and fresh
pushes, time jumps. Invariants checked after every step."""

from __future__ import annotations

from autoswitch.broker.replicas.identity import BrokerIdentity, LoadedIdentity
from autoswitch.broker.replicas.replicas_manager import (
    AlterSyncStateSet,
    BecomeFenced,
    BecomeMaster,
    BecomeSlave,
    ElectMaster,
    FailKind,
    Failure,
    GetReplicaInfo,
    Phase,
    ProposalResult,
    RegisterBroker,
    ReplicaInfo,
    ReplicasManager,
    SendHeartbeat,
)
from autoswitch.controller.api import HeartbeatAnswer
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.unit.test_rm_fakes import CONTROLLERS, make_config

ME = 1


def view(master: int, epoch: int, others: frozenset[int]) -> ReplicaInfo:
    sss = frozenset({master}) | others if master else frozenset()
    return ReplicaInfo(master, f"10.0.0.{master}:10911" if master else "", epoch, sss, epoch)


actions = st.lists(
    st.one_of(
        st.tuples(st.just("answer"), st.integers(0, 50), st.booleans()),  # pick a pending req; ok or fail
        st.tuples(st.just("push"), st.sampled_from([0, ME, ME, 2, 3]), st.integers(0, 8), st.booleans()),
        st.tuples(st.just("tick"), st.floats(0.0, 3.0)),
        st.tuples(st.just("propose"), st.integers(0, 8), st.sampled_from([frozenset({1}), frozenset({1, 2})])),
    ),
    min_size=5,
    max_size=120,
)


@settings(max_examples=200, deadline=None)
@given(actions, st.booleans())
def test_invariants_under_random_interleavings(script, intact):
    core = ReplicasManager(make_config(), new_check_code=lambda: "x", rand=lambda: 0.5)
    now = 0.0
    pending: dict[int, object] = {}
    applied: list[int] = []  # epochs of completed role changes, in order
    role_in_flight = 0
    proposals = 0
    next_proposal = 1

    def take(cmds):
        nonlocal role_in_flight, proposals
        for c in cmds:
            if hasattr(c, "req"):
                assert c.req not in pending
                pending[c.req] = c
            if isinstance(c, BecomeMaster | BecomeSlave | BecomeFenced):
                role_in_flight += 1
                assert role_in_flight == 1, "two role changes in flight"
                target = core.target
                assert target is not None and c.epoch == target.master_epoch
                if isinstance(c, BecomeMaster):
                    assert target.master_id == ME
                if isinstance(c, BecomeSlave):
                    assert target.master_id not in (0, ME)
                assert c.epoch > core.applied_epoch, "role change to a not-higher epoch"
            if isinstance(c, AlterSyncStateSet):
                assert sum(isinstance(p, AlterSyncStateSet) for p in pending.values()) == 1
            if isinstance(c, ProposalResult):
                proposals -= 1

    take(core.start(now, LoadedIdentity(BrokerIdentity("C", "g1", ME), None), log_intact=intact, log_last_epoch=2))
    # Bootstrap to RUNNING (registration has its own tests); the random part starts there.
    (find,) = pending.values()
    pending.clear()
    take(core.on_reply(find.req, CONTROLLERS[0], now))
    (reg,) = pending.values()
    pending.clear()
    take(core.on_reply(reg.req, view(0, 0, frozenset()), now))
    assert core.phase == Phase.RUNNING
    for act in script:
        kind = act[0]
        if kind == "answer" and pending:
            req = sorted(pending)[act[1] % len(pending)]
            cmd = pending.pop(req)
            ok = act[2]
            if ok:
                value: object = None
                match cmd:
                    case RegisterBroker() | GetReplicaInfo():
                        t = core.target
                        value = t if t is not None else view(0, 0, frozenset())
                    case ElectMaster():
                        t = core.target
                        value = view(ME, (t.master_epoch if t else 0) + 1, frozenset({2}))
                    case SendHeartbeat():
                        value = HeartbeatAnswer(is_leader=cmd.controller == CONTROLLERS[0], lease_granted=True,
                                                master_epoch=0)
                    case AlterSyncStateSet():
                        value = (cmd.new_set, cmd.sync_state_set_epoch + 1)
                    case _ if type(cmd).__name__ == "FindLeader":
                        value = CONTROLLERS[0]
                if isinstance(cmd, BecomeMaster | BecomeSlave | BecomeFenced):
                    role_in_flight -= 1
                    applied.append(cmd.epoch)
                take(core.on_reply(req, value, now))
            else:
                if isinstance(cmd, BecomeMaster | BecomeSlave | BecomeFenced):
                    role_in_flight -= 1
                take(core.on_failure(req, Failure(FailKind.RETRY, "TIMEOUT"), now))
        elif kind == "push":
            _, master, epoch, with2 = act
            take(core.on_replica_info(view(master, epoch, frozenset({2}) if with2 else frozenset()), now))
        elif kind == "tick":
            now += act[1]
            take(core.tick(now))
        elif kind == "propose":
            proposals += 1
            take(core.propose(next_proposal, act[1], 0, act[2], now))
            next_proposal += 1
        # invariants after every step
        assert applied == sorted(set(applied)), f"applied epochs not strictly increasing: {applied}"
        # (a "no master" epoch is recorded without a switch when we are not master)
        assert not applied or core.applied_epoch >= applied[-1]
        assert len(core._pending) <= len(CONTROLLERS) + 5
        if core.may_acknowledge(now):
            assert core.role == "master" and core.phase == Phase.RUNNING
            assert core.lease.valid(now)
            assert core.target is not None and core.target.master_id == ME
        deadline = core.next_deadline()
        assert deadline is None or deadline == deadline  # not NaN
    # every proposal got exactly one answer, or is still waiting for its controller reply
    assert proposals == sum(isinstance(p, AlterSyncStateSet) for p in pending.values())
