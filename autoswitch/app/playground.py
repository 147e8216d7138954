"""`autoswitch playground`: a whole controller-mode cluster on 127.0.0.1 (app/playground_cluster.py),
its live status, and the failover demo (app/demo_traffic.py has the producer and the measurement).

Every child is a `python -m autoswitch ...` process in its own session with its own log file,
tracked and ended by PID only (SIGTERM, then SIGKILL after a bounded wait).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

from autoswitch.app.demo_traffic import (
    DemoProducer,
    kill_master_and_measure,
    load_ack_log,
    lost_acked,
    wait_full_sync_state_set,
)
from autoswitch.app.playground_cluster import (
    BACKENDS,
    PROFILES,
    Cluster,
    Layout,
    NotReady,
    PlaygroundError,
)
from autoswitch.base.errors import ConfigError
from autoswitch.base.log import get_logger
from autoswitch.base.output import fail
from autoswitch.base.waits import wait_event

_log = get_logger("playground")


# ---------------- CLI ----------------

def register(sub: Any, admin_sub: Any) -> None:
    p = sub.add_parser("playground", help="a local controller-mode cluster on 127.0.0.1 (Ctrl-C stops it)")
    p.add_argument("--data-dir", default="./run-data/playground",
                   help="all data and logs; a previous run's are reused unless --fresh")
    keep = p.add_mutually_exclusive_group()
    keep.add_argument("--fresh", action="store_true",
                      help="start from empty data: the last run's data is deleted once this start is ready "
                           "(put back if it fails)")
    keep.add_argument("--keep-data", action="store_true", help="reuse the last run's data (the default)")
    p.add_argument("--base-port", type=int, default=19876)
    p.add_argument("--groups", type=int, default=2)
    p.add_argument("--replicas", type=int, default=3)
    p.add_argument("--backend", choices=BACKENDS, default="raft",
                   help="what replicates the controllers' log: raft; sql (a PostgreSQL started for you on "
                        "base-port+9); sqlite (a file in the data directory); etcd, zookeeper (a server started for you)")
    p.add_argument("--profile", choices=sorted(PROFILES), default="fast",
                   help="timings: fast = 1 s heartbeat timeout (loopback), default = RocketMQ-like 10 s")
    p.add_argument("--broker-arg", action="append", default=[], help="extra flag for every broker (repeatable)")
    p.add_argument("--insecure", action="store_true",
                   help="plaintext, no authorization (by default every process runs mutual TLS with roles)")
    p.add_argument("--ready-timeout-s", type=float, default=60.0)
    p.add_argument("--refresh-s", type=float, default=1.0)
    p.add_argument("--demo", choices=["failover"], help="run a scripted scenario, then stop and exit")
    p.add_argument("--demo-before-s", type=float, default=2.0, help="produce this long before the kill")
    p.add_argument("--demo-after-s", type=float, default=2.0, help="produce this long after the first new ack")
    p.set_defaults(func=_cmd_playground)


def command_name() -> str:
    """How the user can run this same CLI again, for the commands we suggest: ``autoswitch`` when
    that is what their PATH finds, else the path they ran (``.venv/bin/autoswitch`` after
    ``make run``, whose venv is not activated)."""
    import shutil

    argv0 = sys.argv[0] if sys.argv and sys.argv[0] else ""
    if argv0.endswith("__main__.py"):               # python -m autoswitch
        exe = os.path.relpath(sys.executable) if not os.path.isabs(sys.executable) else sys.executable
        return f"{exe} -m autoswitch"
    on_path = shutil.which("autoswitch")
    if argv0 and on_path and os.path.realpath(on_path) == os.path.realpath(argv0):
        return "autoswitch"
    if not argv0:
        return "autoswitch"
    rel = os.path.relpath(argv0)
    return rel if not rel.startswith("..") and "/" in rel else os.path.abspath(argv0)


def _out(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def _cmd_playground(args: argparse.Namespace) -> int:
    layout = Layout(Path(args.data_dir).resolve(), args.base_port, args.groups, args.replicas,
                    profile=args.profile, broker_extra=[a for x in args.broker_arg for a in x.split()],
                    secure=not args.insecure, backend=args.backend)
    try:
        from autoswitch.controller.store.base import require_backend

        require_backend({"sqlite": "sql"}.get(args.backend, args.backend))   # said before anything starts
        cluster = Cluster(layout)
    except (PlaygroundError, ConfigError) as e:
        return fail(args, e, rc=2)
    # before the directory is touched: a clash must not cost the last run's data
    busy = cluster.busy_ports()
    if busy:
        _out(f"error: NOT_READY: ports already in use: {busy} (another playground? use --base-port)")
        return 1
    try:
        cluster.prepare_dir(args.fresh)
    except PlaygroundError as e:
        return fail(args, e, rc=2)
    logf = None
    if sys.stdout.isatty():
        # Our own JSON log lines would scroll the in-place table away: on a terminal they go to a file.
        import logging

        logf = open(cluster.log_dir / "playground.log", "a", encoding="utf-8")  # noqa: SIM115
        for h in logging.getLogger().handlers:
            if isinstance(h, logging.StreamHandler) and not isinstance(h, logging.FileHandler):
                h.setStream(logf)
    try:
        return asyncio.run(_main(cluster, args))
    finally:
        stopped = cluster.stop_all()
        bad = [s for s in stopped if s["forced"]]
        _out(f"stopped {len(stopped)} processes" + (f" ({len(bad)} needed SIGKILL)" if bad else ""))
        if cluster.previous is not None:
            cluster.start_failed()
            _out(f"the start did not finish: the last run's data is back in {cluster.layout.data_dir} "
                 f"(this start's logs: {cluster.layout.data_dir / 'failed-start'})")
        cluster.release_dir()
        if logf is not None:
            logf.close()


async def _main(cluster: Cluster, args: argparse.Namespace) -> int:
    from autoswitch.controller.client import ControllerClient

    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    lay = cluster.layout
    client = ControllerClient(lay.controller_addrs(), deadline_s=2.0, max_attempts=4, rpc_timeout_s=1.0,
                              tls=cluster.tls)
    try:
        try:
            t0 = time.monotonic()
            cluster.start_controllers()
            await _until(stop, cluster.wait_ports(list(cluster.children.values()), args.ready_timeout_s))
            leader = await _until(stop, cluster.wait_leader(client, args.ready_timeout_s))
            cluster.start_brokers()
            cluster.write_manifest()
            _print_addresses(cluster, leader)
            remaining = max(5.0, args.ready_timeout_s - (time.monotonic() - t0))
            await _until(stop, cluster.wait_masters(client, remaining))
            _out(f"ready in {time.monotonic() - t0:.1f}s")
            cluster.start_succeeded()
        except NotReady as e:
            _out(f"error: {e.code}: {e.message}")
            _out("logs:")
            for c in cluster.children.values():
                _out(f"  {c.name}: {c.log_path}")
            return 1
        except _Stopped:
            return 0
        if args.demo == "failover":
            return await _until_or(stop, demo_failover(cluster, client, args), 130)
        await _status_loop(cluster, client, stop, args.refresh_s)
        return 0
    finally:
        await client.close()


class _Stopped(Exception):
    pass


async def _until(stop: asyncio.Event, coro: Any) -> Any:
    """Run coro unless SIGINT/SIGTERM arrives first (then _Stopped)."""
    task = asyncio.ensure_future(coro)
    waiter = asyncio.ensure_future(stop.wait())
    done, _ = await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
    if task in done:
        waiter.cancel()
        return task.result()
    task.cancel()
    with contextlib.suppress(BaseException):
        await task
    raise _Stopped()


async def _until_or(stop: asyncio.Event, coro: Any, rc_on_stop: int) -> Any:
    try:
        return await _until(stop, coro)
    except _Stopped:
        _out("interrupted")
        return rc_on_stop


def _print_addresses(cluster: Cluster, leader: str) -> None:
    lay = cluster.layout
    _out(f"data dir    {lay.data_dir}  (profile {lay.profile})")
    _out(f"name server {lay.namesrv}  (embeds controller n1)")
    _out(f"controllers {','.join(lay.controller_addrs())}  (leader {leader})")
    _out(f"status page http://{lay.metrics_addrs()[0]}/status  (live; also /metrics, /healthz, /readyz on "
         f"{', '.join(lay.metrics_addrs())})")
    for g, addrs in lay.broker_layout().items():
        _out(f"group {g}    {' '.join(addrs)}  (HA ports +1)")
    for c in cluster.children.values():
        _out(f"pid {c.pid} {c.name} log={c.log_path}")
    if lay.secure:
        _out(f"security    mutual TLS + roles on every process; certificates in {cluster.tls_dir}")
        _out(f"            point the CLI at them: export AUTOSWITCH_PROFILE={cluster.profile_path}")
    else:
        _out("security    OFF (--insecure): plaintext, no authorization")
    me = command_name()
    _out(f"try: {me} admin get-sync-state-set --controller {','.join(lay.controller_addrs())} --json")
    _out(f"     {me} produce --namesrv {lay.namesrv} --group g0 --topic demo --count 10")


async def _status_loop(cluster: Cluster, client: Any, stop: asyncio.Event, refresh_s: float) -> None:
    from autoswitch.app.status import gather, render_lines, render_table

    tty = sys.stdout.isatty()
    refresh_s = min(max(refresh_s, 0.2), 60.0)
    warned: set[str] = set()
    while not stop.is_set():
        snap = await gather(client, cluster.layout.broker_layout(), cluster.tls)
        for c in cluster.failed_children():
            if c.name not in warned:
                warned.add(c.name)
                _out(f"warning: {c.name} (pid {c.pid}) exited with {c.exit_code}; log {c.log_path}")
        if tty:
            lay = cluster.layout
            # The address block printed at startup is cleared by the redraw: repeat the essentials.
            header = (time.strftime("%H:%M:%S") + "  autoswitch playground  (Ctrl-C stops everything)\n"
                      f"name server {lay.namesrv}  controllers {','.join(lay.controller_addrs())}\n"
                      f"data and logs {lay.data_dir}  (pids in playground.json)\n")
            # Home + clear-below: redraw in place without scrolling.
            sys.stdout.write("\x1b[H\x1b[J" + "\n".join(render_table(snap, header)) + "\n")
            sys.stdout.flush()
        else:
            for line in render_lines(snap):
                _out(line)
        await wait_event(stop, refresh_s)


# ---------------- the failover demo ----------------

async def demo_failover(cluster: Cluster, client: Any, args: argparse.Namespace) -> int:
    lay = cluster.layout
    group, topic = "g0", "demo"
    ack_path = lay.data_dir / "demo-acks.jsonl"
    producer = DemoProducer(lay.namesrv, group, topic, ack_path, tls=cluster.tls)
    stop_prod = asyncio.Event()
    wall0 = time.time()
    mono0 = time.monotonic()

    def ts(t: float) -> str:
        return time.strftime("%H:%M:%S", time.gmtime(wall0 + t - mono0)) + f".{int(((wall0 + t - mono0) % 1) * 1000):03d}"

    prod_task = asyncio.ensure_future(producer.run(stop_prod, max_messages=100_000, max_s=120.0))
    try:
        await asyncio.sleep(args.demo_before_s)
        sss = await wait_full_sync_state_set(client, group, lay.replicas, 30.0)
        if len(sss) < lay.replicas:
            _out(f"demo: error: the SyncStateSet of {group} is {sss}, not all {lay.replicas} replicas, after 30 s")
            return 1
        # After a cold start the controllers grant no master lease for a hold period (3 heartbeat
        # timeouts: a restarted controller may have forgotten a DEAD report it made), so the master
        # answers FENCED until then; wait for the first ack, bounded.
        lease_deadline = time.monotonic() + 30.0
        while not producer.acks and time.monotonic() < lease_deadline:
            await asyncio.sleep(0.05)
        before = len(producer.acks)
        _out(f"demo: SyncStateSet of {group} is {{{','.join(map(str, sss))}}}")
        _out(f"demo: producing to {group}/{topic} via name server; {before} acked before the kill")
        if before == 0:
            _out(f"demo: error: nothing acked before the kill (last error {producer.last_error})")
            return 1
        res, victim = await kill_master_and_measure(cluster, client, producer, group, timeout_s=30.0)
        _out(f"{ts(res.kill_t)}  +0.000s  kill -9 {victim.name} (pid {victim.pid}), brokerId {res.old_master}, "
             f"MasterEpoch {res.old_epoch}")
        if res.elected_t is not None:
            _out(f"{ts(res.elected_t)}  +{res.elected_t - res.kill_t:.3f}s  controller elected brokerId "
                 f"{res.new_master} ({res.new_master_addr}), MasterEpoch {res.new_epoch}")
        else:
            _out("demo: error: no new master elected within 30s")
        if res.first_ack is not None:
            a = res.first_ack
            _out(f"{ts(a.t)}  +{a.t - res.kill_t:.3f}s  first acked write after the kill: brokerId {a.broker_id} "
                 f"epoch {a.epoch} ({a.addr}); producer retries {producer.failures}")
        else:
            _out(f"demo: error: no acked write within 30s of the kill (last error {producer.last_error})")
        await asyncio.sleep(args.demo_after_s)
    finally:
        stop_prod.set()
        with contextlib.suppress(BaseException):
            await asyncio.wait_for(prod_task, 5.0)
        await producer.close()
    acked = load_ack_log(ack_path)
    ids = {a["msg_id"] for a in acked}
    final = await client.get_replica_info(group)
    if not final.master_address:
        _out(f"demo: {group} has no master (MasterEpoch {final.master_epoch}): its {len(ids)} acked messages "
             "cannot be read; counted as missing")
    missing = await lost_acked(final.master_address, topic, ids, tls=cluster.tls) if final.master_address else ids
    _out(f"demo: acked {len(ids)} messages (ack log {ack_path}); final master brokerId {final.master_broker_id} "
         f"epoch {final.master_epoch} serves {len(ids) - len(missing)} of them; lost {len(missing)}")
    ok = res.first_ack is not None and res.elected_t is not None and not missing
    if missing:
        _out("demo: LOST acked msg_ids: " + " ".join(sorted(missing)[:20]))
    _out("demo: " + ("PASS" if ok else "FAIL"))
    # The independent check, from what stays on disk after the playground stops (Spark: the
    # pipeline extra, `pip install -e '.[pipeline]'` or `make test`'s setup).
    dirs = " ".join(f"--broker-data {lay.data_dir / f'g0-r{r}'}" for r in range(lay.replicas))
    import importlib.util

    if importlib.util.find_spec("pyspark") is None:
        # `make run` builds the runtime alone: say the install step before the command that needs it
        _out("demo: the audit runs on PySpark, the pipeline extra, which this install lacks: install it first "
             "(in a checkout: `make setup`, or `.venv/bin/pip install -e '.[pipeline]'`; from a wheel: "
             "pip install the wheel with `[pipeline]` after its name)")
    _out(f"demo: audit it: {command_name()} pipeline audit --acks {ack_path} {dirs} "
         f"--events {lay.data_dir / 'controller-n1' / 'events.jsonl'} --out {lay.data_dir / 'audit'}")
    return 0 if ok else 1
