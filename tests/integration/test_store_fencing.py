"""Store backends fence a deposed leader (issue 14): a controller paused past its lock's lease,
then resumed, cannot commit a write after the new leader's first write; the store refuses it.

The first test pauses a leader deterministically inside one process: its store worker threads
are held (as SIGSTOP would hold them) after it accepted a proposal, while a second node on the
same database takes the lock and commits; released, the old leader's write reaches the database
and is refused there (the lock's term no longer matches). The second test does the same to a
real controller process with SIGSTOP and checks the database's log afterwards."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time

import pytest
from autoswitch.controller.consensus.errors import NotLeader
from autoswitch.controller.consensus.membership import Member, Membership
from autoswitch.controller.store.base import open_store
from autoswitch.controller.store.config import StoreBackendConfig
from autoswitch.controller.store.node import StoreLogNode

from tests.integration.failover_harness import STORE_LEASE_MS, FailoverCluster, wait_until
from tests.tcpproxy import TcpProxy

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]


class Recorder:
    """A state machine that remembers what it applied (the test checks order and content)."""

    def __init__(self) -> None:
        self.applied: list[tuple[int, bytes]] = []

    def apply(self, index: int, data: bytes) -> bytes:
        self.applied.append((index, data))
        return data

    def after_apply_batch(self) -> None:
        pass

    def snapshot(self) -> bytes:
        return b"".join(d + b"\n" for _, d in self.applied)

    def restore(self, data: bytes) -> None:
        self.applied = [(i + 1, d) for i, d in enumerate(data.split(b"\n")[:-1])]


def _node(nid: str, cfg: StoreBackendConfig) -> StoreLogNode:
    members = Membership({n: Member(f"127.0.0.1:{p}", "") for n, p in (("a", 1), ("b", 2))}, {})
    return StoreLogNode(nid, {"a": "127.0.0.1:1", "b": "127.0.0.1:2"}, Recorder(), cfg,
                        open_store(cfg.url.partition(":")[0] if cfg.url.startswith(("etcd:", "zookeeper:")) else "sql",
                                   cfg), members)


async def _until(pred, what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, what
        await asyncio.sleep(0.01)


def _hold(node: StoreLogNode) -> threading.Event:
    """Occupy both of the node's store worker threads until the returned event is set."""
    release = threading.Event()
    node._lock_ex.submit(release.wait)
    node._log_ex.submit(release.wait)
    return release


@pytest.mark.parametrize("backend", ["sqlite", "postgresql", "mariadb", "etcd", "zookeeper"])
def test_paused_leader_write_is_refused_by_the_store(backend, store_url, tmp_path):
    """A ZooKeeper session is kept alive by kazoo's own thread, so there the pause also cuts the
    leader's connection (a proxy that drops every byte) until the server expires its session;
    the write is released once the client has a new session, so it does reach the server."""
    proxy = None
    if backend == "zookeeper":
        hosts, _, chroot = store_url[len("zookeeper://"):].partition("/")
        host, port = hosts.split(",")[0].rsplit(":", 1)
        proxy = TcpProxy((host, int(port))).start()
        url_a = f"zookeeper://127.0.0.1:{proxy.port}/{chroot}"
    else:
        url_a = store_url
    common = {"lock_name": f"fence-{tmp_path.name}", "lease_ms": 1000, "heartbeat_ms": 100, "poll_ms": 10}
    cfg_a, cfg_b = StoreBackendConfig(url=url_a, **common), StoreBackendConfig(url=store_url, **common)

    async def run() -> None:
        a, b = _node("a", cfg_a), _node("b", cfg_b)
        release = threading.Event()
        try:
            await a.start()
            await _until(lambda: a.is_leader, "a leads")
            await b.start()
            assert (await a.propose(b"a-1", 5.0)) == b"a-1"
            release = _hold(a)                  # "SIGSTOP": a's store calls cannot run
            if proxy is not None:
                proxy.blackhole(True)           # ... nor can its ZooKeeper session be kept alive
            old = asyncio.ensure_future(a.propose_many([b"a-stale"], 30.0))
            await asyncio.sleep(0.05)
            await _until(lambda: b.is_leader, "b takes the lock after a's lease ran out")
            assert (await b.propose(b"b-1", 5.0)) == b"b-1"
            if proxy is not None:
                proxy.blackhole(False)
                proxy.cut()
                await _until(lambda: a.store.zk.state == "CONNECTED", "a's client has a new session")
            release.set()                       # "SIGCONT": a's queued write reaches the store
            outcome = (await old)[0]
            assert isinstance(outcome, NotLeader), outcome
            assert not a.is_leader
            _, entries = b.store.read(1, 100)
            assert [e.data for e in entries] == [b"a-1", b"b-1"], entries
            assert entries[1].term > entries[0].term
            await _until(lambda: a.sm.applied == b.sm.applied, "a converges on the store's log as a follower")
        finally:
            release.set()
            await a.stop()
            await b.stop()
            if proxy is not None:
                proxy.stop()

    asyncio.run(run())


