"""Issue 64 item 9, the command line as a person meets it: an unknown option is answered with the
subcommand's own usage (it printed the top-level one), and a client command in human mode prints
no info-level log lines beside its answer."""

from __future__ import annotations

import subprocess
import sys

from tests.procs import free_port


def run(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "autoswitch", *argv], capture_output=True, text=True, timeout=60,
                          env=env)


def test_an_unknown_option_gets_the_subcommands_usage():
    r = run("admin", "cluster-list", "--bogus")
    assert r.returncode == 2
    assert r.stderr.startswith("usage: autoswitch admin cluster-list"), r.stderr
    assert "unrecognized arguments: --bogus" in r.stderr
    r = run("produce", "--topic", "t", "--bogus", "1")
    assert r.returncode == 2 and r.stderr.startswith("usage: autoswitch produce"), r.stderr


def test_a_client_command_in_human_mode_logs_warnings_only():
    """A routed produce whose name server does not answer logs `namesrv_unreachable` at info on
    every try: ten JSON lines on stderr beside the human answer before. Asked for, they are there."""
    import os

    env = {k: v for k, v in os.environ.items() if k != "AUTOSWITCH_LOG_LEVEL"}
    argv = ("produce", "--namesrv", f"127.0.0.1:{free_port()}", "--group", "g", "--topic", "t", "--count", "1",
            "--retry-deadline-s", "1")
    r = run(*argv, env=env)
    assert r.returncode == 1 and '"level":"info"' not in r.stderr, r.stderr[-2000:]
    r = run("--log-level", "info", *argv, env=env)
    assert r.returncode == 1 and '"event":"namesrv_unreachable"' in r.stderr, r.stderr[-2000:]
