"""A throw-away MariaDB server for the tests: ``mariadb-install-db`` into a fresh directory,
``mariadbd`` on 127.0.0.1 and a port of our choosing (fsync on, InnoDB), ended by PID. Debian's
``mariadb-server`` package provides the programs. The server runs as the ``mysql`` system user
when we are root; its root account has no password and listens on loopback only."""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from autoswitch.app.launcher import end_process
from autoswitch.base.log import get_logger

_log = get_logger("mariadbserver")
DATABASE = "autoswitch"


class MariaDBNotInstalled(RuntimeError):
    pass


class MariaDBServer:
    def __init__(self, port: int, tls: dict[str, str] | None = None) -> None:
        """``tls``: {"ca", "cert", "key"} turns TLS on (the server presents that certificate);
        which accounts must use it stays the caller's (``CREATE USER ... REQUIRE SSL``)."""
        self.tls = tls
        server = shutil.which("mariadbd") or shutil.which("mysqld", path="/usr/sbin:/usr/bin")
        install = shutil.which("mariadb-install-db") or shutil.which("mysql_install_db")
        if not server or not install:
            raise MariaDBNotInstalled("MariaDB is not installed (Debian: apt-get install mariadb-server)")
        self.server: str = server
        self.install: str = install
        self.port = port
        self.dir = Path(tempfile.mkdtemp(prefix="autoswitch-mariadb-"))
        self.user = "mysql" if os.geteuid() == 0 else pwd.getpwuid(os.geteuid()).pw_name
        if os.geteuid() == 0:
            pw = pwd.getpwnam("mysql")
            os.chown(self.dir, pw.pw_uid, pw.pw_gid)
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"mysql+pymysql://root@127.0.0.1:{self.port}/{DATABASE}"

    def start(self) -> MariaDBServer:
        data = self.dir / "data"
        out = subprocess.run([self.install, "--no-defaults", f"--datadir={data}", f"--user={self.user}",
                              "--auth-root-authentication-method=normal", "--skip-test-db"],
                             capture_output=True, text=True, timeout=120)
        if out.returncode != 0:
            raise RuntimeError(f"mariadb-install-db failed: {(out.stderr or out.stdout)[-800:]}")
        with open(self.dir / "server.log", "ab") as logf:
            self.proc = subprocess.Popen(
                [self.server, "--no-defaults", f"--datadir={data}", f"--user={self.user}", f"--port={self.port}",
                 "--bind-address=127.0.0.1", f"--socket={self.dir / 'mysqld.sock'}", f"--pid-file={self.dir / 'pid'}",
                 "--innodb-flush-log-at-trx-commit=1", "--skip-name-resolve", *self._tls_args()],
                stdout=logf, stderr=subprocess.STDOUT, start_new_session=True)
        self._create_database(60.0)
        _log.info("mariadb_started", port=self.port, pid=self.proc.pid, data=str(data))
        return self

    def _tls_args(self) -> list[str]:
        """Copy the certificate and key where the server's user can read them (0600, its own)."""
        if not self.tls:
            return []
        args = []
        for opt, name in (("ssl-ca", "ca"), ("ssl-cert", "cert"), ("ssl-key", "key")):
            dst = self.dir / f"tls-{name}.pem"
            shutil.copy(self.tls[name], dst)
            os.chmod(dst, 0o600)
            if os.geteuid() == 0:
                pw = pwd.getpwnam("mysql")
                os.chown(dst, pw.pw_uid, pw.pw_gid)
            args.append(f"--{opt}={dst}")
        return args

    def execute(self, *statements: str) -> None:
        """Run statements as the server's root account (loopback, no password)."""
        import pymysql

        conn = pymysql.connect(host="127.0.0.1", port=self.port, user="root", connect_timeout=10)
        with contextlib.closing(conn), conn.cursor() as cur:
            for st in statements:
                cur.execute(st)

    def _create_database(self, timeout_s: float) -> None:
        import pymysql

        deadline = time.monotonic() + timeout_s
        while True:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"mariadbd exited with {self.proc.returncode}: see {self.dir / 'server.log'}")
            try:
                conn = pymysql.connect(host="127.0.0.1", port=self.port, user="root", connect_timeout=2)
            except pymysql.err.OperationalError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"mariadbd did not accept connections within {timeout_s} s") from None
                time.sleep(0.1)
                continue
            with contextlib.closing(conn), conn.cursor() as cur:
                cur.execute(f"CREATE DATABASE IF NOT EXISTS {DATABASE}")
            return

    def stop(self) -> None:
        """End our server (by PID) and remove its files."""
        try:
            end_process(self.proc, 30.0)
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)
