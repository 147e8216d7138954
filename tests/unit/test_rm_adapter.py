"""The asyncio adapter: drives the core with real time against an in-process BrokerControllerApi
(autoswitch.controller.api) over the pure FakeController, real identity files, and a recording
broker. The gRPC implementation of that API is tested against real controllers in
tests/integration/test_broker_controller_api.py."""

from __future__ import annotations

import asyncio

import pytest
from autoswitch.broker.replicas.hooks import HookConfig, HookRunner, RoleHooks
from autoswitch.broker.replicas.identity import IDENTITY_FILE, IdentityFileCorrupt, IdentityStore
from autoswitch.broker.replicas.lease import LeaseConfig
from autoswitch.broker.replicas.replicas_adapter import ReplicasAdapter, SyncStateSetRejected, classify
from autoswitch.broker.replicas.replicas_manager import FailKind, RegisterBroker, ReplicaInfo
from autoswitch.controller.api import ControllerCallFailed, Heartbeat, HeartbeatAnswer
from structlog.testing import capture_logs

from tests.unit.test_rm_fakes import CONTROLLERS, Conflict, FakeController, make_config

FAST = dict(
    heartbeat_interval_ms=50,
    sync_interval_ms=200,
    backoff_min_ms=10,
    backoff_max_ms=100,
    lease=LeaseConfig(True, 600, 1000, 0.01, 300),
)


def _down() -> ControllerCallFailed:
    return ControllerCallFailed(FailKind.RETRY, "CONTROLLER_UNAVAILABLE", "no controller reachable")


class FakeApi:
    """BrokerControllerApi over the pure FakeController."""

    def __init__(self, ctrl: FakeController) -> None:
        self.ctrl = ctrl
        self.addresses = list(CONTROLLERS)
        self.ha_addresses: dict[int, str] = {}   # brokerId -> the ha_address it registered
        self.registered_clean: list[bool] = []      # clean_shutdown of each RegisterBroker
        self.registered_crashed: list[bool] = []    # crashed of each RegisterBroker
        self.registered_incarnations: list[tuple[str, str]] = []   # (incarnation, previous_incarnation)
        self.down = False  # every controller unreachable
        self.watch_broken = False
        self.pushes: asyncio.Queue = asyncio.Queue()
        self.heartbeats: list[Heartbeat] = []
        self.watch_addrs: list = []
        self.controller_timeout_ms = 1000
        self.hb_addrs: list[str] = []
        # what heartbeat replies say of the controllers' membership: (voters, change index)
        self.membership: tuple[tuple[str, ...], int] = ((), 0)
        self.granted = True       # what heartbeat replies say of the lease grant
        self.leader_answers = True  # False: no reply says is_leader
        self.closed = False
        self.session_opens: list = []

    def _check(self):
        if self.down:
            raise _down()

    async def leader_address(self):
        self._check()
        return self.ctrl.leader

    async def heartbeat_timeout_ms(self):
        self._check()
        return self.controller_timeout_ms

    async def get_next_broker_id(self, cluster, group):
        self._check()
        return self.ctrl.next_id(group)

    async def apply_broker_id(self, cluster, group, broker_id, check_code):
        self._check()
        try:
            self.ctrl.apply(group, broker_id, check_code)
        except Conflict as e:
            raise ControllerCallFailed(FailKind.CONFLICT, "CONTROLLER_BROKER_ID_INVALID", str(e)) from None

    async def register_broker(self, cluster, group, broker_id, address, ha_address, clean_shutdown=True,
                              incarnation="", previous_incarnation="", crashed=False):
        self._check()
        self.ha_addresses[broker_id] = ha_address
        self.registered_clean.append(clean_shutdown)
        self.registered_crashed.append(crashed)
        self.registered_incarnations.append((incarnation, previous_incarnation))
        return self.ctrl.register(group, broker_id, address)

    async def heartbeat(self, controller_addr, hb, timeout_s):
        assert controller_addr in self.addresses
        self._check()
        self.heartbeats.append(hb)
        self.hb_addrs.append(controller_addr)
        ctls, index = self.membership
        return HeartbeatAnswer(is_leader=self.leader_answers and controller_addr == self.ctrl.leader,
                               lease_granted=self.granted,
                               master_epoch=0, controllers=ctls, controllers_index=index)

    async def elect_master(self, cluster, group, broker_id):
        self._check()
        return self.ctrl.elect(group, broker_id)

    async def hand_over_master(self, cluster, group, from_id, to_id, expect_master_epoch, expect_sync_state_set_epoch):
        self._check()
        info = self.ctrl.hand_over(group, from_id, to_id, expect_master_epoch, expect_sync_state_set_epoch)
        if info is None:
            raise ControllerCallFailed(FailKind.REJECTED, "CONTROLLER_FENCED_MASTER_EPOCH", "stale handover")
        return info

    async def alter_sync_state_set(self, group, master_id, master_epoch, new_set, sync_state_set_epoch, leaving=()):
        self._check()
        cur = self.ctrl.info[group]
        if master_epoch != cur.master_epoch:
            raise ControllerCallFailed(FailKind.REJECTED, "CONTROLLER_FENCED_MASTER_EPOCH", "fenced master epoch")
        new = ReplicaInfo(cur.master_id, cur.master_addr, cur.master_epoch, frozenset(new_set),
                          cur.sync_state_set_epoch + 1)
        self.ctrl.info[group] = new
        return new.sync_state_set, new.sync_state_set_epoch

    async def get_replica_info(self, group):
        self._check()
        return self.ctrl.info[group]

    async def group_members(self, group):
        self._check()
        from autoswitch.controller.api import RegisteredReplica

        return dict.fromkeys(self.ha_addresses, RegisteredReplica())

    async def watch_replica_info(self, group, addr):
        self.watch_addrs.append(addr)
        if self.watch_broken:
            raise _down()
        while True:
            yield await self.pushes.get()

    async def broker_session(self, addr, cluster, group, broker_id, ack_mode, incarnation=""):
        self.session_opens.append((addr, broker_id, ack_mode))
        yield True
        await asyncio.Event().wait()      # held until the adapter stops (cancels us)

    def set_controllers(self, addresses):
        self.addresses = list(addresses)

    async def close(self):
        self.closed = True


