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
