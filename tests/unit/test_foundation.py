"""The namespace install and the CLI wiring."""

import importlib
import subprocess
import sys


def test_root_folders_import_under_one_namespace():
    for name in ("controller", "broker", "ha", "epochfile", "pipeline"):
        mod = importlib.import_module(f"autoswitch.{name}")
        assert mod.__name__ == f"autoswitch.{name}"


def test_generic_names_do_not_leak_into_site_packages():
    # `import broker` must not resolve to our package (it would shadow anything named broker).
    code = "import importlib.util,sys; s=importlib.util.find_spec('broker'); print(s.origin if s else 'none')"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd="/", check=True)
    assert "autoswitch" not in out.stdout and "/broker/" not in out.stdout


def test_cli_help_runs():
    out = subprocess.run([sys.executable, "-m", "autoswitch", "--help"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "admin" in out.stdout


def test_silenced_logs_nothing_and_restores_the_configuration():
    import io
    import json

    from autoswitch.base import log as aslog

    out = io.BytesIO()
    aslog.configure("INFO", out)
    try:
        log = aslog.get_logger("x")
        log.info("before")
        with aslog.silenced():
            log.info("inside")
            log.critical("inside-critical")
            aslog.get_logger("y").error("inside-new-logger")
        log.info("after")
    finally:
        aslog.configure()
    assert [json.loads(x)["event"] for x in out.getvalue().decode().splitlines()] == ["before", "after"]


def test_a_log_line_is_the_json_of_ts_level_pid_and_the_fields():
    import io
    import json
    import os
    import re
    from pathlib import Path

    from autoswitch.base import log as aslog

    out = io.BytesIO()
    aslog.configure("INFO", out)
    try:
        log = aslog.get_logger("x", group="g1").bind(brokerId=2)
        log.info("ev", path=Path("/p"), u="é\u2028", ids=[1, 2], none=None)
        log.debug("hidden")
        try:
            raise ValueError("boom")
        except ValueError:
            log.error("failed", exc_info=True)
    finally:
        aslog.configure()
    lines = out.getvalue().decode().split("\n")[:-1]   # JSON lines end in \n; U+2028 is not a line end
    assert len(lines) == 2, lines
    d = json.loads(lines[0])
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", d["ts"])
    assert d == {"ts": d["ts"], "level": "info", "pid": os.getpid(), "component": "x", "event": "ev",
                 "group": "g1", "brokerId": 2, "path": "/p", "u": "é\u2028", "ids": [1, 2], "none": None}
    assert list(d)[:5] == ["ts", "level", "pid", "component", "event"]
    e = json.loads(lines[1])
    assert e["level"] == "error" and "ValueError: boom" in e["exc"]

