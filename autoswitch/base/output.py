"""What every command prints: one JSON envelope with ``--json``, aligned tables for people.

With ``--json`` stdout carries exactly one envelope per command, success or failure, so a script
reads one place whatever happened::

    {"ok": true,  "command": "admin broker-status", "result": {...}}
    {"ok": false, "command": "admin broker-status", "error": {"code": "...", "message": "..."}}

Streaming commands (``produce --json``, ``consume --json``) print their record lines first; the
envelope is always the last line. Without ``--json`` a result is drawn as tables (``rich``) on
stdout and a failure is the same envelope as one JSON line on stderr (a person reads the message,
a log collector parses it).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from .errors import AutoswitchError


def command_name(args: Any) -> str:
    """``admin broker-status``, ``produce``, ``certs init``: the words the user typed (set on every
    leaf parser by ``autoswitch.app.cli.build_parser``)."""
    return str(args.command_path)


def envelope(command: str, result: Any = None, error: Mapping[str, Any] | None = None) -> dict[str, Any]:
    if error is not None:
        return {"ok": False, "command": command, "error": dict(error)}
    return {"ok": True, "command": command, "result": result}


def emit(args: Any, result: Any, title: str | None = None) -> None:
    """Print a command's result: the envelope with ``--json``, else tables."""
    if args.json:
        print(json.dumps(envelope(command_name(args), result), sort_keys=True, default=str))
    else:
        render(result, title=title)


def fail(args: Any, error: AutoswitchError | Mapping[str, Any], rc: int = 1) -> int:
    """Print a failure (the envelope on stdout with ``--json``, on stderr otherwise); returns ``rc``."""
    body = error.to_dict() if isinstance(error, AutoswitchError) else dict(error)
    line = json.dumps(envelope(command_name(args), error=body), sort_keys=True, default=str)
    print(line, file=sys.stdout if args.json else sys.stderr)
    return rc


def fail_code(args: Any, code: str, message: str, rc: int = 1, **extra: Any) -> int:
    return fail(args, {"code": code, "message": message, **extra}, rc)


# ---------------- tables ----------------

def _is_rows(v: Any) -> bool:
    return isinstance(v, Sequence) and not isinstance(v, str | bytes) and bool(v) \
        and all(isinstance(x, Mapping) for x in v)


