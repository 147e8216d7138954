"""A throw-away PostgreSQL server for the playground, the tests and the benchmarks: ``initdb`` into a
fresh directory, ``pg_ctl start`` on 127.0.0.1 and a port of our choosing, ``pg_ctl stop`` at the
end. Debian's ``postgresql`` package provides the programs (under /usr/lib/postgresql/<v>/bin).
PostgreSQL refuses to run as root; as root the server runs as the ``postgres`` system user."""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import tempfile
from pathlib import Path

from autoswitch.base.log import get_logger

_log = get_logger("pgserver")
USER = "autoswitch"          # the database superuser initdb creates (trust auth on loopback only)


class PostgresNotInstalled(RuntimeError):
    pass


def pg_bin() -> Path:
    found = shutil.which("pg_ctl")
    if found:
        return Path(found).parent
    dirs = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"), key=lambda p: int(p.split("/")[4]))
    if not dirs:
        raise PostgresNotInstalled("PostgreSQL is not installed (Debian: apt-get install postgresql)")
    return Path(dirs[-1]).parent


class PostgresServer:
    def __init__(self, port: int, tls: dict[str, str] | None = None) -> None:
        """``tls``: {"ca", "cert", "key"} turns TLS on (ssl = on with that certificate); the
        pg_hba rules stay the caller's (``hba``)."""
        self.tls = tls
        self.port = port
        self.bin = pg_bin()
        self.dir = Path(tempfile.mkdtemp(prefix="autoswitch-pg-"))
        self.data = self.dir / "data"
        self._as: list[str] = []
        if os.geteuid() == 0:
            pw = pwd.getpwnam("postgres")
            os.chown(self.dir, pw.pw_uid, pw.pw_gid)
            self._as = ["runuser", "-u", "postgres", "--"]

    @property
    def url(self) -> str:
        return f"postgresql+psycopg://{USER}@127.0.0.1:{self.port}/postgres"

    def _run(self, *args: str) -> None:
        out = subprocess.run([*self._as, *args], capture_output=True, text=True, timeout=120)
        if out.returncode != 0:
            raise RuntimeError(f"{Path(args[0]).name} failed ({out.returncode}): {(out.stderr or out.stdout)[-800:]}")

    def start(self) -> PostgresServer:
        if not self.data.exists():
            self._run(str(self.bin / "initdb"), "-D", str(self.data), "-U", USER, "--auth=trust", "-E", "UTF8",
                      "--no-instructions")
            if self.tls:
                self._install_tls()
        self._pg_ctl("start")
        _log.info("postgres_started", port=self.port, data=str(self.data))
        return self

    def _install_tls(self) -> None:
        assert self.tls is not None
        for name, src in (("server.crt", self.tls["cert"]), ("server.key", self.tls["key"]), ("root.crt", self.tls["ca"])):
            dst = self.data / name
            shutil.copy(src, dst)
            os.chmod(dst, 0o600)
            if self._as:
                pw = pwd.getpwnam("postgres")
                os.chown(dst, pw.pw_uid, pw.pw_gid)
        with open(self.data / "postgresql.conf", "a") as f:
            f.write("ssl = on\nssl_cert_file = 'server.crt'\nssl_key_file = 'server.key'\nssl_ca_file = 'root.crt'\n")

    def hba(self, lines: list[str]) -> None:
        """Replace pg_hba.conf (first match wins) and reload."""
        (self.data / "pg_hba.conf").write_text("\n".join(["local all all trust", *lines]) + "\n")
        self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "reload")

    def _pg_ctl(self, action: str) -> None:
        opts = f"-p {self.port} -c listen_addresses=127.0.0.1 -k {self.dir} -c fsync=on"
        args = [str(self.bin / "pg_ctl"), "-D", str(self.data), "-w", "-t", "60", "-l", str(self.dir / "server.log")]
        if action in ("start", "restart"):
            args += ["-o", opts]
        if action in ("stop", "restart"):
            args += ["-m", "fast"]
        self._run(*args, action)

    def restart(self) -> None:
        self._pg_ctl("restart")

    def stop(self) -> None:
        """Stop the server (our own data directory's postmaster) and remove its files."""
        try:
            if (self.data / "postmaster.pid").exists():
                self._pg_ctl("stop")
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)
