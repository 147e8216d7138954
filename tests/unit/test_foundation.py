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


def test_a_log_line_is_the_json_of_ts_level_pid_and_the_fields():
    import json
    import logging
    import re
    from pathlib import Path

    from autoswitch.base.log import _JsonFormatter

    fmt = _JsonFormatter()
    rec = logging.LogRecord("autoswitch.x", logging.INFO, __file__, 1, "ev", None, None)
    rec.as_fields = {"component": "x", "event": "ev", "group": "g1", "brokerId": 2, "path": Path("/p"),
                     "u": "é\u2028", "ids": [1, 2], "none": None}
    line = fmt.format(rec)
    d = json.loads(line)
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", d["ts"])
    want = {"ts": d["ts"], "level": "info", "pid": rec.process, **rec.as_fields}
    assert line == json.dumps(want, default=str, separators=(",", ":"))
    assert fmt.format(rec) == line                      # the cached date part gives the same stamp
    cyclic: dict = {}
    cyclic["self"] = cyclic
    rec.as_fields = {"event": "cyc", "d": cyclic}
    try:
        fmt.format(rec)
    except ValueError as e:                             # json.dumps' own error, not a crash elsewhere
        assert "Circular" in str(e)
    else:
        raise AssertionError("a cyclic field must not encode")
