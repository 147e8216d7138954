"""`autoswitch` command line.

Each area registers its own subcommands (``register(sub, admin_sub)`` in ``<area>/cli.py``),
declared as ``autoswitch.commands`` entry points in pyproject.toml, so this file only wires them
together and imports no area itself. Registration must be cheap: heavy imports (gRPC servers,
pyspark) happen inside the handlers.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

# gRPC's native core logs some failures itself (a TLS handshake with another CA: one INFO line
# per retry, before our one-line error). Ours are typed and complete; its own stay at ERROR
# unless the operator asks (GRPC_VERBOSITY=debug). Set before anything imports grpc.
os.environ.setdefault("GRPC_VERBOSITY", "ERROR")

from autoswitch import __version__
from autoswitch.app.cliargs import apply_default_endpoints, harden
from autoswitch.base import log as aslog
from autoswitch.base.errors import AutoswitchError
from autoswitch.base.features import SUPPORTED_LEVEL
from autoswitch.base.output import fail, fail_code

COMMAND_GROUP = "autoswitch.commands"

# The long-running servers: their start is on the path of every restart (a broker back in its
# SyncStateSet, a controller back in its quorum), so they load only their own area's commands and
# skip the entry-point scan (~150 ms of a ~650 ms broker start: importlib.metadata and every
# other area's modules). tests/unit/test_cli_fast_path.py keeps this table true to the entry points.
SERVER_COMMANDS = {
    "broker": "autoswitch.broker.cli",
    "controller": "autoswitch.controller.cli",
    "namesrv": "autoswitch.controller.cli",
}


# Commands a person runs and reads: their log lines start at WARNING unless asked (a produce in
# human mode printed every info line as JSON on stderr beside its answer: issue 64, item 9).
# Processes that run (broker, controller, name server, playground) and long operations log INFO.
QUIET_COMMANDS = frozenset({"admin", "produce", "consume", "dump-log", "certs", "completion", "healthcheck"})


def command_of(argv: list[str]) -> str | None:
    """The subcommand ``argv`` names, or None when it starts with another option (--help, ...)."""
    it = iter(argv)
    for a in it:
        if a == "--log-level":
            next(it, None)
        elif not a.startswith("--log-level="):
            return None if a.startswith("-") else a
    return None


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """Every area's commands, or (``only``: a module of SERVER_COMMANDS) that area's alone."""
    parser = argparse.ArgumentParser(prog="autoswitch", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version",
                        version=f"autoswitch {__version__} (feature level {SUPPORTED_LEVEL})")
    parser.add_argument("--log-level", default=None, help="debug|info|warning|error|critical (env AUTOSWITCH_LOG_LEVEL)")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    admin = sub.add_parser("admin", help="operator commands (all take --json)")
    admin_sub = admin.add_subparsers(dest="admin_command", required=True, metavar="ADMIN_COMMAND")
    if only is not None:
        importlib.import_module(only).register(sub, admin_sub)
    else:
        from importlib.metadata import entry_points

        for ep in sorted(entry_points(group=COMMAND_GROUP), key=lambda e: e.name):
            ep.load().register(sub, admin_sub)
    harden(parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Usage and config errors exit 2, failures 1; no traceback reaches the user unless
    AUTOSWITCH_DEBUG=1 (a closed pipe, e.g. ``--json | head``, ends quietly)."""
    only = SERVER_COMMANDS.get(command_of(sys.argv[1:] if argv is None else argv) or "")
    parser = build_parser() if only is None else build_parser(only)
    args = parser.parse_args(argv)
    try:
        bad = apply_default_endpoints(args)
        if bad is not None:
            return fail_code(args, "BAD_USAGE", bad, rc=2)
        aslog.configure(args.log_level or os.environ.get("AUTOSWITCH_LOG_LEVEL")
                        or ("WARNING" if getattr(args, "command", None) in QUIET_COMMANDS else None))
        rc = args.func(args)
        sys.stdout.flush()
    except BrokenPipeError:
        # the reader went away: point stdout at /dev/null so the interpreter's final flush is quiet
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except KeyboardInterrupt:
        return 130
    except AutoswitchError as e:
        if os.environ.get("AUTOSWITCH_DEBUG") == "1":
            raise
        return fail(args, e, rc=2 if e.code == "CONFIG_ERROR" else 1)
    except Exception as e:  # noqa: BLE001 - the one place a user would otherwise see a traceback
        if os.environ.get("AUTOSWITCH_DEBUG") == "1":
            raise
        return fail_code(args, "INTERNAL", f"{type(e).__name__}: {str(e)[:500]}",
                         hint="rerun with AUTOSWITCH_DEBUG=1 for the traceback")
    return int(rc or 0)


if __name__ == "__main__":
    sys.exit(main())