def _cell(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return f"{v:.3f}".rstrip("0").rstrip(".") if abs(v) < 1e12 else str(v)
    if isinstance(v, Mapping):
        return ", ".join(f"{k}={_cell(x)}" for k, x in v.items()) or "-"
    if isinstance(v, Sequence) and not isinstance(v, str | bytes):
        return ", ".join(_cell(x) for x in v) or "-"
    return str(v)


def _console() -> Any:
    from rich.console import Console

    # Off a terminal (a pipe, a file, a test) rich would wrap at 80 columns; a wide fixed width keeps
    # every row on one line so `grep`/`awk` still work on the table.
    tty = sys.stdout.isatty()
    width = shutil.get_terminal_size((160, 24)).columns if tty else int(os.environ.get("COLUMNS", "200"))
    return Console(file=sys.stdout, width=max(width, 60), highlight=False, soft_wrap=False,
                   force_terminal=tty, no_color=not tty)


# Keys that hold a wall-clock time in epoch milliseconds: people read them as ISO 8601 UTC (the
# JSON envelope keeps the number). Between 2001 and 5138 only: a small number is a duration.
TIME_KEYS = ("ts_ms", "_at_ms", "time_ms", "timestamp_ms")


def _shown(key: str, v: Any) -> Any:
    if (isinstance(v, int) and not isinstance(v, bool) and 10**12 <= v < 10**14
            and key.rsplit(".", 1)[-1].endswith(TIME_KEYS)):
        import datetime as dt

        return dt.datetime.fromtimestamp(v / 1000, dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    return v


def _is_matrix(v: Any) -> bool:
    """The same fields for several members (per-node config): drawn side by side, a column each."""
    return isinstance(v, Mapping) and len(v) >= 2 and all(
        isinstance(x, Mapping) and x and not any(isinstance(y, Mapping) or _is_rows(y) for y in x.values())
        for x in v.values())


def _flat(record: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested mappings become dotted keys (``replica_info.master_epoch``); lists of records and
    per-member mappings stay."""
    out: dict[str, Any] = {}
    for k, v in record.items():
        if isinstance(v, Mapping) and v and not _is_matrix(v):
            out.update(_flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def _matrix(m: Mapping[str, Mapping[str, Any]], title: str) -> Any:
    fields: list[str] = []
    for x in m.values():
        fields.extend(k for k in x if k not in fields)
    return _table([{"field": f, **{str(member): _cell(x.get(f)) for member, x in m.items()}} for f in fields], title)


def _table(rows: Sequence[Mapping[str, Any]], title: str | None, header: bool = True) -> Any:
    from rich import box
    from rich.table import Table

    cols: list[str] = []
    for r in rows:
        cols.extend(k for k in r if k not in cols)
    t = Table(title=title, box=box.SIMPLE_HEAD, title_justify="left", show_edge=False, pad_edge=False,
              show_header=header, title_style="bold")
    for c in cols:
        numeric = all(isinstance(r.get(c), int | float) and not isinstance(r.get(c), bool)
                      for r in rows if r.get(c) is not None)
        t.add_column(c, justify="right" if numeric else "left", overflow="fold")
    for r in rows:
        t.add_row(*(_cell(_shown(c, r.get(c))) for c in cols))
    return t


NAME_KEYS = ("group", "broker_name", "replica_info.broker_name", "topic", "node_id", "name", "address")


def _label(record: Mapping[str, Any], i: int) -> str:
    """What a record is called in a title: its name if it has one, else its first short scalar."""
    flat = _flat(record)
    for k in NAME_KEYS:
        if isinstance(flat.get(k), str | int) and not isinstance(flat.get(k), bool):
            return str(flat[k])
    for v in flat.values():
        if isinstance(v, str | int) and not isinstance(v, bool) and len(str(v)) <= 40:
            return str(v)
    return f"[{i}]"


def _blocks(value: Any, title: str | None) -> list[Any]:
    if _is_rows(value):
        rows = [_flat(r) for r in value]
        if not any(_is_rows(x) for r in rows for x in r.values()):
            return [_table(rows, title)]
        # records that hold records of their own (a group and its replicas): one block each
        out: list[Any] = []
        for i, r in enumerate(value):
            out.extend(_blocks(r, f"{title + ' ' if title else ''}{_label(r, i)}"))
        return out
    if not isinstance(value, Mapping):
        return [_cell(value)]
    flat = _flat(value)
    scalars = {k: v for k, v in flat.items() if not _is_rows(v) and not _is_matrix(v)}
    out = [_table([{"field": k, "value": _cell(_shown(k, v))} for k, v in scalars.items()], title, header=False)] \
        if scalars else []
    for k, v in flat.items():
        if _is_rows(v):
            out.extend(_blocks(v, f"{title}: {k}" if title else k))
        elif _is_matrix(v):
            out.append(_matrix(v, f"{title}: {k}" if title else k))
    return out


def render(result: Any, title: str | None = None) -> None:
    """A mapping becomes a field/value table (nested mappings as dotted fields), each list of
    records inside it a table of its own; records holding records get a block each. A ``summary``
    string is printed first, on its own line; times in epoch milliseconds (``TIME_KEYS``) as ISO."""
    console = _console()
    if isinstance(result, Mapping) and isinstance(result.get("summary"), str):
        # the one line a person reads first (mid-incident), then the tables without it
        console.print(result["summary"], markup=False)
        result = {k: v for k, v in result.items() if k != "summary"}
        if not result:
            return
        console.print()
    for i, block in enumerate(_blocks(result, title)):
        if i:
            console.print()
        console.print(block)
