"""Uniform checks of command-line values, applied to every command after registration.

Areas declare their options plainly; ``harden(parser)`` walks every (sub)parser once and gives
each option a checking type by its destination name: addresses must be HOST:PORT (lists
comma-separated), numbers may not be negative (timeouts must be positive), an admin command's
``--out`` must go to an existing directory, ``--size`` may not exceed what any broker accepts. A bad value is then an
argparse usage error: one line, exit 2, never a traceback (docs/cli.md "Exit codes").
"""

from __future__ import annotations

import argparse
import math
import os
from collections.abc import Callable
from typing import Any

from autoswitch.base.addr import AddressError, hostport_list_arg, split_hostport

ADDRESS = {"broker", "namesrv", "listen", "ha_listen", "master_ha", "master_addr", "metrics_listen"}
ADDRESS_LIST = {"controller", "controllers"}
POSITIVE = {"timeout", "timeout_s", "ready_timeout_s", "refresh_s", "retry_deadline_s", "route_ttl_s",
            "flap_window_s", "ack_timeout_s", "level"}
MINIMUM = {"to_offset": -1,          # -1 = the log end
           "shift_by": -(2**63)}     # a shift back (kafka-consumer-groups --shift-by -N)
# No broker accepts a body larger than its gRPC request limit (max_request_bytes, at most 256 MiB).
MAX_BODY_BYTES = 256 << 20
LOG_LEVELS = ("debug", "info", "warning", "error", "critical")


def hostport(v: str) -> str:
    if v == "":
        return v        # "not given" (argparse also runs the type over a string default)
    try:
        split_hostport(v)
    except AddressError as e:
        raise argparse.ArgumentTypeError(f"{e}, got {v[:80]!r}") from None
    return v


hostport_list = hostport_list_arg


def log_level(v: str) -> str:
    if v.lower() not in LOG_LEVELS:
        raise argparse.ArgumentTypeError(f"expected one of {', '.join(LOG_LEVELS)}, got {v[:40]!r}")
    return v.lower()


def out_path(v: str) -> str:
    if v == "-":
        return v
    parent = os.path.dirname(os.path.abspath(v))
    if not os.path.isdir(parent):
        raise argparse.ArgumentTypeError(f"directory {parent!r} does not exist")
    if not os.access(parent, os.W_OK):
        raise argparse.ArgumentTypeError(f"directory {parent!r} is not writable")
    return v


def _bounded(base: Callable[[str], Any], dest: str) -> Callable[[str], Any]:
    positive = dest in POSITIVE
    lo = MINIMUM.get(dest, 0)

    def check(v: str) -> Any:
        try:
            x = base(v)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {v[:40]!r}") from None
        if isinstance(x, float) and not math.isfinite(x):
            raise argparse.ArgumentTypeError(f"expected a finite number, got {v[:40]!r}")
        if positive and x <= 0:
            raise argparse.ArgumentTypeError(f"must be > 0, got {v[:40]!r}")
        if x < lo:
            raise argparse.ArgumentTypeError(f"must be >= {lo}, got {v[:40]!r}")
        if dest == "size" and x > MAX_BODY_BYTES:
            raise argparse.ArgumentTypeError(f"MESSAGE_TOO_LARGE: {x} bytes per message; no broker accepts more "
                                             f"than {MAX_BODY_BYTES}")
        return x
    check.__name__ = getattr(base, "__name__", "number")
    return check


def harden(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> None:
    """Give every option of every subcommand its check (see the module docstring). ``--out`` is
    checked for the admin commands, where it names a file; the pipeline's ``--out`` is a
    directory it creates with its parents. Each parser also learns its own name (``command_path``)
    and that it prints tables unless it has ``--json``, for ``autoswitch.base.output``."""
    parser.set_defaults(command_path=" ".join(path), json=False)
    if path and not any(isinstance(a, argparse._SubParsersAction) for a in parser._actions):   # noqa: SLF001
        _strict(parser)
    for action in parser._actions:   # noqa: SLF001 - argparse exposes no public walk
        if isinstance(action, argparse._SubParsersAction):   # noqa: SLF001
            for name, sub in action.choices.items():
                harden(sub, (*path, name))
            continue
        if not action.option_strings:
            continue
        if action.dest in ADDRESS and action.type is None:
            action.type = hostport
        elif action.dest in ADDRESS_LIST and action.type is None:
            action.type = hostport_list
        elif action.dest == "out" and action.type is None and path[:1] == ("admin",):
            action.type = out_path
        elif action.dest == "log_level":
            action.type = log_level
        elif action.type in (int, float):
            action.type = _bounded(action.type, action.dest)


def _strict(parser: argparse.ArgumentParser) -> None:
    """A subcommand refuses an option it does not know itself, with its own usage: argparse hands
    the leftovers up and the top-level parser printed its usage, which names no option of the
    subcommand (issue 64, item 9)."""
    known = parser.parse_known_args

    def parse_known_args(args: Any = None, namespace: Any = None) -> tuple[argparse.Namespace, list[str]]:
        ns, extras = known(args, namespace)
        if extras:
            parser.error("unrecognized arguments: " + " ".join(extras))
        return ns, extras

    parser.parse_known_args = parse_known_args      # type: ignore[method-assign]


# The commands whose --controller / --namesrv name their target: the admin commands and the
# clients. Not the servers (their --namesrv is where they register) nor the pipeline (its
# --controller is an optional source beside --events).
CLIENT_COMMANDS = frozenset({"admin", "produce", "consume"})


def apply_default_endpoints(args: argparse.Namespace) -> str | None:
    """``--controller`` / ``--namesrv`` left out of a client command: AUTOSWITCH_CONTROLLERS /
    AUTOSWITCH_NAMESRV, else the profile's ``controllers`` / ``namesrv`` (RocketMQ's NAMESRV_ADDR,
    Kafka's bootstrap servers). Returns a usage error, or None. ``--namesrv`` is not filled in
    when ``--broker`` names the target."""
    from autoswitch.base.addr import namesrv_list
    from autoswitch.base.tls import profile_values

    if getattr(args, "command", None) not in CLIENT_COMMANDS:
        return None
    wants_ctl = hasattr(args, "controller") and not args.controller
    wants_ns = hasattr(args, "namesrv") and not args.namesrv and not getattr(args, "broker", None)
    if not (wants_ctl or wants_ns):
        return None
    profile: dict[str, str] | None = None

    def default(env: str, key: str) -> tuple[str, str]:
        nonlocal profile
        if os.environ.get(env):
            return os.environ[env], env
        if profile is None:
            profile = profile_values(args)
        return profile.get(key, ""), f"the profile's {key}"

    try:
        if wants_ctl:
            value, source = default("AUTOSWITCH_CONTROLLERS", "controllers")
            if not value:
                return "give --controller HOST:PORT[,HOST:PORT...] (or set AUTOSWITCH_CONTROLLERS, or controllers in " \
                       "the profile)"
            args.controller = _checked(hostport_list, value, source)
        if wants_ns:
            value, source = default("AUTOSWITCH_NAMESRV", "namesrv")
            if value:
                args.namesrv = _checked(namesrv_list, value, source)
    except argparse.ArgumentTypeError as e:
        return str(e)
    return None


def _checked(check: Callable[[str], str], value: str, source: str) -> str:
    try:
        return check(value)
    except argparse.ArgumentTypeError as e:
        raise argparse.ArgumentTypeError(f"{source}: {e}") from None