def test_etcd_leader_silent_for_its_lease_is_replaced_while_its_etcd_lease_lives(etcd_url, tmp_path):
    """etcd's own lease expiry comes up to 500 ms after the TTL (its revoke loop), so the others
    take the key of a leader that stopped renewing for ``lease_ms``. Here the test keeps the
    paused leader's etcd lease alive itself: the only way b can lead is that takeover. a's
    write, released afterwards, is refused, and a finds its lease revoked."""
    from autoswitch.proto import etcd_pb2 as epb

    common = {"lock_name": f"silent-{tmp_path.name}", "lease_ms": 1000, "heartbeat_ms": 100, "poll_ms": 10}
    cfg = StoreBackendConfig(url=etcd_url, **common)

    async def run() -> None:
        a, b = _node("a", cfg), _node("b", cfg)
        release = threading.Event()
        keep = threading.Event()
        try:
            await a.start()
            await _until(lambda: a.is_leader, "a leads")
            await b.start()
            assert (await a.propose(b"a-1", 5.0)) == b"a-1"
            lease_id = a.store._lease_id
            release = _hold(a)

            def keep_alive() -> None:          # what a's keep-alive would do, had it got through
                while not keep.wait(0.2):
                    replies = a.store.lease.LeaseKeepAlive(iter([epb.LeaseKeepAliveRequest(ID=lease_id)]),
                                                           timeout=2.0)
                    if next(iter(replies)).TTL <= 0:
                        return
            kt = threading.Thread(target=keep_alive, daemon=True)
            kt.start()
            old = asyncio.ensure_future(a.propose_many([b"a-stale"], 30.0))
            await _until(lambda: b.is_leader, "b takes the key of the silent leader")
            assert (await b.propose(b"b-1", 5.0)) == b"b-1"
            keep.set()
            kt.join(5)
            release.set()
            outcome = (await old)[0]
            assert isinstance(outcome, NotLeader), outcome
            ttl = a.store.lease.LeaseTimeToLive(epb.LeaseTimeToLiveRequest(ID=lease_id), timeout=2.0).TTL
            assert ttl == -1, f"a's lease should be revoked by its successor, TTL {ttl}"
            _, entries = b.store.read(1, 100)
            assert [e.data for e in entries] == [b"a-1", b"b-1"], entries
            await _until(lambda: not a.is_leader and a.sm.applied == b.sm.applied, "a follows")
        finally:
            keep.set()
            release.set()
            await a.stop()
            await b.stop()

    asyncio.run(run())


