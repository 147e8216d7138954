"""Controller write throughput/latency vs a 3-member etcd, same client shape, same run.

Ours: 3 `python -m autoswitch controller` processes on 127.0.0.1 (Raft fsync on). Each of C
concurrent clients owns one broker group (2 registered replicas kept alive by heartbeats, master
elected) and loops AlterSyncStateSet {1,2} <-> {1} with the right epochs: every call is one Raft
commit of an AlterSyncStateSet-sized entry. etcd: 3 members (Debian etcd-server; installed with
apt-get if missing), C clients each looping a PUT of a value of the same size through etcd's native
gRPC `KV.Put` on grpc.aio (same client stack as ours: one unary call per write, one channel per
member). Then a sequential (1 client) run of each.

Prints progress on stderr and one JSON line on stdout:
{"commits_s", "p50_ms", "p99_ms", "etcd_puts_s", "ratio_vs_etcd", "seq_commit_p50_ms",
 "cpu_us_per_commit", "etcd_cpu_us_per_put", "ratio_cap_cpu", ...}: the CPU columns are each
process's user + system CPU over the concurrent phase per operation (ours by node id, with the
leader named; the bench process itself as "client"), what explains a figure on a noisy machine;
``ratio_cap_cpu`` (etcd's total CPU per put over ours per commit) is the ratio both sides would
reach with every core busy: a ratio_vs_etcd near it is at the CPU's limit.

    python -m bench.controller [--clients 64] [--seconds 10] [--seq-ops 300] [--tls] [--metrics]

--metrics (make bench-controller METRICS=1): our cluster runs the concurrent load a second time
with /metrics served by every node and scraped every second -> ``ratio_metrics_on_vs_off``
(target >= 0.95, issue 15). The controller's counters are kept either way; "off" only has no
HTTP port and no scrapes.

--tls (make bench-controller TLS=1): both sides on mutual TLS from one development CA. Ours also
has authorization on (every call checked by the interceptor; the bench client is one identity
mapped to the broker, admin and reader roles, like a process hosting many brokers); etcd runs
with --client-cert-auth and peer TLS (its RBAC needs per-request auth tokens and stays off).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.produce import CpuMeter
from tests.procs import free_port, wait_port

HOST = "127.0.0.1"
VALUE_BYTES = 200   # ~ an encoded AlterSyncStateSet request (messages.encode_request)


def log(name: str, msg: str) -> None:
    print(f"[bench.{name}] {msg}", file=sys.stderr, flush=True)




def pct(xs: list[float], p: float) -> float:
    if not xs:
        return float("nan")
    s = sorted(xs)
    return s[min(len(s) - 1, int(p / 100.0 * len(s)))]


def stop_pid(p: subprocess.Popen, sig: int = signal.SIGTERM, timeout: float = 10.0) -> None:
    if p.poll() is not None:
        return
    os.kill(p.pid, sig)
    try:
        p.wait(timeout)
    except subprocess.TimeoutExpired:
        os.kill(p.pid, signal.SIGKILL)
        p.wait(10)


# ----------------------------------------------------------------------------- our controller


class Controllers:
    """3 controller processes; restartable by id; ended by PID."""

    def __init__(self, root: Path, n: int = 3, toml: str = "", log_level: str = "warning",
                 tls_dir: Path | None = None, metrics: bool = False) -> None:
        self.root = root
        self.metrics_ports = {f"n{i + 1}": free_port() for i in range(n)} if metrics else {}
        self.tls_dir = tls_dir
        self.log_level = log_level
        self.ids = [f"n{i + 1}" for i in range(n)]
        self.ports = {nid: free_port() for nid in self.ids}
        self.addrs = {nid: f"{HOST}:{p}" for nid, p in self.ports.items()}
        self.raft_addrs = {nid: f"{HOST}:{free_port()}" for nid in self.ids}   # production layout
        self.procs: dict[str, subprocess.Popen] = {}
        self.toml = root / "controller.toml"
        self.toml.write_text(toml)

    @property
    def spec(self) -> str:
        return ",".join(self.addrs.values())

    def start(self, nid: str, wait: bool = True) -> None:
        peers = ",".join(f"{n}={a}" for n, a in self.addrs.items())
        logf = open(self.root / f"{nid}.log", "ab")
        p = subprocess.Popen(
            [sys.executable, "-m", "autoswitch", "--log-level", self.log_level, "controller", "--node-id", nid,
             "--peers", peers, "--raft-peers", ",".join(f"{n}={a}" for n, a in self.raft_addrs.items()),
             "--data-dir", str(self.root / f"data-{nid}"), "--config", str(self.toml), *self._tls_flags(nid),
             *(["--metrics-listen", f"{HOST}:{self.metrics_ports[nid]}"] if self.metrics_ports else [])],
            stdout=logf, stderr=subprocess.STDOUT, start_new_session=True)
        logf.close()
        self.procs[nid] = p
        if wait:
            wait_port(self.ports[nid], timeout=30.0, proc=p)

    def _tls_flags(self, nid: str) -> list[str]:
        if self.tls_dir is None:
            return []
        d = self.tls_dir
        return ["--tls-ca", str(d / "ca.pem"), "--tls-cert", str(d / f"controller_{nid}.pem"),
                "--tls-key", str(d / f"controller_{nid}.key"), "--auth"]

    def start_all(self) -> None:
        """All processes at once (as an operator restarting a cluster would), then wait for the ports."""
        for nid in self.ids:
            self.start(nid, wait=False)
        for nid in self.ids:
            wait_port(self.ports[nid], timeout=30.0, proc=self.procs[nid])

    def kill9(self, nid: str) -> None:
        stop_pid(self.procs[nid], signal.SIGKILL)

    def stop_all(self) -> None:
        for p in self.procs.values():
            with contextlib.suppress(Exception):
                stop_pid(p)

    def pid_of(self, nid: str) -> int:
        return self.procs[nid].pid


async def leader_of(client, addrs: dict[str, str], timeout: float = 20.0) -> str:
    from autoswitch.controller.codes import ControllerRpcError

    from autoswitch.proto import controller_pb2 as pb

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for nid, addr in addrs.items():
            with contextlib.suppress(ControllerRpcError):
                m = await client.call_node(addr, "GetMetaData", pb.GetMetaDataRequest(), timeout_s=0.5)
                if m.is_leader:
                    return nid
        await asyncio.sleep(0.05)
    raise TimeoutError("no leader")


async def setup_groups(client, n_groups: int, prefix: str = "bg") -> list[tuple[str, int]]:
    """Register n groups with brokers 1 and 2 and elect broker 1; returns [(group, masterEpoch)]."""
    from autoswitch.proto import controller_pb2 as pb

    sem = asyncio.Semaphore(32)

    async def one(i: int) -> tuple[str, int]:
        g = f"{prefix}{i}"
        async with sem:
            for bid in (1, 2):
                await client.apply_broker_id("bench", g, bid, f"code-{g}-{bid}")
                await client.register_broker("bench", g, bid, f"127.0.0.1:{20000 + bid}")
            await heartbeat_group(client, g)
            info = await client.elect_master("bench", g, 1, designate=True)
            return g, info.master_epoch

    del pb
    return list(await asyncio.gather(*(one(i) for i in range(n_groups))))


async def heartbeat_group(client, g: str) -> None:
    from autoswitch.proto import controller_pb2 as pb

    for bid in (1, 2):
        await client.heartbeat_all(pb.BrokerHeartbeatRequest(
            cluster_name="bench", broker_name=g, broker_id=bid, broker_address=f"127.0.0.1:{20000 + bid}",
            epoch=1, max_offset=100, confirm_offset=100, clean_shutdown=True))


async def ours_load(spec: str, groups: list[tuple[str, int]], seconds: float, max_ops: int, tls=None,
                    hb_interval_s: float = 1.0) -> dict:
    """Concurrent AlterSyncStateSet loops, one per group; every ``hb_interval_s`` the groups'
    two replicas heartbeat (well inside the controllers' heartbeat timeout)."""
    from autoswitch.controller.client import ControllerClient

    lat: list[float] = []
    errors = 0
    done = 0
    stop_at = time.monotonic() + seconds

    async def hb_loop(client, gs):
        while time.monotonic() < stop_at:
            await asyncio.gather(*(heartbeat_group(client, g) for g, _ in gs))
            await asyncio.sleep(hb_interval_s)

    async def worker(client, g: str, epoch: int):
        nonlocal errors, done
        sss, sss_epoch = [1], None
        info = await client.get_replica_info(g)
        sss, sss_epoch = list(info.sync_state_set), info.sync_state_set_epoch
        while time.monotonic() < stop_at and done < max_ops:
            new = [1] if len(sss) == 2 else [1, 2]
            t0 = time.perf_counter()
            try:
                sss, sss_epoch = await client.alter_sync_state_set(g, 1, epoch, new, sss_epoch)
                lat.append((time.perf_counter() - t0) * 1000)
                done += 1
            except Exception as e:  # noqa: BLE001 - counted, the bench goes on
                errors += 1
                if errors < 5:
                    log("controller", f"write error {e}")
                info = await client.get_replica_info(g)
                sss, sss_epoch = list(info.sync_state_set), info.sync_state_set_epoch

    async with ControllerClient(spec, tls=tls) as hb_client, ControllerClient(spec, tls=tls) as client:
        t0 = time.monotonic()
        hb = asyncio.create_task(hb_loop(hb_client, groups))
        await asyncio.gather(*(worker(client, g, e) for g, e in groups))
        elapsed = time.monotonic() - t0
        hb.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await hb
    return {"ops": done, "errors": errors, "elapsed": elapsed, "lat": lat}


# ----------------------------------------------------------------------------- etcd


def ensure_etcd() -> str:
    exe = shutil.which("etcd")
    if exe:
        return exe
    log("controller", "etcd missing: apt-get install -y etcd-server")
    subprocess.run(["apt-get", "install", "-y", "-q", "etcd-server"], check=True,
                   stdout=subprocess.DEVNULL, env=dict(os.environ, DEBIAN_FRONTEND="noninteractive"))
    exe = shutil.which("etcd")
    if not exe:
        raise RuntimeError("etcd not installed")
    return exe


class Etcd:
    """3 etcd members on 127.0.0.1 in a temp dir, ended by PID."""

    def __init__(self, root: Path, heartbeat_ms: int = 100, election_ms: int = 1000,
                 tls_dir: Path | None = None) -> None:
        self.exe = ensure_etcd()
        self.tls_dir = tls_dir
        self.scheme = "https" if tls_dir else "http"
        self.root = root
        self.names = ["e1", "e2", "e3"]
        self.client_ports = {n: free_port() for n in self.names}
        self.peer_ports = {n: free_port() for n in self.names}
        self.heartbeat_ms = heartbeat_ms
        self.election_ms = election_ms
        self.procs: dict[str, subprocess.Popen] = {}

    def start(self, name: str, state: str = "new") -> None:
        sch = self.scheme
        cluster = ",".join(f"{n}={sch}://{HOST}:{self.peer_ports[n]}" for n in self.names)
        tls: list[str] = []
        if self.tls_dir is not None:
            d = self.tls_dir
            ca, cert, key = str(d / "ca.pem"), str(d / f"etcd_{name}.pem"), str(d / f"etcd_{name}.key")
            tls = ["--cert-file", cert, "--key-file", key, "--trusted-ca-file", ca, "--client-cert-auth",
                   "--peer-cert-file", cert, "--peer-key-file", key, "--peer-trusted-ca-file", ca,
                   "--peer-client-cert-auth"]
        logf = open(self.root / f"{name}.log", "ab")
        p = subprocess.Popen(
            [self.exe, "--name", name, "--data-dir", str(self.root / name),
             "--listen-client-urls", f"{sch}://{HOST}:{self.client_ports[name]}",
             "--advertise-client-urls", f"{sch}://{HOST}:{self.client_ports[name]}",
             "--listen-peer-urls", f"{sch}://{HOST}:{self.peer_ports[name]}",
             "--initial-advertise-peer-urls", f"{sch}://{HOST}:{self.peer_ports[name]}", *tls,
             "--initial-cluster", cluster, "--initial-cluster-state", state,
             "--initial-cluster-token", "bench", "--heartbeat-interval", str(self.heartbeat_ms),
             "--election-timeout", str(self.election_ms), "--log-level", "error"],
            stdout=logf, stderr=subprocess.STDOUT, start_new_session=True)
        logf.close()
        self.procs[name] = p

    def start_all(self) -> None:
        for n in self.names:
            self.start(n)
        for n in self.names:
            wait_port(self.client_ports[n], timeout=30.0, proc=self.procs[n])

    def kill9(self, name: str) -> None:
        stop_pid(self.procs[name], signal.SIGKILL)

    def stop_all(self) -> None:
        for p in self.procs.values():
            with contextlib.suppress(Exception):
                stop_pid(p)


class HttpConn:
    """Minimal HTTP/1.1 keep-alive JSON client (one request at a time per connection)."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.r: asyncio.StreamReader | None = None
        self.w: asyncio.StreamWriter | None = None

    async def post(self, path: str, body: dict, timeout: float = 5.0) -> dict:
        return await asyncio.wait_for(self._post(path, body), timeout)

    async def _post(self, path: str, body: dict) -> dict:
        if self.w is None:
            self.r, self.w = await asyncio.open_connection(self.host, self.port)
        data = json.dumps(body).encode()
        self.w.write(f"POST {path} HTTP/1.1\r\nHost: {self.host}\r\nContent-Type: application/json\r\n"
                     f"Content-Length: {len(data)}\r\n\r\n".encode() + data)
        try:
            status = await self.r.readline()
            if not status:
                raise ConnectionError("closed")
            length = 0
            chunked = False
            while True:
                line = await self.r.readline()
                if line in (b"\r\n", b""):
                    break
                k, _, v = line.decode().partition(":")
                if k.lower() == "content-length":
                    length = int(v.strip())
                elif k.lower() == "transfer-encoding" and "chunked" in v.lower():
                    chunked = True
            if chunked:
                payload = b""
                while True:
                    size = int((await self.r.readline()).strip(), 16)
                    if size == 0:
                        await self.r.readline()
                        break
                    payload += await self.r.readexactly(size)
                    await self.r.readline()
            else:
                payload = await self.r.readexactly(length)
        except Exception:
            self.close()
            raise
        code = int(status.split()[1])
        if code != 200:
            raise RuntimeError(f"HTTP {code}: {payload[:200]!r}")
        return json.loads(payload or b"{}")

    def close(self) -> None:
        if self.w is not None:
            self.w.close()
        self.r = self.w = None


def b64(s: bytes) -> str:
    return base64.b64encode(s).decode()


async def etcd_put(conn: HttpConn, key: bytes, value: bytes) -> None:
    await conn.post("/v3/kv/put", {"key": b64(key), "value": b64(value)})


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def etcd_put_request(key: bytes, value: bytes) -> bytes:
    """etcdserverpb.PutRequest{key=1, value=2}, encoded by hand (no etcd stubs needed)."""
    return b"\x0a" + _varint(len(key)) + key + b"\x12" + _varint(len(value)) + value


class EtcdKV:
    """etcd's native gRPC KV.Put on grpc.aio: the same client stack and call shape as ours (one
    unary call per write, protobuf bytes, one channel per member), instead of the HTTP/JSON gateway
    whose Python-side parsing capped the etcd figure."""

    def __init__(self, port: int, tls=None) -> None:
        from autoswitch.base.tls import TLSConfig, grpc_channel

        self.channel = grpc_channel(f"{HOST}:{port}", tls or TLSConfig.off())
        self.put = self.channel.unary_unary("/etcdserverpb.KV/Put")   # bytes in, bytes out

    async def close(self) -> None:
        await self.channel.close()


async def etcd_load(ports: list[int], clients: int, seconds: float, max_ops: int, tls=None) -> dict:
    lat: list[float] = []
    errors = 0
    done = 0
    stop_at = time.monotonic() + seconds
    value = b"v" * VALUE_BYTES
    kvs = [EtcdKV(p, tls) for p in ports]

    async def worker(i: int):
        nonlocal errors, done
        # Spread clients over the members (etcd followers forward proposals to the leader; ours
        # follow the leader: this costs etcd one in-cluster hop for 2/3 of the clients).
        kv = kvs[i % len(kvs)]
        req = etcd_put_request(f"bg{i}".encode(), value)
        while time.monotonic() < stop_at and done < max_ops:
            t0 = time.perf_counter()
            try:
                await kv.put(req, timeout=5.0)
                lat.append((time.perf_counter() - t0) * 1000)
                done += 1
            except Exception as e:  # noqa: BLE001
                errors += 1
                if errors < 5:
                    log("controller", f"etcd error {e}")
                await asyncio.sleep(0.01)

    t0 = time.monotonic()
    try:
        await asyncio.gather(*(worker(i) for i in range(clients)))
    finally:
        for kv in kvs:
            await kv.close()
    return {"ops": done, "errors": errors, "elapsed": time.monotonic() - t0, "lat": lat}


async def wait_etcd_ready(ports: list[int], timeout: float = 30.0, tls=None) -> None:
    deadline = time.monotonic() + timeout
    kv = EtcdKV(ports[0], tls)
    try:
        while time.monotonic() < deadline:
            try:
                await kv.put(etcd_put_request(b"ready", b"1"), timeout=2.0)
                return
            except Exception:  # noqa: BLE001
                await asyncio.sleep(0.1)
    finally:
        await kv.close()
    raise TimeoutError("etcd not ready")


# ----------------------------------------------------------------------------- main


def summarize(r: dict) -> dict:
    return {"ops_s": round(r["ops"] / max(r["elapsed"], 1e-9), 1), "p50_ms": round(pct(r["lat"], 50), 2),
            "p99_ms": round(pct(r["lat"], 99), 2), "ops": r["ops"], "errors": r["errors"]}


async def run(args) -> dict:
    from autoswitch.controller.client import ControllerClient

    with tempfile.TemporaryDirectory(prefix="bench-controller-") as tmp:
        root = Path(tmp)
        (root / "ours").mkdir()
        (root / "etcd").mkdir()
        tls_dir, client_tls, toml = None, None, ""
        if args.tls:
            from autoswitch.app.certs import init_dev_ca
            from autoswitch.base.tls import TLSConfig

            tls_dir = root / "tls"
            ids = init_dev_ca(tls_dir, ["controller/n1", "controller/n2", "controller/n3", "bench-host",
                                        "etcd/e1", "etcd/e2", "etcd/e3"])
            client_tls = TLSConfig(ca=ids["bench-host"]["ca"], cert=ids["bench-host"]["cert"],
                                   key=ids["bench-host"]["key"]).validate()
            toml = '[controller]\nauth_identities = { "bench-host" = ["broker", "admin", "reader"] }\n'
        ctl = Controllers(root / "ours", toml=toml, tls_dir=tls_dir)
        etcd = Etcd(root / "etcd", tls_dir=tls_dir)
        try:
            log("controller", "starting 3 controller nodes" + (" (mutual TLS, auth on)" if args.tls else ""))
            ctl.start_all()
            async with ControllerClient(ctl.spec, deadline_s=30, tls=client_tls) as c:
                leader = await leader_of(c, ctl.addrs)
                groups = await setup_groups(c, args.clients)
            log("controller", f"{len(groups)} groups ready; concurrent load {args.seconds}s x {args.clients} clients")
            meter = CpuMeter({nid: ctl.pid_of(nid) for nid in ctl.ids})
            conc = summarize(await ours_load(ctl.spec, groups, args.seconds, args.max_ops, client_tls))
            conc["cpu_us_per_op"] = {"leader": leader, **meter.per_op_us(conc["ops"])}
            log("controller", f"ours concurrent: {conc}")
            seq = summarize(await ours_load(ctl.spec, groups[:1], args.seconds, args.seq_ops, client_tls))
            log("controller", f"ours sequential: {seq}")
            ctl.stop_all()
            metered = None
            if args.metrics:
                (root / "ours-metrics").mkdir()
                ctl = Controllers(root / "ours-metrics", toml=toml, tls_dir=tls_dir, metrics=True)
                log("controller", "again with /metrics on every node, scraped every second")
                ctl.start_all()
                async with ControllerClient(ctl.spec, deadline_s=30, tls=client_tls) as c:
                    await leader_of(c, ctl.addrs)
                    groups = await setup_groups(c, args.clients)
                stop = asyncio.Event()
                from bench.produce import _scrape_loop

                scraper = asyncio.ensure_future(_scrape_loop(list(ctl.metrics_ports.values()), stop, 1.0))
                try:
                    metered = summarize(await ours_load(ctl.spec, groups, args.seconds, args.max_ops, client_tls))
                finally:
                    stop.set()
                metered["scrapes"] = await scraper
                log("controller", f"ours concurrent with metrics: {metered}")
                ctl.stop_all()

            log("controller", "starting 3 etcd members" + (" (mutual TLS)" if args.tls else ""))
            etcd.start_all()
            ports = list(etcd.client_ports.values())
            await wait_etcd_ready(ports, tls=client_tls)
            meter = CpuMeter({n: p.pid for n, p in etcd.procs.items()})
            econc = summarize(await etcd_load(ports, args.clients, args.seconds, args.max_ops, client_tls))
            econc["cpu_us_per_op"] = meter.per_op_us(econc["ops"])
            log("controller", f"etcd concurrent: {econc}")
            eseq = summarize(await etcd_load(ports[:1], 1, args.seconds, args.seq_ops, client_tls))
            log("controller", f"etcd sequential: {eseq}")
        finally:
            ctl.stop_all()
            etcd.stop_all()
    return {
        "commits_s": conc["ops_s"], "p50_ms": conc["p50_ms"], "p99_ms": conc["p99_ms"],
        "etcd_puts_s": econc["ops_s"], "ratio_vs_etcd": round(conc["ops_s"] / max(econc["ops_s"], 1e-9), 3),
        "seq_commit_p50_ms": seq["p50_ms"], "etcd_p50_ms": econc["p50_ms"], "etcd_p99_ms": econc["p99_ms"],
        "etcd_seq_p50_ms": eseq["p50_ms"], "clients": args.clients, "seconds": args.seconds,
        "errors": conc["errors"] + seq["errors"], "etcd_errors": econc["errors"] + eseq["errors"],
        "tls": bool(args.tls), "cpu_us_per_commit": conc["cpu_us_per_op"], "etcd_cpu_us_per_put": econc["cpu_us_per_op"],
        # Both sides are CPU-bound on a small machine: with every core busy on each side, their
        # rates would stand in the inverse ratio of their CPU per operation (clients included).
        "ratio_cap_cpu": round(econc["cpu_us_per_op"]["total"] / max(conc["cpu_us_per_op"]["total"], 1e-9), 3),
        **({"commits_s_metrics": metered["ops_s"], "scrapes": metered["scrapes"],
            "ratio_metrics_on_vs_off": round(metered["ops_s"] / max(conc["ops_s"], 1e-9), 3),
            "target_ratio_metrics_on_vs_off": 0.95} if metered else {}),
    }


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--clients", type=int, default=64)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--max-ops", type=int, default=200_000)
    ap.add_argument("--seq-ops", type=int, default=300)
    ap.add_argument("--tls", action="store_true", help="both sides on mutual TLS; ours with authorization")
    ap.add_argument("--metrics", action="store_true", help="ours again with /metrics scraped every second (METRICS=1)")
    args = ap.parse_args()
    out = asyncio.run(run(args))
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
