"""Broker commands: `broker`, `produce`, `consume`, `admin get-broker-epoch|switch-role|broker-status|log-digest`.

Registration is cheap; gRPC and the store are imported inside the handlers.
Exit codes: 0 ok, 1 a typed broker/transport error (printed as JSON on stderr), 2 bad usage/config.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from autoswitch.broker.cli import broker_config as cli_broker_config
from autoswitch.broker.cli import clients as cli_clients
from autoswitch.broker.cli import consumer_admin as cli_consumer_admin
from autoswitch.broker.cli import dump_log as cli_dump_log
from autoswitch.broker.cli import messages as cli_messages
from autoswitch.broker.cli import topics as cli_topics
from autoswitch.broker.cli.common import bad_target, err
from autoswitch.broker.cli.consume import cmd_consume, cmd_consumer_progress
from autoswitch.broker.cli.handover import cmd_transfer_master

from autoswitch.base.addr import namesrv_list
from autoswitch.base.errors import AutoswitchError, ConfigError, FormatTooNew
from autoswitch.base.output import emit, fail, fail_code
from autoswitch.base.tls import add_server_security_args, add_tls_args, tls_from_args

# `produce --producers`: concurrent senders of one CLI run (RocketMQ's benchmark producer's -w).
MAX_CLI_PRODUCERS = 256


def register(sub: Any, admin_sub: Any) -> None:
    p = sub.add_parser("broker", help="run one broker replica (static role or fenced)")
    p.add_argument("--config", help="TOML file; CLI flags override its keys")
    p.add_argument("--role", choices=["master", "slave", "fenced"])
    p.add_argument("--group", help="broker group name (brokerName)")
    p.add_argument("--cluster")
    p.add_argument("--broker-id", type=int)
    p.add_argument("--epoch", type=int, help="MasterEpoch for the static role (default: local last + 1 for master)")
    p.add_argument("--listen", help="gRPC HOST:PORT")
    p.add_argument("--ha-listen", help="HA HOST:PORT (master side)")
    p.add_argument("--data-dir")
    p.add_argument("--master-ha", help="slave: the master's HA HOST:PORT")
    p.add_argument("--master-addr", help="slave: the master's gRPC HOST:PORT (for NOT_MASTER redirects)")
    p.add_argument("--ack-mode", choices=["master", "all", "quorum"])
    p.add_argument("--min-in-sync-replicas", type=int)
    p.add_argument("--min-in-sync-zones", type=int,
                   help="zones the replicas holding an ack must span (controller mode; 0 = off)")
    p.add_argument("--in-sync-replicas", type=int, help="quorum mode: replicas (incl. master) per write")
    p.add_argument("--ack-timeout", type=float, dest="ack_timeout_s", help="seconds to wait for replica acks")
    p.add_argument("--flush", choices=["sync", "async"])
    p.add_argument("--flush-interval-ms", type=int)
    p.add_argument("--max-message-bytes", type=int)
    p.add_argument("--no-auto-create-topics", dest="auto_create_topics", action="store_const", const=False,
                   default=None, help="only topics made by `admin topic-create` (or already in the log) take writes")
    p.add_argument("--max-batch-messages", type=int)
    p.add_argument("--max-request-bytes", type=int)
    p.add_argument("--event-loop", choices=["uvloop", "asyncio"], help="the event loop to run on (uvloop)")
    c = p.add_argument_group("controller mode (the controller decides brokerId and role; --role is refused)")
    c.add_argument("--controllers", help="every controller node, HOST:PORT,HOST:PORT,...")
    c.add_argument("--namesrv", type=namesrv_list, help="name server(s) HOST:PORT[,HOST:PORT...]: register this broker's route periodically")
    c.add_argument("--heartbeat-timeout-ms", type=int,
                   help="the controllers' broker heartbeat timeout this broker's lease is sized for (10000)")
    c.add_argument("--heartbeat-interval-ms", type=int, help="heartbeat period (default min(1000, lease/3))")
    lease = c.add_mutually_exclusive_group()
    lease.add_argument("--master-lease-ms", type=int, help="master self-fencing lease (default 60%% of the timeout)")
    lease.add_argument("--no-master-lease", dest="lease_enabled", action="store_const", const=False,
                       help="disable the self-fencing lease (RocketMQ behaviour; split brain can lose acked writes)")
    c.add_argument("--election-priority", type=int, help="lower wins among equally caught-up replicas (0)")
    c.add_argument("--zone", help="the failure domain (availability zone, rack) this broker runs in (none)")
    c.add_argument("--role-change-script", help="run as SCRIPT <role> <group> <epoch> <old-master> <new-master>")
    c.add_argument("--no-handover-on-shutdown", dest="handover_on_shutdown", action="store_const", const=False,
                   help="on SIGTERM a master just stops (a failover) instead of handing over first")
    c.add_argument("--handover-timeout-ms", type=int, help="longest a handover may hold new writes (5000)")
    c.add_argument("--master-switch-hold-ms", type=int,
                   help="longest a produce redirected to this broker as the new master waits for its switch (500)")
    c.add_argument("--metrics-listen", help="HOST:PORT for /metrics, /healthz, /readyz (default off)")
    c.add_argument("--metrics-allow-remote", action="store_const", const=True, default=None,
                   help="let --metrics-listen be a non-loopback address (a container's published port)")
    c.add_argument("--fetch-listen", help="HOST:PORT of the fetch port: consumers read record runs over "
                                          "TCP/TLS instead of gRPC (default off)")
    add_tls_args(p)
    add_server_security_args(p, "check roles on every call and bind HA peers to their certificates (needs TLS)")
    p.set_defaults(func=_cmd_broker, lease_enabled=None, handover_on_shutdown=None)

    p = sub.add_parser("produce", help="send messages; prints one JSON line per acked message with --json")
    p.add_argument("--broker", help="HOST:PORT (direct, no failover); or --namesrv + --group")
    p.add_argument("--namesrv", type=namesrv_list, help="name server(s) HOST:PORT[,HOST:PORT...]: route to the group's master, follow failovers")
    p.add_argument("--group", help="broker group (with --namesrv)")
    p.add_argument("--duration-s", type=float, default=0.0, help="with --namesrv: stop after this long (0 = no limit)")
    p.add_argument("--interval-ms", type=float, default=0.0, help="pause between batches")
    p.add_argument("--retry-deadline-s", type=float, default=30.0,
                   help="with --namesrv: give up on a batch not acknowledged within this long")
    p.add_argument("--topic", required=True)
    p.add_argument("--count", type=int, default=1)
    p.add_argument("--size", type=int, default=128, help="body bytes per message")
    p.add_argument("--batch", type=int, default=1, help="messages per Produce request")
    p.add_argument("--producers", type=int, default=1,
                   help="with --namesrv: concurrent senders sharing one routed client (their sends share requests)")
    p.add_argument("--body", help="use this text as every body (else random printable bytes of --size)")
    p.add_argument("--timeout", type=float, default=10.0, help="per-request deadline, seconds")
    p.add_argument("--retries", type=int, default=5, help="bounded retries on UNAVAILABLE")
    p.add_argument("--ack-log", help="append the producer ack log (JSON lines) to this file")
    p.add_argument("--via", choices=["grpc", "port"], default="grpc",
                   help="with --namesrv: send over gRPC, or over the master's fetch port (PRODUCE frames: "
                        "less CPU per request, docs/fetch-protocol.md)")
    p.add_argument("--json", action="store_true")
    add_tls_args(p)
    p.set_defaults(func=_cmd_produce)

    p = sub.add_parser("consume", help="read messages below confirmOffset; one JSON line per message with --json")
    p.add_argument("--broker", help="HOST:PORT; or --namesrv + --group")
    p.add_argument("--namesrv", type=namesrv_list, help="name server(s) HOST:PORT[,HOST:PORT...]: read from the group's master")
    p.add_argument("--group", help="broker group (with --namesrv)")
    p.add_argument("--topic", required=True)
    p.add_argument("--from", dest="from_offset", type=int, default=0, help="queue offset")
    p.add_argument("--count", type=int, default=100, help="stop after this many messages")
    p.add_argument("--batch", type=int, default=256, help="max messages per Consume request")
    p.add_argument("--fetch", default=None, metavar="HOST:PORT|auto",
                   help="read over this broker's fetch port (its fetch_listen) instead of the gRPC Consume, or "
                        "with --namesrv 'auto': the master's, from its route (re-routed on failover); "
                        "offsets are still fetched and committed over gRPC")
    p.add_argument("--timeout", type=float, default=10.0)
    p.add_argument("-g", "--consumer-group", default=None,
                   help="resume from this consumer group's committed offset and commit after each batch "
                        "(at-least-once: a crash between processing and commit replays that batch)")
    p.add_argument("--commit-log", default=None,
                   help="with --consumer-group: append every acknowledged commit (JSON lines) for `pipeline audit --commits`")
    p.add_argument("--json", action="store_true")
    add_tls_args(p)
    p.set_defaults(func=cmd_consume)

    a = admin_sub.add_parser("get-broker-epoch", help="EpochFile entries, maxOffset, confirmOffset, role")
    a.add_argument("--broker", required=True)
    a.add_argument("--json", action="store_true")
    add_tls_args(a)
    a.set_defaults(func=_cmd_get_broker_epoch)

    a = admin_sub.add_parser("switch-role", help="make a broker master or slave with a higher MasterEpoch")
    a.add_argument("--broker", required=True)
    a.add_argument("--role", required=True, choices=["master", "slave"])
    a.add_argument("--epoch", required=True, type=int)
    a.add_argument("--master-ha", default="", help="slave: the master's HA HOST:PORT")
    a.add_argument("--master-addr", default="", help="slave: the master's gRPC HOST:PORT")
    a.add_argument("--sync-state-set", default="", help="master: comma-separated brokerIds (default {self})")
    a.add_argument("--sync-state-set-epoch", type=int, default=0)
    a.add_argument("--json", action="store_true")
    add_tls_args(a)
    a.set_defaults(func=_cmd_switch_role)

    a = admin_sub.add_parser("broker-status", help="role, offsets, slaves, counters of one broker")
    a.add_argument("--broker", required=True)
    a.add_argument("--json", action="store_true")
    add_tls_args(a)
    a.set_defaults(func=_cmd_broker_status)

    a = admin_sub.add_parser("consumer-progress", help="a consumer group's committed offset, log end and lag per topic")
    a.add_argument("-g", "--consumer-group", required=True)
    a.add_argument("--broker", help="the master's HOST:PORT; or --namesrv + --group")
    a.add_argument("--namesrv", type=namesrv_list, help="name server(s) HOST:PORT[,HOST:PORT...]: ask the group's master")
    a.add_argument("--group", help="broker group (with --namesrv)")
    a.add_argument("--timeout", type=float, default=10.0)
    a.add_argument("--json", action="store_true")
    add_tls_args(a)
    a.set_defaults(func=cmd_consumer_progress)

    a = admin_sub.add_parser("transfer-master", help="graceful handover: the master steps down to an in-sync slave")
    a.add_argument("--broker", help="the master's HOST:PORT; or --namesrv + --group")
    a.add_argument("--namesrv", type=namesrv_list, help="name server(s) HOST:PORT[,HOST:PORT...]: find the group's master")
    a.add_argument("--group", help="broker group (with --namesrv)")
    a.add_argument("--to", type=int, default=None, help="target brokerId (default: the most caught-up in-sync slave)")
    a.add_argument("--timeout", type=float, default=5.0, help="seconds the master may hold writes before giving up")
    a.add_argument("--json", action="store_true")
    add_tls_args(a)
    a.set_defaults(func=cmd_transfer_master)

    cli_topics.register(admin_sub)
    cli_consumer_admin.register(admin_sub)
    cli_clients.register(admin_sub)
    cli_messages.register(admin_sub)
    cli_broker_config.register(admin_sub)
    cli_dump_log.register(sub)

    a = admin_sub.add_parser("log-digest", help="sha256 of a broker's raw commit log in [from, to)")
    a.add_argument("--broker", required=True)
    a.add_argument("--from", dest="from_offset", type=int, default=0)
    a.add_argument("--to", dest="to_offset", type=int, default=-1, help="-1 = maxOffset")
    a.add_argument("--json", action="store_true")
    add_tls_args(a)
    a.set_defaults(func=_cmd_log_digest)


def _cmd_broker(args: argparse.Namespace) -> int:
    from autoswitch.broker.config import load_config

    keys = (
        "role", "group", "cluster", "broker_id", "epoch", "listen", "ha_listen", "data_dir", "master_ha",
        "master_addr", "ack_mode", "min_in_sync_replicas", "min_in_sync_zones", "in_sync_replicas", "ack_timeout_s", "flush",
        "flush_interval_ms", "max_message_bytes", "max_batch_messages", "max_request_bytes",
        "controllers", "namesrv", "heartbeat_timeout_ms", "heartbeat_interval_ms", "master_lease_ms",
        "lease_enabled", "election_priority", "zone", "role_change_script", "auth", "auth_tokens_file", "allow_insecure",
        "tls_accept_plaintext", "tls_dial_plaintext", "handover_on_shutdown", "handover_timeout_ms", "master_switch_hold_ms", "metrics_listen",
        "fetch_listen", "metrics_allow_remote", "auto_create_topics", "event_loop",
    )
    if args.controllers and (args.role or args.broker_id is not None or args.epoch is not None):
        return fail_code(args, "BAD_USAGE", "--role/--broker-id/--epoch are static-role mode; with --controllers "
                         "the controller decides brokerId and role", rc=2)
    try:
        tls = tls_from_args(args, server=True)
        overrides = {k: getattr(args, k) for k in keys}
        overrides.update(tls_ca=tls.ca or None, tls_cert=tls.cert or None, tls_key=tls.key or None)
        cfg = load_config(args.config, overrides)
    except AutoswitchError as e:
        err(args, e)
        return 2
    from autoswitch.broker.process import serve

    from autoswitch.base import event_loop
    from autoswitch.base.log import get_logger

    log = get_logger("broker", group=cfg.group, brokerId=cfg.known_broker_id)
    try:
        return event_loop.run(serve(cfg), cfg.event_loop, group=cfg.group, brokerId=cfg.known_broker_id)
    except AutoswitchError as e:
        # e.g. a corrupt store or EpochFile: refuse to start, say why (never start empty).
        log.error("broker_failed", **e.to_dict())
        rc = err(args, e)
        # a config to fix or a release to run, not a broken store
        return 2 if isinstance(e, ConfigError | FormatTooNew) else rc
    except OSError as e:  # e.g. the HA port is taken
        log.error("broker_failed", code="OS_ERROR", message=str(e))
        return fail_code(args, "OS_ERROR", str(e))


def _cmd_produce(args: argparse.Namespace) -> int:
    import asyncio
    import os

    from autoswitch.broker.client.client import ProducerClient

    from autoswitch.proto import broker_pb2 as pb

    if args.count < 0 or args.size < 0 or not (1 <= args.batch <= 10_000) or not (0 <= args.retries <= 20):
        return fail_code(args, "BAD_USAGE", "bad --count/--size/--batch/--retries", rc=2)
    if bad_target(args):
        return 2
    if args.namesrv:
        return _produce_routed(args)
    if args.producers != 1:
        return fail_code(args, "BAD_USAGE", "--producers needs --namesrv and --group (a routed producer)", rc=2)
    if args.via == "port":
        return fail_code(args, "BAD_USAGE", "--via port needs --namesrv and --group (it finds the master's port "
                                            "in its route)", rc=2)

    async def run() -> int:
        client = ProducerClient(args.broker, ack_log=args.ack_log, timeout_s=args.timeout, max_retries=args.retries,
                                tls=args.tls)
        acked = failed = 0
        last_status: int = pb.OK
        error: AutoswitchError | None = None
        t0 = time.monotonic()
        try:
            sent = 0
            while sent < args.count:
                n = min(args.batch, args.count - sent)
                if args.body is not None:
                    bodies = [args.body.encode()] * n
                else:
                    bodies = [os.urandom(args.size // 2 + 1).hex()[: args.size].encode() for _ in range(n)]
                try:
                    out = await client.produce(args.topic, bodies)
                except AutoswitchError as e:
                    error = e           # the envelope below says it, with the counts so far
                    failed += args.count - sent
                    break
                sent += n
                for r in out.results:
                    if r.status == pb.OK:
                        acked += 1
                        if args.json:
                            print(json.dumps({
                                "msg_id": r.msg_id, "group": out.group, "broker_id": out.broker_id,
                                "topic": args.topic, "queue_offset": r.queue_offset,
                                "phy_offset": r.phy_offset, "epoch": r.epoch, "status": "OK",
                            }, separators=(",", ":")))
                    else:
                        failed += 1
                if not out.ok:
                    last_status = out.status
                    # a failed batch is said at once (stderr), the run goes on; the envelope sums up
                    print(json.dumps({"warning": {"code": pb.Status.Name(out.status), "message": out.error_message,
                                                  "master_addr": out.master_addr or None}}), file=sys.stderr)
        finally:
            await client.close()
        summary: dict[str, Any] = {"acked": acked, "failed": failed, "elapsed_s": round(time.monotonic() - t0, 3)}
        if error is not None:
            return fail(args, {**error.to_dict(), **summary})
        if failed == 0 and last_status == pb.OK:
            emit(args, summary)
            return 0
        return fail_code(args, pb.Status.Name(last_status), f"{failed} of {args.count} messages not acked", **summary)

    return asyncio.run(run())


def _produce_routed(args: argparse.Namespace) -> int:
    """Routed produce: follow the group's master through failovers (broker/client/route.py)."""
    import asyncio
    import os
    import signal
    import uuid

    from autoswitch.broker.client.route import RetriesExhausted, RetryPolicy, RoutedProducer

    if not (0 < args.retry_deadline_s <= 3600) or args.duration_s < 0 or args.interval_ms < 0:
        return fail_code(args, "BAD_USAGE", "bad --retry-deadline-s/--duration-s/--interval-ms", rc=2)
    if not 1 <= args.producers <= MAX_CLI_PRODUCERS:
        return fail_code(args, "BAD_USAGE", f"--producers must be in [1, {MAX_CLI_PRODUCERS}]", rc=2)

    async def run() -> int:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        policy = RetryPolicy(retry_deadline_s=args.retry_deadline_s, rpc_timeout_s=args.timeout)
        make = RoutedProducer
        if args.via == "port":
            from autoswitch.broker.client.routed_fetch import RoutedPortProducer as make
        client = make(args.namesrv, args.group, ack_log=args.ack_log, policy=policy, tls=args.tls)
        acked = failed = 0
        last_error: AutoswitchError | None = None
        t0 = time.monotonic()
        # msg_ids: a per-run prefix + a sequence number, so the ack log tells the send order.
        run_id = uuid.uuid4().hex[:8]
        seq = 0

        async def sender() -> None:
            """One of --producers: takes the next batch of the run until the count, the duration or
            a refusal ends it (then every sender stops)."""
            nonlocal acked, failed, last_error, seq
            # seq counts the messages taken (sent or in flight): the senders together take --count
            while seq < args.count and not stop.is_set() and last_error is None:
                if args.duration_s and time.monotonic() - t0 >= args.duration_s:
                    break
                n = min(args.batch, args.count - seq)
                ids = [f"{run_id}-{seq + i:09d}" for i in range(n)]
                seq += n
                if args.body is not None:
                    bodies = [args.body.encode()] * n
                else:
                    bodies = [os.urandom(args.size // 2 + 1).hex()[: args.size].encode() for _ in range(n)]
                try:
                    results = await client.produce(args.topic, bodies, ids)
                except (RetriesExhausted, AutoswitchError) as e:    # e.g. NO_FETCH_PORT, a denied port
                    last_error = e
                    failed += n
                    break
                acked += len(results)
                if args.json:
                    for r in results:
                        print(json.dumps({"msg_id": r.msg_id, "group": args.group, "topic": args.topic,
                                          "queue_offset": r.queue_offset, "phy_offset": r.phy_offset,
                                          "epoch": r.epoch, "status": "OK"}, separators=(",", ":")))
                if args.interval_ms:
                    await asyncio.sleep(args.interval_ms / 1000.0)

        try:
            await asyncio.gather(*(sender() for _ in range(args.producers)))
        finally:
            await client.close()
        summary: dict[str, Any] = {"acked": acked, "failed": failed, "elapsed_s": round(time.monotonic() - t0, 3),
                   "retries": client.stats.retries, "route_refreshes": client.stats.route_refreshes,
                   "statuses": client.stats.statuses}
        if last_error is None:
            emit(args, summary)
            return 0
        return fail(args, {**last_error.to_dict(), **summary})

    return asyncio.run(run())


def _admin(args: argparse.Namespace, method: str, *a: Any, **kw: Any) -> Any:
    import asyncio

    from autoswitch.broker.client.client import AdminClient

    async def run() -> Any:
        c = AdminClient(args.broker, max_retries=2, tls=tls_from_args(args))
        try:
            return await getattr(c, method)(*a, **kw)
        finally:
            await c.close()

    return asyncio.run(run())


def epoch_reply_to_dict(r: Any) -> dict:
    return {
        "group": r.group,
        "broker_id": r.broker_id,
        "role": r.role,
        "master_epoch": r.master_epoch,
        "epochs": [{"epoch": e.epoch, "start_offset": e.start_offset, "end_offset": e.end_offset} for e in r.epochs],
        "min_offset": r.min_offset,
        "max_offset": r.max_offset,
        "confirm_offset": r.confirm_offset,
        "sync_state_set": list(r.sync_state_set),
        "sync_state_set_epoch": r.sync_state_set_epoch,
    }


def _cmd_get_broker_epoch(args: argparse.Namespace) -> int:
    try:
        r = _admin(args, "get_broker_epoch")
    except AutoswitchError as e:
        return err(args, e)
    emit(args, epoch_reply_to_dict(r))
    return 0


def _cmd_switch_role(args: argparse.Namespace) -> int:
    from autoswitch.proto import broker_pb2 as pb

    try:
        sss = [int(x) for x in args.sync_state_set.split(",") if x.strip()]
    except ValueError:
        return fail_code(args, "BAD_USAGE", "--sync-state-set: comma-separated ints", rc=2)
    try:
        r = _admin(args, "switch_role", args.role, args.epoch, args.master_ha, args.master_addr, sss,
                   args.sync_state_set_epoch)
    except AutoswitchError as e:
        return err(args, e)
    out = {"status": pb.Status.Name(r.status), "role": r.role, "master_epoch": r.master_epoch}
    if r.error_message:
        out["error_message"] = r.error_message
    if r.status != pb.OK:
        return fail_code(args, out.pop("status"), out.pop("error_message", ""), **out)
    emit(args, out)
    return 0


def _cmd_broker_status(args: argparse.Namespace) -> int:
    try:
        r = _admin(args, "get_status")
    except AutoswitchError as e:
        return err(args, e)
    out = {
        "group": r.group, "broker_id": r.broker_id, "role": r.role, "master_epoch": r.master_epoch,
        "max_offset": r.max_offset, "confirm_offset": r.confirm_offset, "listen": r.listen,
        "ha_listen": r.ha_listen, "master_ha_addr": r.master_ha_addr, "ack_mode": r.ack_mode, "flush": r.flush,
        "sync_state_set": list(r.sync_state_set),
        "slaves": [{"broker_id": s.broker_id, "addr": s.addr, "ack_offset": s.ack_offset,
                    "last_caught_up_time": s.last_caught_up_time, "in_sync": s.in_sync} for s in r.slaves],
        "ha_state": r.ha_state, "uptime_s": round(r.uptime_s, 3), "produced_msgs": r.produced_msgs,
        "consumed_msgs": r.consumed_msgs, "fenced_reason": r.fenced_reason or None,
        "replicas": json.loads(r.replicas_json) if r.replicas_json else None,
    }
    emit(args, out)
    return 0


def _cmd_log_digest(args: argparse.Namespace) -> int:
    from autoswitch.proto import broker_pb2 as pb

    try:
        r = _admin(args, "log_digest", args.from_offset, args.to_offset)
    except AutoswitchError as e:
        return err(args, e)
    out = {"status": pb.Status.Name(r.status), "from_offset": r.from_offset, "to_offset": r.to_offset,
           "sha256": r.sha256}
    if r.error_message:
        out["error_message"] = r.error_message
    if r.status != pb.OK:
        return fail_code(args, out.pop("status"), out.pop("error_message", ""), **out)
    emit(args, out)
    return 0