class FakeBroker:
    def __init__(self) -> None:
        self.role = "fenced"
        self.broker_id = 99  # from a static config; controller mode replaces it
        self.calls: list[tuple] = []
        self.lease_fenced: list = []
        self.sss: list = []

    def adopt_broker_id(self, broker_id):
        self.broker_id = broker_id

    def log_position(self):
        return 4096, 2048, 3

    def health_report(self):
        from autoswitch.broker.health import HealthReport

        return HealthReport()

    def traffic_rates(self):
        from autoswitch.broker.traffic import Rates

        return Rates(12.5, 3.0, (("T", 12.5, 3.0),))

    def diverged(self):
        return False

    async def become_master(self, master_epoch, sync_state_set, sync_state_set_epoch):
        self.calls.append(("master", master_epoch, frozenset(sync_state_set), sync_state_set_epoch))
        self.role = "master"

    async def become_slave(self, master_epoch, master_ha_addr, master_addr=None, master_id=0, replicate=True):
        self.calls.append(("slave", master_epoch, master_ha_addr, master_addr))
        self.role = "slave"

    def handover_view(self):
        return None              # no HA here: a handover is refused as "not a master"

    def pause_writes(self):
        pass

    def resume_writes(self):
        pass

    async def wait_replica(self, broker_id, offset, timeout_s):
        return False, -1

    def fence_changed(self, reason):
        self.lease_fenced.append(reason)

    async def become_fenced(self, master_epoch, reason=""):
        self.calls.append(("fenced", master_epoch, reason))
        self.role = "fenced"

    def learn_sync_state_set(self, sync_state_set, sync_state_set_epoch):
        self.sss.append((sync_state_set, sync_state_set_epoch))