@pytest.mark.parametrize("backend", ["sqlite", "postgresql", "etcd", "zookeeper"])
def test_sigstopped_leader_process_cannot_commit_after_the_new_leader(procs, tmp_path, backend, store_url):
    c = FailoverCluster(procs, tmp_path, store_url=store_url)
    c.start_all()
    m1_id, e1 = c.wait_master(timeout=30)
    c.wait_sync_state_set({1, 2, 3})
    from tests.integration.test_failover_control_plane import _leader

    leader = _leader(c)
    master = c.master_name()       # asked before the pause: the paused leader answers nothing
    os.kill(c.ctl_proc[leader].pid, signal.SIGSTOP)
    try:
        # the master dies while the controller leader is paused: the next leader elects
        c.broker_proc[master].kill9()
        m2_id, e2 = c.wait_master(timeout=30, not_id=m1_id, min_epoch=e1 + 1)
        time.sleep(STORE_LEASE_MS / 1000)      # the paused leader stays paused well past its lease
    finally:
        os.kill(c.ctl_proc[leader].pid, signal.SIGCONT)
    cfg = StoreBackendConfig(url=store_url, lock_name=tmp_path.name)
    store = open_store({"etcd": "etcd", "zookeeper": "zookeeper"}.get(backend, "sql"), cfg)
    store.create_schema()
    # Once a term wrote, no older term ever writes again (index order = commit order).
    _, entries = store.read(1, 100_000)
    terms = [e.term for e in entries]
    assert terms == sorted(terms) and len(set(terms)) >= 2, terms
    # The resumed process knows it lost the lock and follows: a write there is redirected.
    wait_until(lambda: len(ids := _leader_ids(c)) == 1 and leader not in ids, 20,
               "one leader, and not the resumed controller")
    wait_until(lambda: any("store_leadership_lost" in p.read_text() for p in (tmp_path / "logs").glob(f"{leader}-*.log")),
               20, "the resumed controller logs that it lost the lock")
    store.close()


def _leader_ids(c: FailoverCluster) -> set[str]:
    """The controllers that answer GetMetaData saying they lead (a paused one answers nothing)."""
    from autoswitch.controller.client import ControllerClient
    from autoswitch.controller.codes import ControllerRpcError

    from autoswitch.proto import controller_pb2 as pb

    async def run() -> set[str]:
        out = set()
        async with ControllerClient(c.controllers, deadline_s=2.0, rpc_timeout_s=1.0) as cl:
            for nid, addr in c.ctl_addrs.items():
                try:
                    md = await cl.call_node(addr, "GetMetaData", pb.GetMetaDataRequest())
                except ControllerRpcError:
                    continue
                if md.is_leader:
                    out.add(nid)
        return out

    return asyncio.run(run())


def test_postgresql_restarted_under_load_keeps_masters_and_elects_nothing_wrong(procs, tmp_path):
    """The store goes away for longer than the lock's lease while a producer writes: brokers keep
    their master (their leases come from the controller processes, not the store), nothing is
    elected meanwhile, and once PostgreSQL is back a controller takes the lock again and the
    cluster fails over as before."""
    from autoswitch.app.pgserver import PostgresServer
    from tests.procs import free_port

    pg = PostgresServer(free_port()).start()
    try:
        _store_away_under_load(FailoverCluster(procs, tmp_path, store_url=pg.url), tmp_path,
                               lambda: pg._pg_ctl("stop"), lambda: pg._pg_ctl("start"), "the store is away")
    finally:
        pg.stop()


def test_zookeeper_ensemble_losing_its_quorum_under_load_keeps_masters(procs, tmp_path):
    """A 3-server ZooKeeper ensemble loses its quorum (two servers stopped) for twice the
    controllers' session timeout while a producer writes: the master and its MasterEpoch stay and
    acks continue (leases come from the controller processes); once the servers are back a
    controller leads again (a new session, a new epoch) and a master kill fails over as before."""
    from autoswitch.app.zkserver import ZooKeeperServer
    from tests.procs import free_port

    zk = ZooKeeperServer([free_port() for _ in range(3)], [(free_port(), free_port()) for _ in range(3)]).start()

    def heal() -> None:
        zk.start_one(1)
        zk.start_one(2)
        for i in range(3):
            zk.wait_serving(i, 60)

    try:
        _store_away_under_load(FailoverCluster(procs, tmp_path, store_url=zk.url + "/ensemble"), tmp_path,
                               lambda: (zk.stop_one(1), zk.stop_one(2)), heal, "the quorum loss")
    finally:
        zk.stop()


@pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces need root (CI runs as root)")
def test_zookeeper_leader_partitioned_from_its_ensemble_keeps_masters(procs, tmp_path):
    """Three ZooKeeper servers, each in a network namespace of its own on a bridge
    (tests/chaos/netns.py); the controllers and brokers run outside and reach all three. The
    ensemble's leader is cut off from the other two servers (nftables) under acked produce: it
    loses its quorum and drops its clients, the other two elect a new leader, the controllers'
    sessions move over. No wrong election: the master and its MasterEpoch stay and acks go on;
    after the heal a master kill fails over as before."""
    from autoswitch.app.zkserver import ZooKeeperServer
    from tests.chaos.netns import Netns, can_run
    from tests.integration.failover_harness import read_ack_log

    why = can_run()
    assert why is None, why
    net = Netns(["zk1", "zk2", "zk3"], prefix="aszk", subnet="10.78.0")
    net.up()
    names = ["zk1", "zk2", "zk3"]
    zk = ZooKeeperServer([2181] * 3, [(2888, 3888)] * 3, hosts=[net.ip[n] for n in names],
                         wrap=lambda i: ["ip", "netns", "exec", net.ns[names[i]]])
    try:
        zk.start()
        c = FailoverCluster(procs, tmp_path, store_url=zk.url + "/partition")
        c.start_all()
        m1_id, e1 = c.wait_master(timeout=30)
        c.wait_sync_state_set({1, 2, 3})
        ack_log = tmp_path / "acks.jsonl"
        prod = c.producer("producer", ack_log, duration_s=20, interval_ms=10)
        wait_until(lambda: len(read_ack_log(ack_log)) >= 20, 20, "acks before the partition")
        leader = next(i for i in range(3) if zk.mode(i) == "leader")
        others = [names[i] for i in range(3) if i != leader]
        net.isolate(names[leader], others)
        for o in others:
            net.isolate(o, [names[leader]])
        t_cut = time.time()
        wait_until(lambda: any(zk.mode(i) == "leader" for i in range(3) if i != leader), 30,
                   "the majority side elects a new ZooKeeper leader")
        n_cut = len(read_ack_log(ack_log))
        wait_until(lambda: len(read_ack_log(ack_log)) >= n_cut + 20, 20, "acks during the partition")
        wait_until(lambda: _leader_ids(c), 30, "a controller leads during the partition")
        t_heal = time.time()
        net.heal()
        assert c.wait_master(timeout=30) == (m1_id, e1)
        acks = read_ack_log(ack_log)
        during = [a for a in acks if t_cut * 1000 <= a["ack_ts_ms"] <= t_heal * 1000]
        assert during and {(a["broker_id"], a["epoch"]) for a in during} == {(m1_id, e1)}
        c.broker_proc[c.master_name()].kill9()
        m2_id, e2 = c.wait_master(timeout=30, not_id=m1_id, min_epoch=e1 + 1)
        prod.popen.wait(90)
        assert prod.popen.returncode == 0, prod.log_text()[-3000:]
        assert e2 == e1 + 1
    finally:
        zk.stop()
        net.down()


