"""Config keys, value types and ranges (autoswitch/base/ranges.py), checked before a config object
is built: every bad key is named in one error, with the rule it breaks, and an unknown key gets a "did you mean" when it is close
to a real one (a typo must never leave a safety timeout at its default unnoticed)."""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Iterable
from typing import Any

from autoswitch.base.errors import ConfigError
from autoswitch.base.ranges import check_ranges


def suggest(key: str, known: Iterable[str]) -> str:
    close = difflib.get_close_matches(key, sorted(known), n=1, cutoff=0.7)
    return f" (did you mean {close[0]!r}?)" if close else ""


def refuse_unknown(what: str, keys: Iterable[str], known: Iterable[str]) -> None:
    known = set(known)
    unknown = sorted(set(keys) - known)
    if unknown:
        raise ConfigError("; ".join(f"unknown {what} key {k!r}{suggest(k, known)}" for k in unknown), keys=unknown)


def check_path(value: str, key: str) -> str:
    """A file or directory name from a config: no NUL byte and no control character (a NUL made
    every open() raise ValueError, reported INTERNAL; issue 59, item 5). ConfigError naming the key."""
    if not isinstance(value, str) or "\0" in value or not value.isprintable():
        raise ConfigError(f"{key} must be a file name without NUL or control characters, got {str(value)[:80]!r}",
                          key=key)
    return value


def _type_problem(default: Any, value: Any) -> str | None:
    if isinstance(default, bool):
        return None if isinstance(value, bool) else "must be true or false"
    if isinstance(default, int):
        return None if isinstance(value, int) and not isinstance(value, bool) else "must be an integer"
    if isinstance(default, float):
        return None if isinstance(value, int | float) and not isinstance(value, bool) else "must be a number"
    if isinstance(default, str):
        return None if isinstance(value, str) else "must be a string"
    if isinstance(default, dict):
        return None if isinstance(value, dict) else "must be a table"
    if isinstance(default, list | tuple):
        # a comma-separated string is the list's CLI form; the config parses it
        return None if isinstance(value, list | tuple | str) else "must be a list"
    return None      # no default to compare with (None, objects): the config's validate() decides


def check_values(cls: type, values: dict[str, Any], what: str) -> dict[str, Any]:
    """Refuse unknown keys and values of the wrong type for dataclass ``cls`` (all at once);
    returns the values with integers given for float keys turned into floats."""
    fields = {f.name: f for f in dataclasses.fields(cls)}
    refuse_unknown(what, values, fields)
    problems, bad, out = [], [], dict(values)
    for k, v in values.items():
        f = fields[k]
        if f.default is None and v is not None:
            # an optional key (``str | None``): its value must still be of the named type
            want = str(f.type).split("|")[0].strip()
            bad_type = {"str": not isinstance(v, str),
                        "int": not isinstance(v, int) or isinstance(v, bool)}.get(want, False)
            if bad_type:
                problems.append(f"{what} key {k!r} must be {want}, got {type(v).__name__} {str(v)[:40]!r}")
                bad.append(k)
            continue
        if f.default is not dataclasses.MISSING:
            default = f.default
        elif f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        else:
            continue
        why = _type_problem(default, v)
        if why is not None:
            problems.append(f"{what} key {k!r} {why}, got {type(v).__name__} {str(v)[:40]!r}")
            bad.append(k)
        elif isinstance(default, float) and isinstance(v, int):
            out[k] = float(v)
    if problems:
        raise ConfigError("; ".join(problems), keys=sorted(bad))
    check_ranges(cls.__name__, out, what)
    return out