async def wait_for(pred, what: str, limit_s: float = 5.0) -> None:
    for _ in range(int(limit_s / 0.01)):
        if pred():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"not reached: {what}")


def make(tmp_path, ctrl=None, hooks=None, **kw):
    ctrl = ctrl or FakeController()
    api = FakeApi(ctrl)
    broker = FakeBroker()
    cfg = make_config(**{**FAST, **kw.pop("cfg", {})})
    return api, broker, ReplicasAdapter(cfg, api, broker, tmp_path, hooks, rpc_timeout_s=1.0, **kw)


def test_registers_elects_itself_reports_sss_and_shuts_down_cleanly(tmp_path):
    seen = []

    async def main():
        hooks = HookRunner(HookConfig(), RoleHooks(on_become_master=[lambda c: seen.append(c)]))
        api, broker, a = make(tmp_path, hooks=hooks)
        await a.start()
        await wait_for(lambda: broker.role == "master", "became master")
        await wait_for(a.may_acknowledge, "lease granted")
        assert broker.calls == [("master", 1, frozenset({1}), 1)]
        assert broker.broker_id == 1  # the registered id, adopted before the first role
        got = await a.proposer.propose(1, 1, frozenset({1, 2}))
        assert got == (frozenset({1, 2}), 2)
        with pytest.raises(SyncStateSetRejected):
            await a.proposer.propose(1, 2, frozenset({2}))  # a set without the master
        await wait_for(lambda: api.heartbeats[-1].report.epoch == 3, "heartbeat carries the log's last epoch")
        hb = api.heartbeats[-1].report
        assert (hb.broker_id, hb.max_offset, hb.confirm_offset) == (1, 4096, 2048)
        assert a.status()["role"] == "master" and a.status()["fenced"] is None
        await hooks.drain(5)
        assert all(h.report.clean_shutdown for h in api.heartbeats), "a first start has an intact log"
        await a.stop()
        await hooks.close()

    asyncio.run(asyncio.wait_for(main(), 20))
    assert IdentityStore(tmp_path).load().identity.broker_id == 1
    assert [c.epoch for c in seen] == [1]


def test_watch_push_switches_role_without_waiting_for_the_poll(tmp_path):
    async def main():
        ctrl = FakeController()
        api, broker, a = make(tmp_path, ctrl, cfg={"sync_interval_ms": 600_000})
        await a.start()
        await wait_for(lambda: broker.role == "master", "became master")
        ctrl.applied[("g1", 2)] = "other"
        ctrl.addresses[("g1", 2)] = "127.0.0.1:20911"
        new = ReplicaInfo(2, "127.0.0.1:20911", 2, frozenset({1, 2}), 3)
        ctrl.info["g1"] = new
        await api.pushes.put(new)
        await wait_for(lambda: broker.role == "slave", "switched by push")
        assert a.write_fence() is None  # a slave answers NOT_MASTER, not FENCED
        assert broker.calls[-1] == ("slave", 2, ("127.0.0.1", 20912), "127.0.0.1:20911")
        assert a.status()["watchEvents"] >= 1
        await a.stop()

    asyncio.run(asyncio.wait_for(main(), 20))


def test_broken_watch_falls_back_to_polling(tmp_path):
    async def main():
        ctrl = FakeController()
        api, broker, a = make(tmp_path, ctrl)
        api.watch_broken = True
        await a.start()
        await wait_for(lambda: broker.role == "master", "became master")
        ctrl.applied[("g1", 2)] = "other"
        ctrl.info["g1"] = ReplicaInfo(2, "127.0.0.1:20911", 2, frozenset({2}), 3)
        await wait_for(lambda: broker.role == "slave", "switched by poll")
        assert a.status()["watchEvents"] == 0
        await wait_for(lambda: len(api.watch_addrs) >= 4, "watch retried")
        assert set(api.watch_addrs) <= set(CONTROLLERS) and len(set(api.watch_addrs)) >= 2
        await a.stop()

    asyncio.run(asyncio.wait_for(main(), 20))


