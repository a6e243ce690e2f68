"""A throwaway PostgreSQL cluster for the tests: Debian's initdb and pg_ctl, run as an
unprivileged user (the tests run as root, and PostgreSQL refuses to), its socket and data in a
temporary folder, TCP on a free port of 127.0.0.1 with a password, stopped and removed at the end.

    with PgCluster() as pg:
        url = pg.new_database()          # postgresql://kperfdiff@/db_1?host=/tmp/...&port=...
"""
from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

USER = "kperfdiff"          # the cluster's superuser (a role, not an OS user)
PASSWORD = "s3cret-pw"


def bin_dir() -> Path | None:
    """The newest installed PostgreSQL's programs (Debian keeps them out of PATH), or None."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(p.split("/")[4]))
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PgCluster:
    def __init__(self):
        self.bin = bin_dir()
        if self.bin is None:
            raise RuntimeError("PostgreSQL's initdb is not installed (Debian: apt-get install postgresql)")
        self.tmp = Path(tempfile.mkdtemp(prefix="kperfdiff-pg-"))
        self.data = self.tmp / "data"
        self.sock = self.tmp / "sock"
        self.port = _free_port()
        self.runas: list[str] = []
        self.dbs = 0
        if os.geteuid() == 0:               # PostgreSQL will not run as root: run it as nobody
            nobody = pwd.getpwnam("nobody")
            os.chmod(self.tmp, 0o755)
            self.runas = ["runuser", "-u", "nobody", "--"]
            self._owner = (nobody.pw_uid, nobody.pw_gid)
        else:
            self._owner = None

    def _run(self, *argv, **kw):
        return subprocess.run([*self.runas, *map(str, argv)], check=True, capture_output=True, text=True,
                              cwd=self.tmp, **kw)

    def start(self) -> "PgCluster":
        self.sock.mkdir()
        pwfile = self.tmp / "pw"
        pwfile.write_text(PASSWORD + "\n")
        if self._owner:
            for p in (self.tmp, self.sock, pwfile):
                os.chown(p, *self._owner)
        self._run(self.bin / "initdb", "-D", self.data, "-U", USER, "--pwfile", pwfile, "--auth-local=trust",
                  "--auth-host=scram-sha-256", "-E", "UTF8", "--locale=C.UTF-8", "--no-sync")
        pwfile.unlink()
        self._run(self.bin / "pg_ctl", "-D", self.data, "-l", self.tmp / "log", "-w", "-t", "60", "start", "-o",
                  f"-p {self.port} -k {self.sock} -c listen_addresses=127.0.0.1 -c fsync=off "
                  f"-c synchronous_commit=off -c full_page_writes=off -c max_connections=50")
        return self

    def stop(self) -> None:
        try:
            self._run(self.bin / "pg_ctl", "-D", self.data, "-m", "immediate", "-w", "stop")
        except (subprocess.CalledProcessError, OSError):
            pass
        shutil.rmtree(self.tmp, ignore_errors=True)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    def url(self, db: str = "postgres", **query) -> str:
        """A URL reaching ``db`` through the socket (no password: local connections are trusted)."""
        q = "&".join([f"host={self.sock}", f"port={self.port}", *(f"{k}={v}" for k, v in query.items())])
        return f"postgresql://{USER}@/{db}?{q}"

    def tcp_url(self, db: str = "postgres", password: str = PASSWORD) -> str:
        return f"postgresql://{USER}:{password}@127.0.0.1:{self.port}/{db}"

    def psql(self, sql: str, db: str = "postgres") -> str:
        return subprocess.run([self.bin / "psql", "-X", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-h", self.sock,
                               "-p", str(self.port), "-U", USER, "-d", db, "-c", sql],
                              check=True, capture_output=True, text=True).stdout

    def new_database(self, **query) -> str:
        """A new empty database; its URL."""
        self.dbs += 1
        name = f"db_{self.dbs}"
        self.psql(f"CREATE DATABASE {name}")
        return self.url(name, **query)
