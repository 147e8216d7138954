"""Every command refuses a bad address, a negative number, an --out into a missing directory and an
impossible --size as a usage error: exit 2, one line on stderr, no traceback (issue 15 item 5)."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

import pytest

from autoswitch.app import cliargs
from autoswitch.app.cli import build_parser


def _commands(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()):
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]   # noqa: SLF001
    if not subs:
        yield path, parser
    for a in subs:
        for name, sub in a.choices.items():
            yield from _commands(sub, (*path, name))


def _good(action: argparse.Action) -> list[str]:
    if action.nargs == 0:
        return []
    if action.choices:
        return [str(next(iter(action.choices)))]
    kind = getattr(action.type, "__name__", "")
    if action.type in (cliargs.hostport, cliargs.hostport_list):
        return ["127.0.0.1:1"]
    if action.type is cliargs.out_path:
        return ["/tmp/autoswitch-cli-test.out"]
    if kind in ("int", "float"):
        return ["1"]
    return ["x"]


def _bad(action: argparse.Action) -> str | None:
    if action.type in (cliargs.hostport, cliargs.hostport_list):
        return "localhost"
    if action.type is cliargs.out_path:
        return "/nonexistent-dir/x"
    if getattr(action.type, "__name__", "") in ("int", "float"):
        # a number below the option's minimum; an option that takes any signed number (--shift-by)
        # gets one that is no number at all
        return "-5" if cliargs.MINIMUM.get(action.dest, 0) > -5 else "x"
    return None


CASES = []
for path, parser in _commands(build_parser()):
    required = [a for a in parser._actions if a.required and a.option_strings]    # noqa: SLF001
    for action in parser._actions:                                              # noqa: SLF001
        bad = _bad(action) if action.option_strings else None
        if bad is None:
            continue
        argv = [*path]
        for r in required:
            if r is not action:
                argv += [r.option_strings[0], *_good(r)]
        argv += [action.option_strings[0], bad]
        CASES.append(pytest.param(argv, id=" ".join([*path, action.option_strings[0]])))


def test_there_are_many_cases():
    assert len(CASES) > 100


@pytest.mark.parametrize("argv", CASES)
def test_bad_value_is_a_usage_error(argv, capsys):
    with pytest.raises(SystemExit) as ei:
        build_parser().parse_args(argv)
    assert ei.value.code == 2
    err = capsys.readouterr().err
    assert "error: argument" in err and "Traceback" not in err


def _cli(*args: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "autoswitch", *args], capture_output=True, text=True, timeout=60, **kw)


def test_bad_log_level_is_a_usage_error():
    r = _cli("--log-level", "nope", "broker")
    assert r.returncode == 2 and "Traceback" not in r.stderr and "--log-level" in r.stderr


def _main_with(fn, monkeypatch, *argv: str):
    """Run the real ``main`` wrapper around a stand-in command."""
    from autoswitch.app import cli

    def parser() -> argparse.ArgumentParser:
        p = argparse.ArgumentParser(prog="autoswitch")
        p.add_argument("--log-level", default=None)
        p.add_argument("--json", action="store_true")
        p.set_defaults(func=fn, command_path="stand-in")
        return p
    monkeypatch.setattr(cli, "build_parser", parser)
    return cli.main(list(argv))


def test_unexpected_failure_is_one_json_line(monkeypatch, capsys):
    def boom(args):
        raise ValueError("something odd")
    assert _main_with(boom, monkeypatch) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err and '"code": "INTERNAL"' in err and "something odd" in err


def test_with_json_a_failure_is_the_envelope_on_stdout(monkeypatch, capsys):
    from autoswitch.base.errors import NotFound

    def missing(args):
        raise NotFound("no such group 'g9'")
    assert _main_with(missing, monkeypatch, "--json") == 1
    out = capsys.readouterr()
    env = json.loads(out.out)
    assert env == {"ok": False, "command": "stand-in", "error": {"code": "NOT_FOUND", "message": "no such group 'g9'"}}
    assert out.err == ""


def test_typed_error_exit_codes(monkeypatch, capsys):
    from autoswitch.base.errors import ConfigError

    def bad_config(args):
        raise ConfigError("nope", key="k")
    assert _main_with(bad_config, monkeypatch) == 2
    assert '"CONFIG_ERROR"' in capsys.readouterr().err


def test_closed_pipe_ends_quietly(tmp_path):
    # a command whose output the reader stops taking (`... --json | head -1`): here a stand-in that
    # writes more than a pipe holds, run through the real main wrapper in a child process
    code = (
        "import argparse, sys\n"
        "from autoswitch.app import cli\n"
        "def big(args):\n"
        "    for i in range(200000):\n"
        "        print('line %d' % i)\n"
        "def parser():\n"
        "    p = argparse.ArgumentParser(); p.add_argument('--log-level'); p.set_defaults(func=big); return p\n"
        "cli.build_parser = parser\n"
        "sys.exit(cli.main([]))\n"
    )
    script = tmp_path / "big.py"
    script.write_text(code)
    p = subprocess.run(f"{sys.executable} {script} | head -1", shell=True, capture_output=True, text=True, timeout=60)
    assert p.stdout.startswith("line 0")
    assert "Traceback" not in p.stderr and "BrokenPipe" not in p.stderr, p.stderr


def test_setup_for_make_run_installs_the_runtime_only(tmp_path):
    """Issue 15 item 6: `make run` on a fresh clone installs no test tools, PySpark, Java or Chromium."""
    import shutil
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    shutil.copy(root / "Makefile", tmp_path / "Makefile")
    shutil.copy(root / "pyproject.toml", tmp_path / "pyproject.toml")
    r = subprocess.run(["make", "-n", "run"], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "pip install -q -e ." in r.stdout
    # setuptools' warnings on every editable build are not shown (issue 33)
    assert "PYTHONWARNINGS=ignore .venv/bin/pip install -q -e ." in r.stdout
    for heavy in ("dev", "pipeline", "system_deps", "apt-get"):
        assert heavy not in r.stdout, (heavy, r.stdout)
    t = subprocess.run(["make", "-n", "test"], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert "[dev,pipeline,sql,zookeeper]" in t.stdout and "system_deps" in t.stdout


def test_a_bad_profile_is_a_usage_error_for_every_command(tmp_path):
    """Issue 33 item 2: a profile that cannot be read or parsed exits 2 (CONFIG_ERROR) as documented,
    for the admin commands too (they exited 1)."""
    bad = tmp_path / "bad.toml"
    bad.write_text("x = [\n")
    for cmd in (["admin", "cluster-list", "--controller", "127.0.0.1:1"], ["produce", "--broker", "127.0.0.1:1",
                                                                           "--topic", "t", "--count", "1"]):
        for profile in (str(tmp_path / "missing.toml"), str(bad)):
            r = subprocess.run([sys.executable, "-m", "autoswitch", *cmd, "--profile", profile, "--json"],
                               capture_output=True, text=True, timeout=60)
            assert r.returncode == 2, (cmd, profile, r.stdout, r.stderr[-500:])
            env = json.loads((r.stdout or r.stderr).strip().splitlines()[-1])
            assert env["error"]["code"] == "CONFIG_ERROR" and "profile" in env["error"]["message"]


@pytest.mark.parametrize("argv,extra", [
    (["playground", "--backend", "sqlite"], "sql"),
    (["playground", "--backend", "zookeeper"], "zookeeper"),
])
def test_a_backend_whose_extra_is_missing_says_which_extra(tmp_path, argv, extra):
    """Issue 33: `--backend sqlite` without the `sql` extra failed with a generic message. With
    the client library hidden (as if not installed) the command names the extra, exit 2, and
    touches nothing (no data directory)."""
    hide = {"sql": "sqlalchemy", "zookeeper": "kazoo"}[extra]
    code = (f"import sys; sys.modules[{hide!r}] = None\n"
            "from autoswitch.app.cli import main\n"
            f"sys.exit(main({[*argv, '--data-dir', str(tmp_path / 'pg')]!r}))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2, r.stdout + r.stderr
    assert f"autoswitch[{extra}]" in r.stdout + r.stderr and "Traceback" not in r.stderr, r.stdout + r.stderr
    assert not (tmp_path / "pg").exists()


def test_suggested_commands_name_the_cli_as_the_user_ran_it(tmp_path, monkeypatch):
    """Issue 33: the playground suggested `autoswitch ...` where only `.venv/bin/autoswitch` exists
    (`make run` does not activate the venv)."""
    import os

    from autoswitch.app.playground import command_name

    venv_bin = tmp_path / ".venv" / "bin"
    venv_bin.mkdir(parents=True)
    exe = venv_bin / "autoswitch"
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", [str(exe), "playground"])
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    assert command_name() == os.path.join(".venv", "bin", "autoswitch")      # not on PATH: the path
    monkeypatch.setenv("PATH", f"{venv_bin}:/usr/bin:/bin")
    assert command_name() == "autoswitch"                                   # on PATH (an activated venv)
    monkeypatch.setattr(sys, "argv", ["/x/autoswitch/__main__.py", "playground"])
    assert command_name() == f"{sys.executable} -m autoswitch"


def test_default_endpoints_from_the_environment_and_the_profile(tmp_path, monkeypatch):
    """Issue 33 item 3: AUTOSWITCH_CONTROLLERS / AUTOSWITCH_NAMESRV and the profile's
    `controllers` / `namesrv` stand in for a left-out --controller / --namesrv (flag > env >
    profile); never for a server's own --namesrv, nor beside --broker; bad values are usage errors
    naming where they came from."""
    from autoswitch.app.cliargs import apply_default_endpoints

    parser = build_parser()
    for k in ("AUTOSWITCH_CONTROLLERS", "AUTOSWITCH_NAMESRV", "AUTOSWITCH_PROFILE"):
        monkeypatch.delenv(k, raising=False)
    prof = tmp_path / "p.toml"
    prof.write_text('controllers = "10.0.0.1:9878,10.0.0.2:9878"\nnamesrv = "10.0.0.1:9876"\n')

    def parsed(*argv: str) -> argparse.Namespace:
        a = parser.parse_args(list(argv))
        assert apply_default_endpoints(a) is None
        return a

    assert "AUTOSWITCH_CONTROLLERS" in apply_default_endpoints(parser.parse_args(["admin", "cluster-list"]))
    monkeypatch.setenv("AUTOSWITCH_PROFILE", str(prof))
    assert parsed("admin", "cluster-list").controller == "10.0.0.1:9878,10.0.0.2:9878"
    assert parsed("produce", "--group", "g", "--topic", "t").namesrv == "10.0.0.1:9876"
    assert parsed("produce", "--broker", "h:1", "--topic", "t").namesrv is None          # --broker named it
    assert parsed("broker", "--data-dir", str(tmp_path)).namesrv is None                # a server's own flag
    monkeypatch.setenv("AUTOSWITCH_CONTROLLERS", "h:1")
    assert parsed("admin", "cluster-list").controller == "h:1"                           # env over profile
    assert parsed("admin", "cluster-list", "--controller", "f:2").controller == "f:2"   # flag over env
    monkeypatch.setenv("AUTOSWITCH_NAMESRV", "nope")
    bad = apply_default_endpoints(parser.parse_args(["consume", "--group", "g", "--topic", "t"]))
    assert bad is not None and bad.startswith("AUTOSWITCH_NAMESRV:"), bad