def test_all_controllers_down_master_fences_on_lease_then_recovers(tmp_path):
    async def main():
        api, broker, a = make(tmp_path)
        await a.start()
        await wait_for(a.may_acknowledge, "master with lease")
        api.down = True
        await wait_for(lambda: not a.may_acknowledge(), "lease expired")
        await wait_for(lambda: broker.lease_fenced == ["lease_expired"], "broker told")
        assert a.write_fence() == "lease_expired"
        assert a.status()["fenced"] == "lease_expired" and broker.role == "master"
        api.down = False
        await wait_for(a.may_acknowledge, "lease renewed")
        assert a.write_fence() is None
        assert broker.lease_fenced == ["lease_expired", None]
        await a.stop()

    asyncio.run(asyncio.wait_for(main(), 20))


def test_all_controllers_down_lease_disabled_keeps_acknowledging(tmp_path):
    async def main():
        api, broker, a = make(tmp_path, cfg={"lease": LeaseConfig(False, 600, 1000, 0.01, 300)})
        await a.start()
        await wait_for(lambda: broker.role == "master", "became master")
        api.down = True
        n = len(api.heartbeats)
        await asyncio.sleep(1.0)  # well past the 600 ms a lease would have lasted
        assert len(api.heartbeats) == n
        assert a.may_acknowledge() and broker.lease_fenced == []
        await a.stop()

    asyncio.run(asyncio.wait_for(main(), 20))


def test_corrupt_identity_file_stops_start(tmp_path):
    (tmp_path / IDENTITY_FILE).write_bytes(b"C#g1#1\ncrc32=deadbeef\n")

    async def main():
        api, broker, a = make(tmp_path)
        with pytest.raises(IdentityFileCorrupt):
            await a.start()
        assert api.heartbeats == [] and broker.calls == []

    asyncio.run(asyncio.wait_for(main(), 20))


def test_error_classification():
    """The adapter keeps the controller's classification and retries the network's and the disk's."""
    f = classify(ControllerCallFailed(FailKind.NOT_LEADER, "CONTROLLER_NOT_LEADER", "x", "c2:9878"))
    assert (f.kind, f.code, f.leader_addr) == (FailKind.NOT_LEADER, "CONTROLLER_NOT_LEADER", "c2:9878")
    assert classify(ControllerCallFailed(FailKind.CONFLICT, "CONTROLLER_BROKER_ID_INVALID", "x")).kind \
        == FailKind.CONFLICT
    assert classify(TimeoutError()).kind == FailKind.RETRY
    assert classify(OSError("disk")).kind == FailKind.RETRY
    f = classify(ValueError("bug"))
    assert (f.kind, f.code) == (FailKind.REJECTED, "ValueError")


def test_abort_marker_reports_unclean_restart_until_clean_stop(tmp_path):
    ctrl = FakeController()

    async def one_run(mark_clean: bool, whole: bool = True) -> bool:
        api, broker, a = make(tmp_path, ctrl)
        await a.start()
        await wait_for(lambda: len(api.heartbeats) >= 3, "heartbeats")
        if whole and not a.core.log_intact:
            # what the HA slave reports once its log reached its master's confirmOffset (a lone
            # unclean broker has no master to fetch from here)
            a.core.roles.note_log_intact("caught_up_to_confirm_offset")
        intact = api.heartbeats[0].report.clean_shutdown
        # registration states it too (it always said clean before issue 30): the controller
        # takes an unclean replica out of the SyncStateSet when it registers
        assert api.registered_clean[0] == intact
        await a.stop()
        if mark_clean:
            a.mark_clean_shutdown()
        return intact

    async def main():
        first = await one_run(mark_clean=False)  # then "crash": the marker stays
        second = await one_run(mark_clean=True)
        third = await one_run(mark_clean=True)
        # a run that starts unclean and stops cleanly before its log is whole again: a clean stop
        # makes the files consistent, not complete, so the next start is still unclean
        fourth = await one_run(mark_clean=False)
        fifth = await one_run(mark_clean=True, whole=False)
        sixth = await one_run(mark_clean=True)
        return first, second, third, fourth, fifth, sixth

    assert asyncio.run(asyncio.wait_for(main(), 20)) == (True, False, True, True, False, False)


