"""`autoswitch` command line.

Each area registers its own subcommands (``register(sub, admin_sub)`` in ``<area>/cli.py``),
declared as ``autoswitch.commands`` entry points in pyproject.toml, so this file only wires them
together and imports no area itself. Registration must be cheap: heavy imports (gRPC servers,
pyspark) happen inside the handlers.
"""

from __future__ import annotations

import argparse
import sys
from importlib.metadata import entry_points

from autoswitch import __version__
from autoswitch.base import log as aslog

COMMAND_GROUP = "autoswitch.commands"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="autoswitch", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"autoswitch {__version__}")
    parser.add_argument("--log-level", default=None, help="debug|info|warning|error (env AUTOSWITCH_LOG_LEVEL)")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    admin = sub.add_parser("admin", help="operator commands (all take --json)")
    admin_sub = admin.add_subparsers(dest="admin_command", required=True, metavar="ADMIN_COMMAND")
    for ep in sorted(entry_points(group=COMMAND_GROUP), key=lambda e: e.name):
        ep.load().register(sub, admin_sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    aslog.configure(args.log_level)
    rc = args.func(args)
    return int(rc or 0)


if __name__ == "__main__":
    sys.exit(main())
