"""A real PostgreSQL server for tests: Debian's package, a throwaway data directory, a private socket.

Started with ``initdb`` and ``pg_ctl`` in a fresh temporary directory, listening on no TCP port (only a Unix
socket in that directory), trusted local connections, stopped and deleted afterwards. PostgreSQL refuses to run
as root, so as root the server runs as the ``postgres`` user the Debian package creates; as anyone else it runs
as that user. Every test gets its own database (``fresh_url``), so tests never see each other's rows.

``.ci/run`` installs the package (``apt-get install postgresql``) when it is missing; elsewhere the tests that
need it skip and say how to install it.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

INSTALL_HINT = "install PostgreSQL (Debian: apt-get install -y postgresql) to run the store's tests on it"


def find_bin_dir() -> Path | None:
    """Debian puts the server programs under /usr/lib/postgresql/<major>/bin (not on PATH); newest wins."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(Path(p).parent.parent.name))
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


def _free_port() -> int:
    # The port names the socket file (.s.PGSQL.<port>); a free TCP port keeps it distinct from a system server.
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class PostgresServer:
    """One running server; ``url(db)`` is how cuberay's platform file names a database on it."""

    bin_dir: Path
    root: Path
    port: int
    user: str | None  # the OS user the server runs as (None: this process's)
    _databases: int = 0

    @property
    def data(self) -> Path:
        return self.root / "data"

    def _run(self, *argv: str) -> subprocess.CompletedProcess:
        kwargs = {"user": self.user} if self.user else {}
        return subprocess.run(argv, check=True, capture_output=True, text=True, timeout=120, cwd=self.root,
                              **kwargs)

    @classmethod
    def start(cls, bin_dir: Path, durable: bool = False) -> "PostgresServer":
        """A new server; ``durable`` keeps fsync on (a benchmark's figures), tests run without it."""
        as_root = os.geteuid() == 0
        # Under /tmp, not $TMPDIR: CI's TMPDIR is a root-only (0700) directory the server user cannot enter.
        root = Path(tempfile.mkdtemp(prefix="cuberay-pg-", dir="/tmp"))
        user = "postgres" if as_root else None
        if as_root:
            entry = pwd.getpwnam("postgres")
            os.chown(root, entry.pw_uid, entry.pw_gid)
        server = cls(bin_dir, root, _free_port(), user)
        server._run(str(bin_dir / "initdb"), "-D", str(server.data), "-U", "postgres", "--auth=trust",
                    "--no-sync", "-E", "UTF8")
        server._run(str(bin_dir / "pg_ctl"), "-D", str(server.data), "-l", str(root / "server.log"), "-w",
                    "-t", "60", "start", "-o",
                    f"-k {root} -p {server.port} -c listen_addresses='' -c fsync={'on' if durable else 'off'} "
                    f"-c max_connections=200")
        return server

    def url(self, database: str = "postgres") -> str:
        return f"postgresql+psycopg://postgres@/{database}?host={self.root}&port={self.port}"

    def psql(self, sql: str, database: str = "postgres") -> str:
        return self._run(str(self.bin_dir / "psql"), "-h", str(self.root), "-p", str(self.port), "-U", "postgres",
                         "-d", database, "-v", "ON_ERROR_STOP=1", "-qAtc", sql).stdout

    def create_database(self, prefix: str = "t") -> str:
        """A new empty database on this server; its name."""
        self._databases += 1
        name = f"{prefix}_{self._databases}"
        self.psql(f"CREATE DATABASE {name}")
        return name

    def fresh_url(self, prefix: str = "t") -> str:
        """The URL of a new empty database on this server."""
        return self.url(self.create_database(prefix))

    def stop(self) -> None:
        try:
            self._run(str(self.bin_dir / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "-w", "stop")
        finally:
            shutil.rmtree(self.root, ignore_errors=True)
