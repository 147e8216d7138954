"""One output envelope for every command with --json; aligned tables for people (autoswitch/base/output.py)."""

from __future__ import annotations

import json
import subprocess
import sys

from autoswitch.app.cli import build_parser
from autoswitch.base import output


def _leaf_parsers(parser, path=()):
    import argparse

    for action in parser._actions:   # noqa: SLF001
        if isinstance(action, argparse._SubParsersAction):   # noqa: SLF001
            for name, sub in action.choices.items():
                yield from _leaf_parsers(sub, (*path, name))
            return
    yield path, parser


def test_every_command_knows_its_name_and_every_admin_command_takes_json():
    leaves = list(_leaf_parsers(build_parser()))
    assert len(leaves) > 30
    for path, p in leaves:
        defaults = {a.dest: a.default for a in p._actions}   # noqa: SLF001
        assert p.get_default("command_path") == " ".join(path), path
        if path[0] in ("admin", "certs", "pipeline") or path in (("produce",), ("consume",), ("recover-member",),
                                                                  ("restore-member",)):
            assert "json" in defaults, f"{' '.join(path)} has no --json"


def test_tables_align_nested_records_and_say_yes_no(capsys):
    output.render({"group": "g1", "master_epoch": 3, "fenced": False, "sync_state_set": [1, 2],
                   "slaves": [{"broker_id": 2, "ack_offset": 150000, "in_sync": True},
                              {"broker_id": 3, "ack_offset": 12, "in_sync": False}]})
    text = capsys.readouterr().out
    lines = text.splitlines()
    assert any(ln.split() == ["group", "g1"] for ln in lines)
    assert any(ln.split() == ["sync_state_set", "1,", "2"] for ln in lines)
    assert any(ln.split() == ["fenced", "no"] for ln in lines)
    assert "slaves" in text
    rows = [ln for ln in lines if ln.strip().startswith(("2 ", "3 "))]
    assert len(rows) == 2
    # numbers are right-aligned: the offsets end in the same column
    assert rows[0].index("150000") + len("150000") == rows[1].index("12") + len("12")


def test_certs_token_prints_a_table_or_the_envelope(tmp_path):
    base = [sys.executable, "-m", "autoswitch", "certs", "token", str(tmp_path / "tokens.toml")]
    human = subprocess.run([*base, "ops", "--roles", "reader"], capture_output=True, text=True, timeout=60)
    assert human.returncode == 0, human.stderr
    assert any(ln.split()[:2] == ["name", "ops"] for ln in human.stdout.splitlines()), human.stdout
    js = subprocess.run([*base, "ops2", "--roles", "reader", "--json"], capture_output=True, text=True, timeout=60)
    env = json.loads(js.stdout)
    assert env["ok"] and env["command"] == "certs token" and env["result"]["name"] == "ops2"
    gone = subprocess.run([sys.executable, "-m", "autoswitch", "certs", "revoke", str(tmp_path / "tokens.toml"),
                           "never", "--json"], capture_output=True, text=True, timeout=60)
    env = json.loads(gone.stdout)
    assert gone.returncode == 1 and env["ok"] is False and env["error"]["code"] == "NOT_FOUND"
    assert env["command"] == "certs revoke"


def test_a_failure_without_json_is_the_envelope_on_stderr(tmp_path):
    r = subprocess.run([sys.executable, "-m", "autoswitch", "admin", "get-broker-epoch", "--broker", "127.0.0.1:1"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and r.stdout == ""
    env = json.loads(r.stderr.strip().splitlines()[-1])
    assert env["ok"] is False and env["command"] == "admin get-broker-epoch" and env["error"]["code"]
