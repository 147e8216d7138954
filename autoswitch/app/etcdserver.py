"""A throw-away single-member etcd for the playground and the tests: Debian's ``etcd-server``
binary on 127.0.0.1, a fresh data directory, ended by PID (SIGTERM, then SIGKILL).
Election timeout 500 ms, so its smallest lease TTL is 1 s (etcd raises a shorter TTL to
1.5 x the election timeout)."""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from autoswitch.app.launcher import end_process
from autoswitch.base.log import get_logger

_log = get_logger("etcdserver")


class EtcdNotInstalled(RuntimeError):
    pass


class EtcdServer:
    def __init__(self, port: int, peer_port: int, tls: dict[str, str] | None = None) -> None:
        """``tls``: {"ca", "cert", "key"} serves clients over TLS and requires client certificates
        (--client-cert-auth: with auth enabled, a certificate's CN is its RBAC user)."""
        self.tls = tls
        exe = shutil.which("etcd")
        if not exe:
            raise EtcdNotInstalled("etcd is not installed (Debian: apt-get install etcd-server)")
        self.exe = exe
        self.port, self.peer_port = port, peer_port
        self.dir = Path(tempfile.mkdtemp(prefix="autoswitch-etcd-"))
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"etcd://127.0.0.1:{self.port}"

    def start(self) -> EtcdServer:
        scheme = "https" if self.tls else "http"
        client, peer = f"{scheme}://127.0.0.1:{self.port}", f"http://127.0.0.1:{self.peer_port}"
        secure = (["--cert-file", self.tls["cert"], "--key-file", self.tls["key"], "--trusted-ca-file",
                   self.tls["ca"], "--client-cert-auth"] if self.tls else [])
        with open(self.dir / "etcd.log", "ab") as logf:
            self.proc = subprocess.Popen(
                [self.exe, "--name", "e1", "--data-dir", str(self.dir / "data"), "--listen-client-urls", client,
                 "--advertise-client-urls", client, "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
                 "--initial-cluster", f"e1={peer}", "--heartbeat-interval", "50", "--election-timeout", "500",
                 "--log-level", "error", *secure],
                stdout=logf, stderr=subprocess.STDOUT, start_new_session=True)
        self._wait_listening(30.0)
        _log.info("etcd_started", port=self.port, pid=self.proc.pid, data=str(self.dir))
        return self

    def _wait_listening(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"etcd exited with {self.proc.returncode}: see {self.dir / 'etcd.log'}")
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                return
            time.sleep(0.05)
        raise RuntimeError(f"etcd did not listen on {self.port} within {timeout_s} s")

    def stop(self) -> None:
        """End our etcd (by PID) and remove its files."""
        try:
            end_process(self.proc, 10.0)
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)
