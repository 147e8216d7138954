"""Real-process failover clusters for tests (and benches): 3 controller processes, 1 name server,
N brokers in controller mode, all on 127.0.0.1, ended by PID (tests/procs.py).

Timings are fast but keep the lease argument valid: controller heartbeat timeout 1000 ms,
dead-master scan every 100 ms, broker lease 600 ms (600 x 1.01 + 200 safety < 1000),
broker heartbeat every 200 ms.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from autoswitch.controller.store.config import StoreBackendConfig

from autoswitch.app.zkserver import TICK_MS as ZK_TICK_MS
from tests.procs import HOST, Proc, ProcGroup, free_port, wait_port
from tests.waiting import MIN_WAIT_S

GROUP = "g1"
CLUSTER = "c1"
TOPIC = "t"
HEARTBEAT_TIMEOUT_MS = 1000
LEASE_MS = 600
# The SQL backend's lock: a killed leader is replaced within about this. Its lease plus the
# statement timeout must fit in the heartbeat timeout (controller/config.py).
STORE_LEASE_MS = 600
ETCD_HEARTBEAT_TIMEOUT_MS = 2000

CONTROLLER_TOML = """
[controller]
heartbeat_timeout_ms = {timeout_ms}
scan_interval_ms = 100
propose_timeout_s = 2.0
read_timeout_s = 1.5
"""


# `secure`: every process on mutual TLS with authorization on; broker bN holds broker/g1/N.
# `tls_mode` (what a process gets when it is next started; a migration changes it between rolling
# restarts): "off" plaintext; "accept-dial-plain" accepts both, dials plaintext; "accept" accepts
# both, dials TLS; "on" TLS only, with authorization.
TLS_MODES = ("off", "accept-dial-plain", "accept", "on")
SECURE_IDENTITIES = ["controller/n1", "controller/n2", "controller/n3", "controller/n4", "namesrv/1", "broker/g1/1", "broker/g1/2",
                     "broker/g1/3", "broker/g1/4", "broker/g2/2", "admin", "producer/app", "reader/ops",
                     "client/cli"]     # a certificate without a role: its bearer token says who calls


class FailoverCluster:
    def __init__(self, procs: ProcGroup, tmp: Path, *, n_brokers: int = 3, lease: bool = True,
                 ack_mode: str = "all", secure: bool = False, heartbeat_timeout_ms: int = HEARTBEAT_TIMEOUT_MS,
                 metrics: bool = False, controller_toml: str = "", store_url: str | None = None,
                 fetch: bool = False) -> None:
        self.procs = procs
        self.fetch = fetch            # brokers also serve a fetch port (fetch_listen), registered in their routes
        self.broker_extra_args: dict[str, list[str]] = {}   # name -> more flags for that broker
        self.broker_fetch_port: dict[str, int] = {}
        # store_url: the controllers keep their log in that SQL database (backend = "sql") instead of Raft
        self.store_url = store_url
        self.backend = "raft" if not store_url else "etcd" if store_url.startswith("etcd://") \
            else "zookeeper" if store_url.startswith("zookeeper://") else "sql"
        self.tls_mode = "on" if secure else "off"
        self._certs: dict[str, dict[str, str]] = {}
        # name -> certificate identity, when a broker's registered id is not the one in its name
        self.identity_override: dict[str, str] = {}
        self.tmp = Path(tmp)
        self.n_brokers = n_brokers
        self.lease = lease
        self.ack_mode = ack_mode
        self.ctl_ids = ["n1", "n2", "n3"]
        self.ctl_ports = {n: free_port() for n in self.ctl_ids}
        self.ctl_addrs = {n: f"{HOST}:{p}" for n, p in self.ctl_ports.items()}
        self.raft_addrs = {n: f"{HOST}:{free_port()}" for n in self.ctl_ids}   # Raft's own listeners
        self.ctl_proc: dict[str, Proc] = {}
        self.namesrv_port = free_port()
        self.namesrv = f"{HOST}:{self.namesrv_port}"
        self.toml = self.tmp / "controller.toml"
        self.toml.parent.mkdir(parents=True, exist_ok=True)
        # etcd leases are whole seconds: 1 s of lock plus a statement must fit in the timeout; so
        # are MariaDB's idle-transaction bounds (the lock, 1 s of idle gap and a COMMIT)
        self.heartbeat_timeout_ms = max(heartbeat_timeout_ms, ETCD_HEARTBEAT_TIMEOUT_MS) \
            if self.backend == "etcd" or (store_url or "").startswith(("mysql", "mariadb")) else heartbeat_timeout_ms
        # process name (n1, b1, ...) -> its /metrics port, when ``metrics``
        self.metrics_port: dict[str, int] = {}
        self.metrics = metrics
        key, table = self._backend_toml()
        self.toml.write_text(CONTROLLER_TOML.format(timeout_ms=self.heartbeat_timeout_ms) + key + controller_toml + table)
        self.tokens_file = self.tmp / "tokens.toml"
        if self.secure:
            from autoswitch.app.certs import issue_token

            # The operators' tokens: what a CLI without a client certificate presents.
            self.tokens = {"ops-reader": issue_token(self.tokens_file, "ops-reader", ["reader"]),
                           "ops-admin": issue_token(self.tokens_file, "ops-admin", ["admin", "reader"])}
        self.broker_port: dict[str, int] = {}
        # HA ports are NOT listen port + 1: brokers register their HA address with the controller
        # and slaves connect where ReplicaInfo.master_ha_address says.
        self.broker_ha_port: dict[str, int] = {}
        self.broker_proc: dict[str, Proc] = {}
        self._gen: dict[str, int] = {}

    def _backend_toml(self) -> tuple[str, str]:
        """The controllers' replicated log: our Raft, or one SQL database all three share
        (``backend = "sql"``: a lock row and a log table; STORE_LEASE_MS is its failover time).
        Returns ([controller] key, [store] table)."""
        if not self.store_url:
            return "", ""
        # one lock row and log per cluster: tests sharing a database keep apart by lock_name
        # an etcd lease is whole seconds (the harness gives etcd clusters a longer heartbeat timeout);
        # statements get what the backend's fence bound leaves of the heartbeat timeout
        lease = 1000 if self.backend == "etcd" else STORE_LEASE_MS
        store = StoreBackendConfig(url=self.store_url, lease_ms=lease, zk_tick_ms=ZK_TICK_MS)
        # (a SQL write may commit an idle gap plus a COMMIT after its fence: StoreBackendConfig.commit_delay_ms)
        left = self.heartbeat_timeout_ms - store.fence_bound_ms(self.backend)
        mariadb = self.store_url.startswith(("mysql", "mariadb"))
        statement = min(left - 1000 if mariadb else left // 2 if self.backend == "sql" else left, lease)
        return (f'backend = "{self.backend}"\n', f'\n[store]\nurl = "{self.store_url}"\nlock_name = "{self.tmp.name}"\n'
                f"lease_ms = {lease}\nheartbeat_ms = {lease // 4}\npoll_ms = 20\nzk_tick_ms = {ZK_TICK_MS}\n"
                f"statement_timeout_ms = {statement}\n")

    # ------------------------------------------------------------ credentials

    @property
    def secure(self) -> bool:
        return self.tls_mode == "on"

    @property
    def certs(self) -> dict[str, dict[str, str]]:
        if not self._certs:
            from autoswitch.app.certs import init_dev_ca

            self._certs = init_dev_ca(self.tmp / "certs", SECURE_IDENTITIES)
        return self._certs

    @property
    def clients_use_tls(self) -> bool:
        return self.tls_mode in ("accept", "on")

    def tls_args(self, identity: str) -> list[str]:
        """The flags that make a client ``identity`` on this cluster (none while clients use plaintext)."""
        if not self.clients_use_tls:
            return []
        c = self.certs[identity]
        return ["--tls-ca", c["ca"], "--tls-cert", c["cert"], "--tls-key", c["key"]]

    def server_args(self, identity: str) -> list[str]:
        if self.tls_mode == "off":
            return []
        c = self.certs[identity]
        files = ["--tls-ca", c["ca"], "--tls-cert", c["cert"], "--tls-key", c["key"]]
        return files + {"accept-dial-plain": ["--tls-accept-plaintext", "--tls-dial-plaintext"],
                        "accept": ["--tls-accept-plaintext"], "on": ["--auth"]}[self.tls_mode]

    def tls(self, identity: str = "admin") -> Any:
        """Client credentials (TLSConfig) as ``identity``; plaintext while clients use plaintext."""
        from autoswitch.base.tls import TLSConfig

        if not self.clients_use_tls:
            return TLSConfig.off()
        c = self.certs[identity]
        return TLSConfig(ca=c["ca"], cert=c["cert"], key=c["key"]).validate()

    def token_tls(self, token_name: str) -> Any:
        """An operator's CLI: the shared role-less certificate plus a personal bearer token."""
        from autoswitch.base.tls import TLSConfig

        c = self.certs["client/cli"]
        return TLSConfig(ca=c["ca"], cert=c["cert"], key=c["key"], token=self.tokens[token_name]).validate()

    def broker_identity(self, name: str) -> str:
        return self.identity_override.get(name) or f"broker/{GROUP}/{int(name.lstrip('b'))}"

    # ------------------------------------------------------------ processes

    @property
    def controllers(self) -> str:
        return ",".join(self.ctl_addrs.values())

    def _name(self, base: str) -> str:
        self._gen[base] = self._gen.get(base, 0) + 1
        return f"{base}-{self._gen[base]}"

    def add_controller_ports(self, nid: str) -> None:
        """Addresses for a controller that joins later (``start_controller(nid, cluster_id=...)``)."""
        self.ctl_ids.append(nid)
        self.ctl_ports[nid] = free_port()
        self.ctl_addrs[nid] = f"{HOST}:{self.ctl_ports[nid]}"
        self.raft_addrs[nid] = f"{HOST}:{free_port()}"

    def start_controller(self, nid: str, wait: bool = True, join: bool = False, cluster_id: str = "") -> Proc:
        peers = ",".join(f"{n}={a}" for n, a in self.ctl_addrs.items())
        raft = ",".join(f"{n}={a}" for n, a in self.raft_addrs.items())
        member = (["--join"] if join else []) + (["--cluster-id", cluster_id] if cluster_id else [])
        raft_args = ["--raft-peers", raft] if self.backend == "raft" else []
        p = self.procs.start(self._name(nid), ["controller", "--node-id", nid, "--peers", peers, "--data-dir",
                                               str(self.tmp / f"ctl-{nid}"), *raft_args, *member,
                                               "--config", str(self.toml), *self._metrics_args(nid),
                                               *self.server_args(f"controller/{nid}"),
                                               *(["--auth-tokens-file", str(self.tokens_file)] if self.secure and self.tokens_file.exists() else [])])
        self.ctl_proc[nid] = p
        if wait:
            wait_port(self.ctl_ports[nid], timeout=20, proc=p.popen)
        return p

    def start_controllers(self) -> None:
        # In parallel: Python start-up dominates (about 1 s per process on this machine).
        started = [(n, self.start_controller(n, wait=False)) for n in self.ctl_ids]
        for n, p in started:
            wait_port(self.ctl_ports[n], timeout=20, proc=p.popen)

    def start_namesrv(self, wait: bool = True) -> Proc:
        # --controllers: master routes must match the controllers' master and MasterEpoch.
        p = self.procs.start("namesrv", ["namesrv", "--listen", self.namesrv, "--route-ttl-s", "5",
                                         "--controllers", self.controllers, *self.server_args("namesrv/1"),
                                         *self._metrics_args("namesrv")])
        if wait:
            wait_port(self.namesrv_port, timeout=20, proc=p.popen)
        return p

    def broker_args(self, name: str, *, controllers: str | None = None, lease: bool | None = None) -> list[str]:
        port = self.broker_port[name]
        lease = self.lease if lease is None else lease
        args = ["broker", "--cluster", CLUSTER, "--group", GROUP, "--listen", f"{HOST}:{port}",
                "--ha-listen", f"{HOST}:{self.broker_ha_port[name]}", "--data-dir", str(self.tmp / f"broker-{name}"),
                "--controllers", controllers or self.controllers, "--namesrv", self.namesrv,
                "--heartbeat-timeout-ms", str(self.heartbeat_timeout_ms), "--ack-mode", self.ack_mode,
                "--ack-timeout", "3"]
        if self.tls_mode != "off":
            args += self.server_args(self.broker_identity(name))
        args += ["--master-lease-ms", str(LEASE_MS)] if lease else ["--no-master-lease"]
        if self.fetch:
            args += ["--fetch-listen", f"{HOST}:{self.broker_fetch_port[name]}"]
        return args + self._metrics_args(name) + self.broker_extra_args.get(name, [])

    def _metrics_args(self, name: str) -> list[str]:
        if not self.metrics:
            return []
        port = self.metrics_port.setdefault(name, free_port())
        return ["--metrics-listen", f"{HOST}:{port}"]

    def start_broker(self, name: str, *, new_port: bool = False, env: dict | None = None,
                     controllers: str | None = None, wait: bool = True, lease: bool | None = None,
                     crash_at: str | None = None) -> Proc:
        if name not in self.broker_port or new_port:
            self.broker_port[name] = free_port()
            self.broker_ha_port[name] = free_port()
            self.broker_fetch_port[name] = free_port()
        p = self.procs.start(self._name(name), self.broker_args(name, controllers=controllers, lease=lease),
                             env=env, crash_at=crash_at)
        self.broker_proc[name] = p
        if wait:
            wait_port(self.broker_port[name], timeout=20, proc=p.popen)
        return p

    def broker_addr(self, name: str) -> str:
        return f"{HOST}:{self.broker_port[name]}"

    def start_all(self, names: tuple[str, ...] = ("b1", "b2", "b3")) -> None:
        ns = self.start_namesrv(wait=False)
        self.start_controllers()
        wait_port(self.namesrv_port, timeout=20, proc=ns.popen)
        self.start_brokers(names)

    def start_brokers(self, names: tuple[str, ...], **kw: Any) -> None:
        started = [(n, self.start_broker(n, wait=False, **kw)) for n in names]
        for n, p in started:
            wait_port(self.broker_port[n], timeout=20, proc=p.popen)

    # ------------------------------------------------------------ queries

    def replica_info(self) -> Any:
        return _run(self._replica_info())

    async def _replica_info(self) -> Any:
        from autoswitch.controller.client import ControllerClient

        async with ControllerClient(self.controllers, deadline_s=3.0, rpc_timeout_s=1.0, tls=self.tls()) as c:
            groups = await c.get_sync_state_data([GROUP])
            return groups[0] if groups else None

    def status(self, name: str) -> dict:
        return _run(_status(self.broker_addr(name), self.tls()))

    def name_of_id(self, broker_id: int) -> str | None:
        for n in self.broker_proc:
            with contextlib.suppress(Exception):
                if self.broker_proc[n].alive() and self.status(n)["broker_id"] == broker_id:
                    return n
        return None

    def wait_master(self, *, timeout: float = 30.0, not_id: int = 0, min_epoch: int = 0) -> tuple[int, int]:
        """(masterBrokerId, masterEpoch) once the controller has a master other than not_id with
        epoch >= min_epoch, and that broker reports itself master and accepts writes."""
        timeout = max(timeout, MIN_WAIT_S)      # readiness: the bound only ends a stuck test
        deadline = time.monotonic() + timeout
        last: Any = None
        while time.monotonic() < deadline:
            with contextlib.suppress(Exception):
                g = self.replica_info()
                last = g
                ri = g.replica_info
                if ri.master_broker_id and ri.master_broker_id != not_id and ri.master_epoch >= min_epoch:
                    name = self._name_by_addr(ri.master_address)
                    if name is not None:
                        st = self.status(name)
                        if st["role"] == "master" and st["master_epoch"] == ri.master_epoch \
                                and not st["fenced_reason"]:
                            return int(ri.master_broker_id), int(ri.master_epoch)
            time.sleep(0.1)
        raise TimeoutError(f"no master (not {not_id}, epoch >= {min_epoch}) within {timeout}s; last {last}")

    def wait_sync_state_set(self, ids: set[int], timeout: float = 30.0) -> Any:
        timeout = max(timeout, MIN_WAIT_S)      # readiness: the bound only ends a stuck test
        deadline = time.monotonic() + timeout
        last: Any = None
        while time.monotonic() < deadline:
            with contextlib.suppress(Exception):
                g = self.replica_info()
                last = set(g.replica_info.sync_state_set)
                if ids <= last:
                    return g
            time.sleep(0.1)
        raise TimeoutError(f"SyncStateSet {last} does not contain {ids} after {timeout}s")

    def _name_by_addr(self, addr: str) -> str | None:
        for n in self.broker_port:
            if self.broker_addr(n) == addr:
                return n
        return None

    def master_name(self) -> str:
        g = self.replica_info()
        name = self._name_by_addr(g.replica_info.master_address)
        assert name is not None, g
        return name

    # ------------------------------------------------------------ clients

    def producer(self, name: str, ack_log: Path, *, duration_s: float, count: int = 10**9,
                 interval_ms: float = 5, retry_deadline_s: float = 20) -> Proc:
        return self.procs.start(name, ["produce", "--namesrv", self.namesrv, "--group", GROUP, "--topic", TOPIC,
                                       "--count", str(count), "--size", "64", "--duration-s", str(duration_s),
                                       "--interval-ms", str(interval_ms), "--ack-log", str(ack_log),
                                       "--retry-deadline-s", str(retry_deadline_s), "--timeout", "2",
                                       *self.tls_args("producer/app")])


