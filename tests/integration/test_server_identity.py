"""Issue 33 item 2: a server's identity comes from its own config, never from a client's profile.

The playground tells users to `export AUTOSWITCH_PROFILE=.../profile.toml` (the admin
certificate); a broker restarted from that shell used to take the profile's certificate over its
config file's, run as `admin`, and be refused registration for ever. Servers now ignore client
profiles and tokens, and refuse at start (exit 2, saying why) a certificate that names another
kind of process than theirs.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from autoswitch.app.certs import init_dev_ca
from autoswitch.base.auth import server_identity_problem
from autoswitch.base.tls import TLSConfig, client_ssl_context
from tests.procs import HOST, free_port, wait_port

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


def _run(args: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "autoswitch", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=60, env=dict(os.environ, **(env or {})))


def _server_cn(port: int, tls: TLSConfig) -> str:
    """The CN of the certificate the server on ``port`` presents."""
    ctx = client_ssl_context(tls)
    with socket.create_connection((HOST, port), timeout=30) as raw, ctx.wrap_socket(raw, server_hostname=HOST) as s:
        subject = dict(x[0] for x in s.getpeercert()["subject"])
    return subject["commonName"]


def test_the_rule():
    assert server_identity_problem("broker", "broker/g1/2") is None
    assert server_identity_problem("broker", "custom-mapped-name") is None     # auth_identities may map it
    for cn in ("admin", "admin/ops", "producer/app", "reader/ops", "controller/n1", "namesrv/1"):
        assert "not a broker's" in (server_identity_problem("broker", cn) or ""), cn
    assert server_identity_problem("controller", "controller/n1", "n1") is None
    assert "this node is 'n2'" in (server_identity_problem("controller", "controller/n1", "n2") or "")
    assert "not a controller's" in (server_identity_problem("controller", "broker/g1/1", "n1") or "")
    assert server_identity_problem("namesrv", "namesrv/1") is None
    assert "not a namesrv's" in (server_identity_problem("namesrv", "admin") or "")


def test_servers_ignore_a_client_profile_and_refuse_a_foreign_certificate(procs, tmp_path):
    certs = init_dev_ca(tmp_path / "tls", ["admin", "broker/g1/1", "controller/n1"])
    a_ca = certs["admin"]["ca"]
    profile = tmp_path / "profile.toml"
    profile.write_text(f'tls_ca = "{certs["admin"]["ca"]}"\ntls_cert = "{certs["admin"]["cert"]}"\n'
                       f'tls_key = "{certs["admin"]["key"]}"\n')
    broker_toml = tmp_path / "broker.toml"
    b = certs["broker/g1/1"]
    broker_toml.write_text(f'tls_ca = "{b["ca"]}"\ntls_cert = "{b["cert"]}"\ntls_key = "{b["key"]}"\n')
    port = free_port()
    base = ["broker", "--group", "g1", "--listen", f"{HOST}:{port}", "--ha-listen", f"{HOST}:{free_port()}",
            "--data-dir", str(tmp_path / "b1"), "--role", "master", "--epoch", "1", "--broker-id", "1",
            "--config", str(broker_toml), "--ack-mode", "master"]
    # its own certificate (the config file's), whatever the shell exported
    p = procs.start("b1", base, env={"AUTOSWITCH_PROFILE": str(profile)})
    wait_port(port, proc=p.popen)
    assert _server_cn(port, TLSConfig(ca=a_ca, cert=certs["admin"]["cert"], key=certs["admin"]["key"])) == "broker/g1/1"
    p.stop(10)
    # a client's profile asked for on a server's command line is a mistake, said at once
    r = _run([*base, "--profile", str(profile)])
    assert r.returncode == 2 and "for client commands" in (r.stdout + r.stderr), r.stdout + r.stderr[-2000:]
    # an operator's certificate given to a broker: refused at start, naming it
    a = certs["admin"]
    r = _run([*base, "--tls-cert", a["cert"], "--tls-key", a["key"]])
    assert r.returncode == 2 and "which is a admin identity" in (r.stdout + r.stderr), r.stdout + r.stderr[-2000:]
    # a controller started with another node's certificate
    c = certs["controller/n1"]
    r = _run(["controller", "--node-id", "n2", "--peers", f"n1={HOST}:{free_port()},n2={HOST}:{free_port()}",
              "--data-dir", str(tmp_path / "n2"), "--tls-ca", c["ca"], "--tls-cert", c["cert"], "--tls-key", c["key"]])
    assert r.returncode == 2 and "this node is 'n2'" in (r.stdout + r.stderr), r.stdout + r.stderr[-2000:]


def test_a_command_pointed_at_a_broker_port_says_so_at_once(procs, tmp_path):
    """Issue 33 item 2: a broker's port given where a controller is expected used to be retried
    (UNIMPLEMENTED) until the deadline; now the first answer says what is wrong."""
    port = free_port()
    p = procs.start("b1", ["broker", "--group", "g1", "--listen", f"{HOST}:{port}", "--ha-listen",
                           f"{HOST}:{free_port()}", "--data-dir", str(tmp_path / "b1"), "--role", "master",
                           "--epoch", "1", "--broker-id", "1", "--ack-mode", "master"])
    wait_port(port, proc=p.popen)
    r = _run(["admin", "cluster-list", "--controller", f"{HOST}:{port}", "--json", "--timeout-s", "60"])
    assert r.returncode == 1, r.stdout + r.stderr[-2000:]
    err = json.loads(r.stdout.strip().splitlines()[-1])["error"]
    assert "answers, but not as a controller" in err["message"] and err["address"] == f"{HOST}:{port}"
    assert "failed after retries" not in err["message"]