def test_deleting_the_zookeeper_controller_node_by_hand_forces_a_reelection(zookeeper_url, tmp_path):
    """As with Kafka's /controller: an operator deletes the node, the leader's next write fails
    its check, the controllers race again (the losers watch the node) and the winner writes in a
    new epoch."""
    from kazoo.client import KazooClient

    cfg = StoreBackendConfig(url=zookeeper_url, lock_name=f"rm-{tmp_path.name}", lease_ms=1000, heartbeat_ms=100,
                             poll_ms=10)

    async def run() -> None:
        a, b = _node("a", cfg), _node("b", cfg)
        try:
            await a.start()
            await _until(lambda: a.is_leader, "a leads")
            await b.start()
            assert (await a.propose(b"before", 5.0)) == b"before"
            old_term = a.term
            hosts, _, chroot = zookeeper_url[len("zookeeper://"):].partition("/")
            zk = KazooClient(hosts=hosts)
            zk.start(timeout=10)
            try:
                zk.delete(f"/{chroot}/default/{cfg.lock_name}/controller")
            finally:
                zk.stop()
                zk.close()
            def new_leader() -> StoreLogNode | None:
                return next((n for n in (a, b) if n.is_leader and n.term > old_term), None)

            await _until(lambda: new_leader() is not None, "a leader elected in a new epoch")
            leader = new_leader()
            assert leader is not None
            assert (await leader.propose(b"after", 5.0)) == b"after"
            _, entries = leader.store.read(1, 100)
            assert [e.data for e in entries] == [b"before", b"after"]
            assert entries[1].term > entries[0].term
        finally:
            await a.stop()
            await b.stop()

    asyncio.run(run())


def _store_away_under_load(c: FailoverCluster, tmp_path, cut, heal, what: str) -> None:
    """The shared scenario of the store-outage tests: under acked produce, ``cut()`` takes the
    store away for at least twice the controllers' lock, acks must go on with the same master and
    MasterEpoch (leases come from the controller processes, not the store), ``heal()`` brings it
    back, a controller leads again and a master kill fails over as before."""
    from tests.integration.failover_harness import read_ack_log

    c.start_all()
    m1_id, e1 = c.wait_master(timeout=30)
    c.wait_sync_state_set({1, 2, 3})
    ack_log = tmp_path / "acks.jsonl"
    prod = c.producer("producer", ack_log, duration_s=20, interval_ms=10)
    wait_until(lambda: len(read_ack_log(ack_log)) >= 20, 20, f"acks before {what}")
    cut()
    t_down = time.time()
    time.sleep(2 * STORE_LEASE_MS / 1000)   # the outage itself: longer than the lock's lease
    n_down = len(read_ack_log(ack_log))
    wait_until(lambda: len(read_ack_log(ack_log)) >= n_down + 20, 20, f"acks during {what}")
    t_up = time.time()
    heal()
    # the same master, the same MasterEpoch: nobody elected while the store was away
    assert c.wait_master(timeout=30) == (m1_id, e1)
    acks = read_ack_log(ack_log)
    during = [a for a in acks if t_down * 1000 <= a["ack_ts_ms"] <= t_up * 1000]
    assert during and {(a["broker_id"], a["epoch"]) for a in during} == {(m1_id, e1)}
    wait_until(lambda: _leader_ids(c), 30, f"a controller leads after {what}")
    c.broker_proc[c.master_name()].kill9()
    _, e2 = c.wait_master(timeout=30, not_id=m1_id, min_epoch=e1 + 1)
    prod.popen.wait(90)
    assert prod.popen.returncode == 0, prod.log_text()[-3000:]
    assert e2 == e1 + 1


def test_a_store_loop_that_ends_before_stop_ends_the_process(tmp_path, monkeypatch):
    """The lock, tail and write loops run until stop(): a lock loop that ended would leave a
    node that never leads again, a write loop one whose proposals never reach the store."""
    from autoswitch.base import supervise

    exits: list[int] = []
    monkeypatch.setattr(supervise, "process_exit", exits.append)
    cfg = StoreBackendConfig(url=f"sqlite:///{tmp_path / 'store.db'}", lock_name="loops", lease_ms=1000,
                             heartbeat_ms=100, poll_ms=10)

    async def run() -> None:
        a = _node("a", cfg)
        await a.start()
        try:
            await _until(lambda: a.is_leader, "a leads")
            tasks = {t.get_name(): t for t in asyncio.all_tasks()}
            for n, name in enumerate(("store-lock-a", "store-tail-a", "store-write-a"), start=1):
                tasks[name].cancel()
                await _until(lambda n=n: len(exits) == n, f"{name} ended the process")
        finally:
            await a.stop()
        await asyncio.sleep(0)

    asyncio.run(run())
    assert exits == [70, 70, 70]
