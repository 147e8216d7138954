"""The server commands' fast start (autoswitch/app/cli.py SERVER_COMMANDS) stays true to the
entry points: each names the module that registers it, and that module registers it alone."""

from __future__ import annotations

import argparse
from importlib.metadata import entry_points

import pytest

from autoswitch.app.cli import COMMAND_GROUP, SERVER_COMMANDS, build_parser, command_of


def _commands(parser: argparse.ArgumentParser) -> set[str]:
    for a in parser._actions:
        if isinstance(a, argparse._SubParsersAction):
            return set(a.choices)
    raise AssertionError("no subcommands")


@pytest.mark.parametrize("command", sorted(SERVER_COMMANDS))
def test_each_server_command_comes_from_its_entry_point_module(command):
    modules = {ep.value for ep in entry_points(group=COMMAND_GROUP)}
    assert SERVER_COMMANDS[command] in modules
    assert command in _commands(build_parser(SERVER_COMMANDS[command]))
    assert command in _commands(build_parser())


def test_the_fast_parser_takes_the_same_options():
    full = build_parser()
    for command, module in SERVER_COMMANDS.items():
        sub = [a for a in full._actions if isinstance(a, argparse._SubParsersAction)][0]
        fast = [a for a in build_parser(module)._actions if isinstance(a, argparse._SubParsersAction)][0]
        # the same options either way: the fast path parses exactly what the full parser would
        assert {o for a in sub.choices[command]._actions for o in a.option_strings} == \
               {o for a in fast.choices[command]._actions for o in a.option_strings}


@pytest.mark.parametrize(("argv", "command"), [
    (["broker", "--listen", "x"], "broker"),
    (["--log-level", "debug", "namesrv"], "namesrv"),
    (["--log-level=info", "controller"], "controller"),
    (["--help"], None),
    (["--version"], None),
    ([], None),
    (["admin", "cluster-list"], "admin"),
])
def test_command_of(argv, command):
    assert command_of(argv) == command
