"""`autoswitch completion bash` completes commands, subcommands and options, driven through bash's
own completion machinery (COMP_WORDS/COMP_CWORD, as readline would set them)."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest


def _complete(script: str, words: list[str]) -> list[str]:
    cword = len(words) - 1
    arr = " ".join(f"'{w}'" for w in words)
    prog = f"{script}\nCOMP_WORDS=({arr}); COMP_CWORD={cword}; _autoswitch; printf '%s\\n' \"${{COMPREPLY[@]}}\"\n"
    r = subprocess.run(["bash", "-c", prog], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    return [x for x in r.stdout.splitlines() if x]


@pytest.fixture(scope="module")
def script() -> str:
    assert shutil.which("bash")
    r = subprocess.run([sys.executable, "-m", "autoswitch", "completion", "bash"], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0 and "complete -F _autoswitch autoswitch" in r.stdout
    return r.stdout


def test_commands_subcommands_and_options(script):
    assert _complete(script, ["autoswitch", "adm"]) == ["admin"]
    assert "get-sync-state-set" in _complete(script, ["autoswitch", "admin", "get-s"])
    assert "--broker-name" in _complete(script, ["autoswitch", "admin", "get-sync-state-set", "--br"])
    # options already given do not reset where we are
    assert "--json" in _complete(script, ["autoswitch", "--log-level", "info", "admin", "move-controller-leader", "--j"])
    assert set(_complete(script, ["autoswitch", "pipeline", ""])) >= {"audit", "analyze", "export-log", "generate"}