def test_a_crash_of_a_run_that_fsynced_every_ack_is_not_an_unclean_restart(tmp_path):
    """Issue 30, found by `make powerloss`: with flush = "sync" every acknowledged byte was on disk,
    so a power cut of every replica used to leave the group without a master for ever (each came
    back "unclean", and a crashed run's incarnation was not followed either). A durable run's
    marker names its incarnation: the next start is intact and continues it. A run that started
    unclean, or does not fsync before acknowledging, still leaves a plain marker."""
    ctrl = FakeController()

    async def one_run(durable: bool) -> tuple[bool, str, str]:
        api, broker, a = make(tmp_path, ctrl, durable_acks=durable)
        await a.start()
        await wait_for(lambda: len(api.heartbeats) >= 2, "heartbeats")
        await a.stop()          # a crash: no mark_clean_shutdown, the marker stays
        inc, prev = api.registered_incarnations[0]
        return api.registered_clean[0], inc, prev

    async def main():
        return [await one_run(d) for d in (True, True, False, True, True)]

    runs = asyncio.run(asyncio.wait_for(main(), 30))
    assert runs[0][0] is True                                   # first start
    assert runs[1][0] is True and runs[1][2] == runs[0][1]      # continues the crashed durable run
    assert runs[2][0] is True and runs[2][2] == runs[1][1]      # durable before, async now: intact
    # the async run's crash: unclean, but still this replica (its marker names it): the
    # controllers keep it as a last known holder
    assert runs[3][0] is False and runs[3][2] == runs[2][1]
    assert runs[4][0] is False and runs[4][2] == runs[3][1]     # started unclean: its crash proves nothing


def test_a_copy_of_a_running_durable_brokers_directory_is_no_continuation(tmp_path):
    """Issue 30, item 2 (found by the data simulator's cloned processes): a durable run's marker
    said "the next start continues me, intact", and a copy of the directory taken while the run
    was live said so too, from wherever it was started, though the run acknowledged more after
    the copy. The marker now names where the run ran (host and directory): a start elsewhere is
    an unclean new process; the start in place still continues the crashed run."""
    import shutil
    ctrl = FakeController()

    async def run_in(d, until_stop: bool = True):
        api, broker, a = make(d, ctrl, durable_acks=True)
        await a.start()
        await wait_for(lambda: len(api.heartbeats) >= 2, "heartbeats")
        if until_stop:
            await a.stop()          # a crash: the marker stays
        return api, a

    async def main():
        live_api, live = await run_in(tmp_path / "orig", until_stop=False)
        shutil.copytree(tmp_path / "orig", tmp_path / "copy")      # a hot copy of the running broker
        await live.stop()
        copy_api, _ = await run_in(tmp_path / "copy")
        again_api, _ = await run_in(tmp_path / "orig")
        return live_api, copy_api, again_api

    with capture_logs() as logs:
        live_api, copy_api, again_api = asyncio.run(asyncio.wait_for(main(), 30))
    assert copy_api.registered_clean[0] is False and copy_api.registered_incarnations[0][1] == ""
    assert again_api.registered_clean[0] is True
    assert again_api.registered_incarnations[0][1] == live_api.registered_incarnations[0][0]
    assert any(e["event"] == "abort_marker_from_elsewhere" for e in logs)


def test_controller_timeout_shorter_than_the_lease_assumes_keeps_broker_fenced(tmp_path):
    async def main():
        api, broker, a = make(tmp_path)
        api.controller_timeout_ms = 500  # the lease was sized for 1000 ms
        await a.start()
        await asyncio.sleep(0.5)
        assert broker.calls == [] and a.status()["fenced"] == "starting"
        api.controller_timeout_ms = 1000  # operator fixed the controllers
        await wait_for(lambda: broker.role == "master", "registers once safe")
        await a.stop()

    with capture_logs() as logs:
        asyncio.run(asyncio.wait_for(main(), 20))
    failed = [e for e in logs if e["event"] == "registration_step_failed"]
    assert failed and failed[0]["code"] == "LEASE_CONFIG_UNSAFE"


