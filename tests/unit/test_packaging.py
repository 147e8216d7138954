"""packaging/: the systemd units pass `systemd-analyze verify`, and the example configs of the
three-machine deployment load and validate (with a development CA standing in for the real one)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from autoswitch.broker.config import load_config
from autoswitch.controller.config import load as load_controller

ROOT = Path(__file__).resolve().parents[2]
PKG = ROOT / "packaging"
UNITS = sorted((PKG / "systemd").glob("*.service"))


def test_there_are_units_for_every_process():
    assert {u.name for u in UNITS} == {"autoswitch-controller.service", "autoswitch-namesrv.service",
                                      "autoswitch-broker@.service"}


@pytest.mark.parametrize("unit", UNITS, ids=[u.name for u in UNITS])
def test_unit_verifies(unit, tmp_path):
    tool = shutil.which("systemd-analyze")
    assert tool, "systemd-analyze is needed (Debian package systemd)"
    exe = Path(sys.executable).parent / "autoswitch"
    text = unit.read_text().replace("/opt/autoswitch/venv/bin/autoswitch", str(exe))
    name = unit.name.replace("@.service", "@test.service")
    (tmp_path / name).write_text(text)
    r = subprocess.run([tool, "verify", "--man=no", str(tmp_path / name)], capture_output=True, text=True,
                       timeout=60)
    # verify exits 0 even for unknown keys or bad values: it only warns, so any output is a failure
    assert r.returncode == 0 and not (r.stdout + r.stderr).strip(), r.stdout + r.stderr


def _with_dev_tls(text: str, tmp: Path, identity: str) -> str:
    from autoswitch.app.certs import init_dev_ca

    ids = init_dev_ca(tmp / "tls", [identity])
    c = ids[identity]
    for name in ("controller", "broker-g0", "namesrv"):
        text = text.replace(f"/etc/autoswitch/tls/{name}.pem", c["cert"]).replace(f"/etc/autoswitch/tls/{name}.key",
                                                                                  c["key"])
    return text.replace("/etc/autoswitch/tls/ca.pem", c["ca"]).replace("/etc/autoswitch/tokens.toml",
                                                                       str(tmp / "tokens.toml"))


def test_example_configs_load(tmp_path):
    (tmp_path / "tokens.toml").write_text("")
    ctl = tmp_path / "controller.toml"
    ctl.write_text(_with_dev_tls((PKG / "examples/controller.toml").read_text(), tmp_path, "controller/n1"))
    env = dict(line.split("=", 1) for line in (PKG / "examples/controller.env").read_text().splitlines()
               if line and not line.startswith("#"))
    cfg = load_controller(ctl, node_id=env["NODE_ID"], peers=env["PEERS"], raft_peers=env["RAFT_PEERS"],
                          data_dir=str(tmp_path / "ctl"))
    assert cfg.auth and cfg.tls.enabled and len(cfg.peers) == 3
    b = tmp_path / "broker.toml"
    b.write_text(_with_dev_tls((PKG / "examples/broker-g0.toml").read_text(), tmp_path / "b", "broker/g0/1"))
    bcfg = load_config(b, {"data_dir": str(tmp_path / "b0")})
    assert bcfg.group == "g0" and len(bcfg.controllers) == 3 and bcfg.auth


def test_the_container_image_build_steps_install_a_working_autoswitch(tmp_path):
    """What `docker build -f packaging/Dockerfile` does after its base images, without Docker (these
    machines have no daemon and no registry): a build context of exactly the build stage's COPY
    lines, made into a wheel as its `pip wheel` does (which must hold the C record checker, as the
    stage's own check demands), installed as the final stage does, must import from there and run
    every server's --help and the HEALTHCHECK command. A package directory added to pyproject.toml
    but not to the Dockerfile fails here."""
    import zipfile

    lines = (PKG / "Dockerfile").read_text().splitlines()
    copies = [ln.split()[1:] for ln in lines if ln.startswith("COPY ") and "--from" not in ln]
    ctx = tmp_path / "ctx"
    ctx.mkdir()
    for *srcs, _dest in copies:
        for src in srcs:
            s = ROOT / src
            if s.is_dir():
                shutil.copytree(s, ctx / src, ignore=shutil.ignore_patterns("__pycache__", "*.so", "*.egg-info"))
            else:
                shutil.copy(s, ctx / src)
    assert any(ln.startswith("RUN pip wheel") and " --wheel-dir /wheels ." in ln for ln in lines)
    assert any(ln.startswith("COPY --from=build /wheels") for ln in lines)
    assert any(ln.startswith("RUN pip install") and "/wheels/*.whl" in ln for ln in lines)
    wheels = tmp_path / "wheels"
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                        "--wheel-dir", str(wheels), str(ctx)], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    (wheel,) = wheels.glob("autoswitch-*.whl")
    assert any("_fastrec" in n for n in zipfile.ZipFile(wheel).namelist()), "the C record checker was not built"
    site = tmp_path / "site"
    r = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--target", str(site),
                        str(wheel)], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    env = {"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    where = subprocess.run([sys.executable, "-c", "import autoswitch.controller.server.node, autoswitch.broker.service, "
                            "autoswitch.ha, autoswitch.epochfile, autoswitch.pipeline, autoswitch._fastrec; "
                            "print(autoswitch.__file__)"],
                           capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path)
    assert where.returncode == 0 and where.stdout.startswith(str(site)), where.stdout + where.stderr[-2000:]
    health = [ln for ln in lines if ln.startswith("HEALTHCHECK")]
    assert len(health) == 1 and health[0].endswith('CMD ["autoswitch", "healthcheck"]'), health
    h = subprocess.run([sys.executable, "-m", "autoswitch", "healthcheck", "--metrics", "127.0.0.1:1"],
                       capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path)
    assert h.returncode == 1 and h.stdout.startswith("unhealthy: 127.0.0.1:1/healthz"), h.stdout + h.stderr[-2000:]
    entry = [ln for ln in lines if ln.startswith("ENTRYPOINT")]
    assert entry == ['ENTRYPOINT ["autoswitch"]']
    for cmd in ("controller", "namesrv", "broker"):
        h = subprocess.run([sys.executable, "-m", "autoswitch", cmd, "--help"], capture_output=True, text=True,
                           timeout=120, env=env, cwd=tmp_path)
        assert h.returncode == 0 and "usage: autoswitch " + cmd in h.stdout, h.stderr[-2000:]


def test_the_image_exposes_every_port_of_the_port_table():
    """docs/operations.md's port table and the Dockerfile's EXPOSE name the same ports (a
    container uses 9890 for the metrics of whichever process it runs)."""
    import re

    doc = (ROOT / "docs/operations.md").read_text()
    table = {int(p) for p in re.findall(r"^\| (\d{4,5}) \|", doc, flags=re.M)}
    expose = [ln for ln in (PKG / "Dockerfile").read_text().splitlines() if ln.startswith("EXPOSE ")]
    assert len(expose) == 1
    assert table == {9876, 9878, 9880, 10911, 10912}
    assert {int(p) for p in expose[0].split()[1:]} == table | {9890}
