"""`admin broker-config` (mqadmin getBrokerConfig) and `admin broker-config-set -k KEY=VALUE`
(mqadmin updateBrokerConfig, kafka-configs --alter): one broker's configuration, and the keys it
may change while it runs (broker/runtime_config.py; until its next start)."""

from __future__ import annotations

import argparse
import asyncio
import json
from typing import Any

from autoswitch.broker.cli.common import bad_target, err, status_err, target_address

from autoswitch.base.addr import namesrv_list
from autoswitch.base.errors import AutoswitchError, NotFound
from autoswitch.base.output import emit, fail_code
from autoswitch.base.tls import add_tls_args
from autoswitch.proto import broker_pb2 as pb


def register(admin_sub: Any) -> None:
    def target(a: argparse.ArgumentParser) -> None:
        a.add_argument("--broker", help="HOST:PORT of the broker; or --namesrv + --group (the master)")
        a.add_argument("--namesrv", type=namesrv_list, help="name server(s) HOST:PORT[,HOST:PORT...]")
        a.add_argument("--group", help="broker group (with --namesrv)")
        a.add_argument("--timeout", type=float, default=10.0)
        a.add_argument("--json", action="store_true")
        add_tls_args(a)

    a = admin_sub.add_parser("broker-config", help="one broker's configuration, and which keys may change at runtime")
    a.add_argument("--key", action="append", default=[], help="only this key (repeatable)")
    target(a)
    a.set_defaults(func=cmd_broker_config)
    a = admin_sub.add_parser("broker-config-set", help="change keys of a running broker (until its next start; admin)")
    a.add_argument("-k", "--set", dest="changes", action="append", required=True, metavar="KEY=VALUE",
                   help="repeatable")
    target(a)
    a.set_defaults(func=cmd_broker_config_set)


def _run(args: argparse.Namespace, call: Any) -> int:
    from autoswitch.broker.client.client import AdminClient

    if bad_target(args):
        return 2

    async def go() -> int:
        addr = await target_address(args)
        if addr is None:
            return err(args, NotFound(f"no master route for group {args.group!r}"))
        c = AdminClient(addr, timeout_s=args.timeout, tls=args.tls)
        try:
            r = await call(c)
        except AutoswitchError as e:
            return err(args, e)
        finally:
            await c.close()
        if r.status != pb.OK:
            return status_err(args, r.status, r.error_message)
        config = json.loads(r.config_json)
        keys = getattr(args, "key", []) or sorted(config)
        unknown = sorted(set(keys) - set(config))
        if unknown:
            return err(args, NotFound(f"no such broker key: {', '.join(unknown)}"))
        emit(args, {"broker": addr, "config": [{"key": k, "value": config[k], "runtime": k in r.runtime_keys,
                                                "source": r.sources.get(k, "file")} for k in keys]})
        return 0

    return asyncio.run(go())


def cmd_broker_config(args: argparse.Namespace) -> int:
    return _run(args, lambda c: c.get_config())


def cmd_broker_config_set(args: argparse.Namespace) -> int:
    changes: dict[str, str] = {}
    for item in args.changes:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            return fail_code(args, "BAD_USAGE", f"-k takes KEY=VALUE, got {item[:60]!r}", rc=2)
        changes[key.strip()] = value.strip()
    args.key = sorted(changes)
    return _run(args, lambda c: c.update_config(changes))