def _run(coro: Any) -> Any:
    return asyncio.run(coro)


async def _status(addr: str, tls: Any = None) -> dict:
    from autoswitch.broker.client.client import AdminClient

    c = AdminClient(addr, max_retries=0, timeout_s=2.0, tls=tls)
    try:
        r = await c.get_status()
    finally:
        await c.close()
    return {"broker_id": r.broker_id, "role": r.role, "master_epoch": r.master_epoch, "max_offset": r.max_offset,
            "confirm_offset": r.confirm_offset, "fenced_reason": r.fenced_reason,
            "replicas": json.loads(r.replicas_json) if r.replicas_json else None,
            "digests": json.loads(r.digests_json) if r.digests_json else {},
            "sync_state_set": list(r.sync_state_set)}


def read_ack_log(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def consume_all(addr: str, topic: str = TOPIC, limit: int = 10**6, tls: Any = None) -> list[Any]:
    """Every message below confirmOffset of one broker, in queue order."""

    async def run() -> list[Any]:
        from autoswitch.broker.client.client import ConsumerClient

        from autoswitch.proto import broker_pb2 as pb

        c = ConsumerClient(addr, max_retries=2, timeout_s=5.0, tls=tls)
        out: list[Any] = []
        q = 0
        try:
            while len(out) < limit:
                r = await c.consume(topic, q, 1000)
                assert r.status == pb.OK, (pb.Status.Name(r.status), r.error_message)
                if not r.messages:
                    return out
                out.extend(r.messages)
                q = r.next_queue_offset
        finally:
            await c.close()
        return out

    return _run(run())


def consume_routed(namesrv: str, group: str = GROUP, topic: str = TOPIC, tls_args: list[str] | None = None) -> list[dict]:
    """The `autoswitch consume --namesrv` CLI: what an application sees."""
    out = subprocess.run([sys.executable, "-m", "autoswitch", "consume", "--namesrv", namesrv, "--group", group,
                          "--topic", topic, "--count", str(10**7), "--json", *(tls_args or [])],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr[-2000:]
    lines = [json.loads(line) for line in out.stdout.splitlines() if line.strip()]
    assert lines and lines[-1]["ok"] and lines[-1]["command"] == "consume", out.stdout[-2000:]
    return lines[:-1]         # the record lines; the last line is the command's envelope


def log_digest(addr: str, to_offset: int, tls: Any = None) -> str:
    async def run() -> str:
        from autoswitch.broker.client.client import AdminClient

        c = AdminClient(addr, max_retries=2, tls=tls)
        try:
            r = await c.log_digest(0, to_offset)
        finally:
            await c.close()
        assert r.status == 0, r.error_message
        return r.sha256

    return _run(run())


def wait_until(pred: Any, timeout: float, what: str, interval: float = 0.1) -> Any:
    # A readiness wait, not a timing check: the bound only ends a test that is really stuck,
    # so it never drops below MIN_WAIT_S however short the caller's guess (load 4-6 on 2 cores
    # stretched 10 s waits past their end).
    timeout = max(timeout, MIN_WAIT_S)
    deadline = time.monotonic() + timeout
    last_exc: BaseException | None = None
    while time.monotonic() < deadline:
        try:
            v = pred()
            if v:
                return v
        except Exception as e:  # noqa: BLE001 - retried until the deadline, reported then
            last_exc = e
        time.sleep(interval)
    raise TimeoutError(f"{what} not reached within {timeout}s (last error: {last_exc!r})")
