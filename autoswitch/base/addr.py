"""HOST:PORT, parsed in one place: every address a process is given (flags, config files) or
told (requests, replica info) goes through ``split_hostport`` with the same rules and limit."""

from __future__ import annotations

import argparse

from autoswitch.base.limits import MAX_ADDRESS_LEN, MAX_NAMESRVS


class AddressError(ValueError):
    """Not a HOST:PORT address; callers turn it into their own typed error (usage, config, request)."""


def split_hostport(value: str, listen: bool = False) -> tuple[str, int]:
    """``"host:port"`` -> (host, port). The host is a name, an IPv4 address or a bracketed IPv6
    one (``[::1]:9000``; the brackets are kept); the port 1..65535 (``listen``: also 0, the system
    picks one); at most MAX_ADDRESS_LEN characters, no whitespace or control characters."""
    if not isinstance(value, str) or not value or len(value) > MAX_ADDRESS_LEN:
        raise AddressError(f"expected HOST:PORT of at most {MAX_ADDRESS_LEN} characters")
    if any(c.isspace() or not c.isprintable() for c in value):
        raise AddressError("HOST:PORT has whitespace or control characters")
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit() or not (0 if listen else 1) <= int(port) < 65536:
        raise AddressError(f"expected HOST:PORT with a port in {0 if listen else 1}..65535")
    if host.startswith("[") != host.endswith("]") or (":" in host and not host.startswith("[")):
        raise AddressError("an IPv6 host goes in brackets: [::1]:9000")
    return host, int(port)


def is_hostport(value: str) -> bool:
    try:
        split_hostport(value)
    except AddressError:
        return False
    return True


def split_hostport_list(value: str | list[str], limit: int) -> list[str]:
    """``"h1:p1,h2:p2"`` (or a list of HOST:PORT) -> the addresses, each checked by
    ``split_hostport``; at least one, at most ``limit``, no repeats."""
    items = value.split(",") if isinstance(value, str) else list(value) if isinstance(value, list) else None
    if items is None:
        raise AddressError("expected HOST:PORT[,HOST:PORT...] or a list of HOST:PORT")
    out = [a.strip() if isinstance(a, str) else a for a in items]
    out = [a for a in out if a != ""]
    if not out or len(out) > limit:
        raise AddressError(f"expected 1 to {limit} HOST:PORT addresses, got {len(out)}")
    for a in out:
        split_hostport(a)
    if len(set(out)) != len(out):
        raise AddressError("an address is listed twice")
    return out


def hostport_list_arg(v: str, limit: int = 64) -> str:
    """argparse type of ``--controller``-like flags: HOST:PORT[,HOST:PORT...] (``""``: not given)."""
    if v == "":
        return v
    try:
        split_hostport_list(v, limit)
    except AddressError as e:
        raise argparse.ArgumentTypeError(f"{e}, got {v[:80]!r}") from None
    return v


def namesrv_list(v: str) -> str:
    """argparse type of ``--namesrv``: one or more name servers, HOST:PORT[,HOST:PORT...]."""
    return hostport_list_arg(v, MAX_NAMESRVS)
