"""Issue 34 item 1: the release as a user installs it. `python -m build` makes an sdist and a
wheel from the committed files alone; the wheel goes into a fresh virtual environment with no
repository around it, and from there `autoswitch --version`, the playground's failover demo
(controllers, name server, brokers, producer, as child processes of that install), a standalone
controller and the admin CLI all run. The sdist built without a C compiler still installs and
checks records in pure Python (the C record checker is optional)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from autoswitch import __version__
from autoswitch.base import features
from tests.integration.test_playground import _base_port, _child_pids, _cleanup
from tests.procs import free_port, wait_port
from tests.upgrade.installs import copy_tree

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(900)]

ROOT = Path(__file__).resolve().parents[2]


def _run(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=kw.pop("timeout", 600), **kw)
    assert r.returncode == 0, f"{cmd[:4]}: " + r.stdout[-2000:] + r.stderr[-3000:]
    return r


@pytest.fixture(scope="module")
def dist(tmp_path_factory) -> Path:
    """sdist + wheel from a copy of exactly the committed files (what a release is cut from)."""
    tmp = tmp_path_factory.mktemp("release")
    src = copy_tree(tmp / "src")
    out = tmp / "dist"
    # --no-isolation: the build backend (setuptools) from this environment, no download
    _run([sys.executable, "-m", "build", "--no-isolation", "--sdist", "--wheel", "--outdir", str(out), str(src)])
    return out


def test_the_wheel_runs_everything_from_a_fresh_venv(dist, tmp_path):
    (wheel,) = dist.glob(f"autoswitch-{__version__}-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert any("_fastrec" in n for n in names), "the C record checker was not built into the wheel"
    assert not any(n.startswith(("tests/", "autoswitch/tests")) for n in names)
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", str(venv)])
    py, cli = venv / "bin" / "python", venv / "bin" / "autoswitch"
    _run([str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check", str(wheel)],
         env={**os.environ, "PYTHONWARNINGS": "ignore"}, timeout=900)
    home = tmp_path / "home"        # no repository here: nothing can be imported from a checkout
    home.mkdir()
    env = {"PATH": f"{venv / 'bin'}:/usr/bin:/bin", "HOME": str(home), "PYTHONUNBUFFERED": "1"}

    v = _run([str(cli), "--version"], env=env, cwd=home)
    assert v.stdout.strip() == f"autoswitch {__version__} (feature level {features.SUPPORTED_LEVEL})", v.stdout
    where = _run([str(py), "-c", "import autoswitch, autoswitch._fastrec; print(autoswitch.__file__)"],
                 env=env, cwd=home)
    assert where.stdout.startswith(str(venv)), where.stdout

    # the playground's failover demo: every server a child process of this install
    pg = subprocess.Popen([str(cli), "playground", "--data-dir", str(home / "pg"), "--base-port", str(_base_port()),
                           "--demo", "failover", "--groups", "1", "--demo-before-s", "1.5", "--demo-after-s", "1.0"],
                          cwd=home, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          start_new_session=True)
    pids: dict[str, int] = {}
    try:
        out, _ = pg.communicate(timeout=180)
        pids = _child_pids(out.splitlines())
        assert pg.returncode == 0 and "demo: PASS" in out, out[-4000:]
        # it tells the user to audit with the command on their PATH: this install's
        assert "demo: audit it: autoswitch pipeline audit" in out, out[-4000:]
        # ... and says first that it needs the pipeline extra, which a plain wheel install lacks (issue 64 item 2)
        hint = out.index("demo: the audit runs on PySpark")
        assert hint < out.index("demo: audit it:"), out[-4000:]
    finally:
        _cleanup(pg, pids)

    # a standalone controller and the admin CLI, both from the install
    port = free_port()
    ctl = subprocess.Popen([str(cli), "controller", "--node-id", "n1", "--peers", f"n1=127.0.0.1:{port}",
                            "--data-dir", str(home / "ctl")], cwd=home, env=env,
                           stdout=open(home / "ctl.log", "wb"), stderr=subprocess.STDOUT)  # noqa: SIM115
    try:
        wait_port(port, timeout=30, proc=ctl)
        for _ in range(100):
            r = subprocess.run([str(cli), "admin", "features", "--controller", f"127.0.0.1:{port}", "--json"],
                               capture_output=True, text=True, timeout=60, env=env, cwd=home)
            if r.returncode == 0:
                break
        res = json.loads(r.stdout.strip().splitlines()[-1])["result"]
        assert res["members"] == [{"member": "controller n1", "kind": "controller",
                                   "supported": features.SUPPORTED_LEVEL, "version": __version__}], res
        started = next(json.loads(x) for x in (home / "ctl.log").read_text().splitlines() if "controller_started" in x)
        assert started["version"] == __version__
    finally:
        ctl.terminate()
        ctl.wait(30)


def test_the_sdist_installs_without_a_compiler_and_checks_records_in_python(dist, tmp_path):
    (sdist,) = dist.glob(f"autoswitch-{__version__}.tar.gz")
    site = tmp_path / "site"
    # no compiler: the optional extension's build fails and the install goes on without it
    _run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--no-index",
          "--target", str(site), str(sdist)], env={**os.environ, "CC": "/bin/false", "PYTHONWARNINGS": "ignore"})
    assert not list(site.glob("autoswitch/_fastrec*")), "the extension was built although no compiler ran"
    probe = ("import autoswitch\n"
             "from autoswitch.broker.storage import record\n"
             "assert record.native is None\n"
             "rec = record.encode_message(b't', b'id-1', b'x' * 10, 0, 0, 1)\n"
             "assert record.check_record(rec, 0, len(rec)) is None\n"
             "bad = rec[:-1] + b'y'\n"
             "assert record.check_record(bad, 0, len(bad)) is not None\n"
             "print(autoswitch.__file__)\n")
    # -S: no .pth files, so this checkout's editable install cannot lend its built extension;
    # the dependencies come from this environment's site-packages, after the install
    deps = sysconfig.get_paths()["purelib"]
    r = _run([sys.executable, "-S", "-c", probe], env={"PYTHONPATH": f"{site}:{deps}", "PATH": "/usr/bin:/bin"},
             cwd=tmp_path)
    assert r.stdout.startswith(str(site)), r.stdout
