"""A real PostgreSQL server from the Debian packages, owned by this process (SPEC O2).

Synchronous on purpose, like EmbeddedNats: the `make run` supervisor and pytest session fixtures
use it outside any event loop. Layout under `data_dir`: `pgdata/` (the cluster), `run/` (unix
socket), `postgres.log`. The machine's own PostgreSQL (port 5432) is never touched: we always
start our own postmaster on a free port.

PostgreSQL refuses to run as root, so as root the cluster is owned by the `postgres` system user
and initdb/postgres run through `setpriv` (or `runuser`).
"""

from __future__ import annotations

import glob
import os
import pwd
import re
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from jpu.embedded.base import EmbeddedServer, free_port

_START_TIMEOUT_S = 10.0
_STOP_TIMEOUT_S = 15.0
_SOCKET_PATH_MAX = 100  # sun_path is 108 bytes; ".s.PGSQL.<port>" needs ~20 of them
_DB_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")


class EmbeddedPostgresError(RuntimeError):
    """The embedded server could not be found, started or reached."""


def find_pg_bin_dir() -> Path:
    """Directory holding initdb + postgres: PATH first, then /usr/lib/postgresql/<highest>/bin."""
    on_path = shutil.which("initdb")
    if on_path and shutil.which("postgres"):
        return Path(os.path.realpath(on_path)).parent
    candidates = []
    for d in glob.glob("/usr/lib/postgresql/*/bin"):
        version = Path(d).parent.name
        if (Path(d) / "initdb").exists() and (Path(d) / "postgres").exists():
            candidates.append((float(version) if version.replace(".", "").isdigit() else 0.0, d))
    if candidates:
        return Path(max(candidates)[1])
    raise EmbeddedPostgresError(
        "PostgreSQL server binaries (initdb, postgres) not found on PATH nor under "
        "/usr/lib/postgresql/*/bin; run `scripts/install-deps` "
        "(it installs the `postgresql` package)"
    )


def _ensure_postgres_user() -> pwd.struct_passwd:
    try:
        return pwd.getpwnam("postgres")
    except KeyError:
        subprocess.run(
            ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", "postgres"],
            check=True,
            capture_output=True,
        )
        return pwd.getpwnam("postgres")