def test_slaves_connect_to_the_ha_address_the_master_registered(tmp_path):
    """The controller's ReplicaInfo.master_ha_address wins over the listen-port + 1 convention,
    which stays the fallback for a master that registered none."""

    async def main():
        api, _broker, ad = make(tmp_path, ha_address="10.0.0.9:7777")
        await api.apply_broker_id("C", "g1", 1, "code-1")
        await ad._call(RegisterBroker(req=1, cluster="C", group="g1", broker_id=1, broker_addr="10.0.0.9:10911"))
        assert api.ha_addresses[1] == "10.0.0.9:7777"          # registered with the controller
        assert ad.master_ha_addr(1, "10.0.0.9:10911") == ("10.0.0.9", 10912)   # nothing known yet
        ad._info(ReplicaInfo(master_id=1, master_addr="10.0.0.9:10911", master_epoch=3,
                             sync_state_set=frozenset({1}), sync_state_set_epoch=1, master_ha_addr="10.0.0.9:7777"))
        assert ad.master_ha_addr(1, "10.0.0.9:10911") == ("10.0.0.9", 7777)
        assert ad.master_ha_addr(2, "10.0.0.8:10911") == ("10.0.0.8", 10912)   # another master

    asyncio.run(main())


def test_a_newer_controller_list_moves_heartbeats_sessions_and_lease_without_a_fence(tmp_path):
    """The controllers replaced c1 by c4: a heartbeat reply says so; from then on the broker
    heartbeats (and counts lease grants from) exactly the new list, and its lease never lapsed."""
    new = ("c2:9878", "c3:9878", "c4:9878")

    async def main():
        api, broker, a = make(tmp_path)
        await a.start()
        await wait_for(a.may_acknowledge, "master with lease")
        api.membership = (new, 7)
        await wait_for(lambda: a.config.controllers == new, "the new list adopted")
        n = len(api.hb_addrs)
        await wait_for(lambda: "c4:9878" in api.hb_addrs[n:], "heartbeats to the new member")
        m = len(api.hb_addrs)
        await wait_for(lambda: len(api.hb_addrs) > m + 6, "more rounds")
        assert "c1:9878" not in api.hb_addrs[m:], "the removed controller gets no more heartbeats"
        assert api.addresses == list(new)           # leader-following calls use it too
        st = a.status()["lease"]
        assert st["controllers"] == 3 and st["quorum"] == 2 and set(st["answered"]) <= set(new)
        assert a.may_acknowledge() and broker.lease_fenced == []
        # an older or malformed list changes nothing
        api.membership = (("c9:1",), 3)
        await wait_for(lambda: len(api.hb_addrs) > m + 12, "more rounds")
        api.membership = (("not an address", "x" * 300), 8)
        await wait_for(lambda: len(api.hb_addrs) > m + 18, "more rounds")
        assert a.config.controllers == new
        await a.stop()

    asyncio.run(asyncio.wait_for(main(), 20))


def test_heartbeats_name_the_adopted_configuration_and_a_refusal_still_teaches_it(tmp_path):
    """Controllers grant only to a broker naming their own configuration (docs/controller.md
    "Controller membership"): the broker states the index it adopted in every heartbeat, adopts
    a newer one from a reply that refused the grant, and takes the leader's word for an older one
    (a cluster restored from a snapshot numbers again)."""
    same = tuple(CONTROLLERS)

    async def main():
        api, _broker, a = make(tmp_path)
        await a.start()
        await wait_for(a.may_acknowledge, "master with lease")
        assert all(hb.controllers_index == 0 for hb in api.heartbeats), "the configured list is index 0"
        api.granted, api.leader_answers = False, False
        api.membership = (same, 7)                 # same voters, newer configuration, no grant
        await wait_for(lambda: api.heartbeats[-1].controllers_index == 7, "a follower's refusal taught index 7")
        api.membership = (same, 2)                 # older, from followers only: ignored
        n = len(api.heartbeats)
        await wait_for(lambda: len(api.heartbeats) > n + 6, "more rounds")
        assert api.heartbeats[-1].controllers_index == 7
        api.granted, api.leader_answers = True, True
        api.membership = (same, 7)
        n = len(api.heartbeats)
        await wait_for(lambda: len(api.heartbeats) > n + 6, "more rounds")
        assert all(hb.controllers_index == 7 for hb in api.heartbeats[n:])
        assert a.may_acknowledge()
        api.membership = (same, 2)                 # older: only the leader's reply counts
        await wait_for(lambda: api.heartbeats[-1].controllers_index == 2, "the leader's configuration")
        await a.stop()

    asyncio.run(asyncio.wait_for(main(), 20))


