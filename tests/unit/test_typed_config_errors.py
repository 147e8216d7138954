"""Issue 59, item 5: what used to end in an INTERNAL error gets a typed one naming the key or flag:
a NUL byte in a file name of the config (auth_tokens_file, metrics_token_file, [store]
credentials_file), an unknown key under [controller.raft], `admin verify-group --range-mb 1e308`.
The real CLI, each in a process of its own; no process runs long enough to serve."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.procs import free_port


def _run(*args: str) -> dict:
    out = subprocess.run([sys.executable, "-m", "autoswitch", *args], capture_output=True, text=True, timeout=60)
    assert out.returncode != 0, out.stdout[-500:]
    lines = [json.loads(x) for x in (out.stdout + out.stderr).splitlines() if x.startswith('{"command"')]
    assert lines, (out.stdout + out.stderr)[-2000:]
    return lines[-1]["error"]


@pytest.mark.parametrize("key", ["metrics_token_file", "auth_tokens_file"])
def test_a_nul_byte_in_a_brokers_file_name_is_a_config_error(tmp_path: Path, key: str):
    cfg = tmp_path / "b.toml"
    cfg.write_text(f'{key} = "a\\u0000b"\n')
    err = _run("broker", "--config", str(cfg), "--group", "g", "--listen", f"127.0.0.1:{free_port()}",
               "--data-dir", str(tmp_path / "d"))
    assert err["code"] == "CONFIG_ERROR" and err["key"] == key, err


@pytest.mark.parametrize("table", ['[controller]\nauth_tokens_file = "a\\u0000b"\n',
                                   '[controller]\nmetrics_token_file = "a\\u0000b"\n',
                                   '[controller]\nbackend = "sql"\n[store]\nurl = "sqlite:///x.db"\n'
                                   'credentials_file = "a\\u0000b"\n',
                                   '[controller.raft]\nbogus_key = 1\n',
                                   '[controller.raft]\nelection_timeout_min_ms = "soon"\n'])
def test_a_controller_config_error_is_typed(tmp_path: Path, table: str):
    cfg = tmp_path / "c.toml"
    cfg.write_text(table)
    err = _run("controller", "--node-id", "n1", "--peers", f"n1=127.0.0.1:{free_port()}",
               "--data-dir", str(tmp_path / "d"), "--config", str(cfg))
    assert err["code"] == "CONFIG_ERROR", err


def test_verify_group_refuses_an_absurd_range_size():
    err = _run("admin", "verify-group", "--controller", "127.0.0.1:1", "--group", "g", "--range-mb", "1e308")
    assert err["code"] == "BAD_USAGE" and "--range-mb" in err["message"], err