class EmbeddedPostgres(EmbeddedServer):
    """initdb (once) + a `postgres` child process on `host:port` (port 0 = a free one)."""

    def __init__(
        self,
        data_dir: Path,
        port: int = 0,
        host: str = "127.0.0.1",
        *,
        durable: bool = True,
        database: str = "jpu",
    ) -> None:
        self.data_dir = Path(data_dir).absolute()
        self.host = host
        self.port = port
        self._requested_port = port  # 0: a free port picked at every start
        self.database = database
        self.durable = durable  # fsync + synchronous_commit; tests may turn it off for speed
        self.pgdata = self.data_dir / "pgdata"
        self._log_path = self.data_dir / "postgres.log"
        self._proc: subprocess.Popen[bytes] | None = None
        self._bin = Path()
        self._socket_dir = self.data_dir / "run"

    # --- public --------------------------------------------------------------------------------

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def dsn(self, database: str | None = None) -> str:
        return f"postgresql://postgres@{self.host}:{self.port}/{database or self.database}"

    def start(self) -> str:
        """initdb if needed, start, wait until ready (≤ ~10 s), create the database; its DSN."""
        if self.running:
            return self.dsn()
        self._bin = find_pg_bin_dir()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._prepare_socket_dir()
        self._chown_for_postgres()
        if not (self.pgdata / "PG_VERSION").exists():
            self._initdb()
        self._stop_stale_postmaster()
        if self._requested_port == 0:
            self.port = free_port(self.host)
        self._spawn()
        self._wait_ready()
        self.create_database(self.database)
        return self.dsn()

    def stop(self) -> None:
        """Fast shutdown (SIGINT), then immediate (SIGQUIT), then SIGKILL. Safe to call twice."""
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        for sig in (signal.SIGINT, signal.SIGQUIT, signal.SIGKILL):
            proc.send_signal(sig)
            try:
                proc.wait(timeout=_STOP_TIMEOUT_S)
                return
            except subprocess.TimeoutExpired:
                continue

    def create_database(self, name: str) -> str:
        """CREATE DATABASE name unless it exists; returns its DSN."""
        self._check_name(name)
        exists = self.psql(f"SELECT 1 FROM pg_database WHERE datname = '{name}'").strip()
        if exists != "1":
            self.psql(f'CREATE DATABASE "{name}"')
        return self.dsn(name)

    def drop_database(self, name: str) -> None:
        self._check_name(name)
        self.psql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def psql(self, sql: str, database: str = "postgres") -> str:
        """Run one statement with the server's own psql (no event loop needed)."""
        args = ["-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-h", self.host,
                "-p", str(self.port), "-U", "postgres", "-d", database, "-c", sql]  # fmt: skip
        out = subprocess.run(
            [str(self._bin / "psql"), *args], capture_output=True, text=True, env=self._env()
        )
        if out.returncode != 0:
            raise EmbeddedPostgresError(f"psql failed: {sql!r}: {out.stderr.strip()}")
        return out.stdout

    # --- steps ---------------------------------------------------------------------------------

    @staticmethod
    def _check_name(name: str) -> None:
        if not _DB_NAME.match(name):
            raise ValueError(f"database name must match {_DB_NAME.pattern}: {name!r}")

    def _prepare_socket_dir(self) -> None:
        if len(str(self._socket_dir)) > _SOCKET_PATH_MAX:  # deep data dirs: short fallback
            self._socket_dir = Path(tempfile.mkdtemp(prefix="jpu-pg-"))
        self._socket_dir.mkdir(parents=True, exist_ok=True)

    def _chown_for_postgres(self) -> None:
        """As root: give the cluster to `postgres` and check it can reach data_dir."""
        if os.geteuid() != 0:
            return
        pw = _ensure_postgres_user()
        for path in (self.data_dir, self._socket_dir):
            os.chown(path, pw.pw_uid, pw.pw_gid)
        if self._log_path.exists():
            os.chown(self._log_path, pw.pw_uid, pw.pw_gid)
        for parent in self.data_dir.parents:
            if not os.stat(parent).st_mode & 0o001:
                raise EmbeddedPostgresError(
                    f"{parent} is not searchable by the postgres user (mode o-x); choose a "
                    f"data_dir whose parents are world-searchable, e.g. under /tmp or the repo"
                )

    def _as_postgres(self, cmd: list[str]) -> list[str]:
        """Prefix running `cmd` as the postgres user when we are root; die with our process."""
        if os.geteuid() != 0:
            setpriv = shutil.which("setpriv")
            return [setpriv, "--pdeathsig", "INT", "--", *cmd] if setpriv else cmd
        if shutil.which("setpriv"):
            return ["setpriv", "--reuid=postgres", "--regid=postgres", "--init-groups",
                    "--pdeathsig", "INT", "--", *cmd]  # fmt: skip
        return ["runuser", "-u", "postgres", "--", *cmd]

    def _env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
        env["LC_ALL"] = "C"
        return env

    def _initdb(self) -> None:
        cmd = [str(self._bin / "initdb"), "-D", str(self.pgdata), "-U", "postgres",
               "-A", "trust", "-E", "UTF8", "--locale=C"]  # fmt: skip
        if not self.durable:
            cmd.append("--no-sync")
        out = subprocess.run(
            self._as_postgres(cmd), capture_output=True, text=True, env=self._env(), cwd="/"
        )
        if out.returncode != 0:
            raise EmbeddedPostgresError(f"initdb failed in {self.pgdata}:\n{out.stderr[-2000:]}")

    def _stop_stale_postmaster(self) -> None:
        """A postmaster left running from an earlier (killed) run holds the data dir: stop it."""
        if not (self.pgdata / "postmaster.pid").exists():
            return
        subprocess.run(
            self._as_postgres(
                [
                    str(self._bin / "pg_ctl"),
                    "stop",
                    "-D",
                    str(self.pgdata),
                    "-m",
                    "fast",
                    "-w",
                    "-t",
                    "15",
                ]
            ),
            capture_output=True,
            env=self._env(),
            cwd="/",
        )

    def _spawn(self) -> None:
        settings = {
            "listen_addresses": self.host,
            "port": str(self.port),
            "unix_socket_directories": str(self._socket_dir),
            "shared_buffers": "32MB",
            "max_connections": "200",
            "fsync": "on" if self.durable else "off",
            "synchronous_commit": "on" if self.durable else "off",
            "full_page_writes": "on" if self.durable else "off",
            "logging_collector": "off",
        }
        cmd = [str(self._bin / "postgres"), "-D", str(self.pgdata)]
        for key, value in settings.items():
            cmd += ["-c", f"{key}={value}"]
        with open(self._log_path, "ab") as log:
            self._proc = subprocess.Popen(
                self._as_postgres(cmd),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=self._env(),
                cwd="/",
                start_new_session=True,  # a Ctrl-C on the supervisor is handled by stop()
            )

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + _START_TIMEOUT_S
        while time.monotonic() < deadline:
            assert self._proc is not None
            if self._proc.poll() is not None:
                self._fail(f"postgres exited with code {self._proc.returncode}")
            ready = subprocess.run(
                # Through our own socket dir: another server on the port must not look ready.
                [
                    str(self._bin / "pg_isready"),
                    "-q",
                    "-h",
                    str(self._socket_dir),
                    "-p",
                    str(self.port),
                ],
                env=self._env(),
            )
            if ready.returncode == 0:
                return
            time.sleep(0.1)
        self.stop()
        self._fail(f"postgres not ready on {self.host}:{self.port} within {_START_TIMEOUT_S:.0f} s")

    def _fail(self, why: str) -> None:
        self._proc = None
        raise EmbeddedPostgresError(f"{why}; log tail ({self._log_path}):\n{self.log_tail()}")