def test_an_exception_from_the_core_ends_the_process_instead_of_wedging_it(tmp_path):
    """A bug in the core (injected here: a correct core answers with commands, never raises) once
    left a broker alive, its role never switching, logging the exception as a failed watch stream
    every 100 ms. The adapter now ends the process (exit 70) with one critical line."""
    exits: list[int] = []

    async def main():
        ctrl = FakeController()
        api, broker, a = make(tmp_path, ctrl, cfg={"sync_interval_ms": 600_000}, exit_process=exits.append)
        await a.start()
        await wait_for(lambda: broker.role == "master", "became master")

        def broken(info, now):
            raise AttributeError("'RoleKeeper' object has no attribute 'leaving'")

        a.core.on_replica_info = broken          # type: ignore[method-assign]
        await api.pushes.put(ReplicaInfo(2, "127.0.0.1:20911", 2, frozenset({1, 2}), 3))
        await wait_for(lambda: exits, "the process ended")
        await a.stop()

    with capture_logs() as logs:
        asyncio.run(asyncio.wait_for(main(), 20))
    assert exits[:1] == [70]
    failed = [e for e in logs if e["event"] == "replicas_manager_failed"]
    assert failed and failed[0]["log_level"] == "critical" and failed[0]["input"] == "broken"
    assert not [e for e in logs if e["event"] == "watch_failed"], "not mistaken for a failed stream"


def test_its_loops_ending_before_stop_ends_the_process_and_stop_does_not(tmp_path):
    """The run loop (deadlines: lease re-asks, heartbeats), the ReplicaInfo watch and the
    controller sessions run until stop() (a session: until its controller leaves); one that ends
    before is a bug that would leave the broker serving a stale role, or without crash-fast
    failover."""
    exits: list[int] = []

    async def main():
        api, broker, a = make(tmp_path, exit_process=exits.append)
        await a.start()
        await wait_for(lambda: broker.role == "master", "became master")
        tasks = {t.get_name(): t for t in asyncio.all_tasks()}
        tasks["replica-info-watch"].cancel()
        await wait_for(lambda: exits, "the process ended")
        await wait_for(lambda: api.session_opens, "a controller session held")
        sessions = [t for t in asyncio.all_tasks() if t.get_name().startswith("controller-session-")]
        sessions[0].cancel()                              # ended under the broker: an end
        await wait_for(lambda: len(exits) == 2, "the process ended again")
        assert a.sessions is not None
        held = [t for t in asyncio.all_tasks() if t.get_name().startswith("controller-session-")]
        a.sessions.set_controllers(())                    # the controllers left: not an end
        await asyncio.wait(held)                          # their ends have been judged
        assert len(exits) == 2
        await a.stop()
        await asyncio.sleep(0)

    with capture_logs() as logs:
        asyncio.run(asyncio.wait_for(main(), 20))
    assert exits == [70, 70], "the stop and the membership change ended loops too: not ends"
    ended = [e for e in logs if e["event"] == "essential_task_ended"]
    assert [e["how"] for e in ended] == ["cancelled", "cancelled"]
    assert ended[0]["task"] == "replica-info-watch" and ended[1]["task"].startswith("controller-session-")
