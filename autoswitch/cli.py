"""`autoswitch` command line.

Each area registers its own subcommands (``register(sub, admin_sub)`` in
``<area>/cli.py``) so this file only wires them together. Registration must be
cheap: heavy imports (gRPC servers, pyspark) happen inside the handlers.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import sys

from autoswitch import __version__
from autoswitch import log as aslog

# Modules that contribute commands; each exposes register(sub, admin_sub).
_COMMAND_MODULES = (
    "autoswitch.broker.cli",
    "autoswitch.controller.cli",
    "autoswitch.pipeline.cli",
    "autoswitch.playground",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="autoswitch", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"autoswitch {__version__}")
    parser.add_argument("--log-level", default=None, help="debug|info|warning|error (env AUTOSWITCH_LOG_LEVEL)")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    admin = sub.add_parser("admin", help="operator commands (all take --json)")
    admin_sub = admin.add_subparsers(dest="admin_command", required=True, metavar="ADMIN_COMMAND")
    for name in _COMMAND_MODULES:
        if importlib.util.find_spec(name) is None:
            continue
        importlib.import_module(name).register(sub, admin_sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    aslog.configure(args.log_level)
    rc = args.func(args)
    return int(rc or 0)


if __name__ == "__main__":
    sys.exit(main())
