"""A real PostgreSQL server from the Debian packages, owned by this process (SPEC O2).

Synchronous on purpose, like EmbeddedNats: the `make run` supervisor and pytest session fixtures
use it outside any event loop. Layout under `data_dir`: `pgdata/` (the cluster), `run/` (unix
socket), `postgres.log`. The machine's own PostgreSQL (port 5432) is never touched: we always
start our own postmaster on a free port.

PostgreSQL refuses to run as root, so as root the cluster is owned by the `postgres` system user
and initdb/postgres run through `setpriv` (or `runuser`).

SPEC SEC2: no `trust` anywhere. Every connection, TCP or socket, authenticates with
scram-sha-256; the socket directory is 0700, owned by the server's user. The superuser `postgres`
and the services' role `jpu` (not superuser; owns the databases it uses, so migrations run) get
passwords generated at first start, kept in `secrets/` (0700) as pgpass files (0600): the DSNs
name the file (`?passfile=`), never the password, so a printed or recorded DSN leaks nothing.
A data dir initialised before (pg_hba `trust`) is upgraded at the next start.
"""

from __future__ import annotations

import glob
import os
import pwd
import re
import secrets
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
SUPERUSER = "postgres"
_PASSWORD = re.compile(r"PASSWORD '[^']*'")  # kept out of error messages
APP_ROLE = "jpu"  # the services' role: login, owns its databases, nothing more (SPEC SEC2)
# Ours, whole: scram-sha-256 for every connection; any earlier pg_hba (initdb's `trust`) goes.
PG_HBA = """# Written by JPU-Share at every start (SPEC SEC2): passwords only, never trust.
local   all  all        scram-sha-256
host    all  all  all   scram-sha-256
"""
# Tables (and their sequences) a superuser created before SEC2 go to the services' role.
_REOWN_SQL = """DO $$ DECLARE r record; BEGIN
  FOR r IN SELECT n.nspname, c.relname, c.relkind FROM pg_class c
             JOIN pg_namespace n ON n.oid = c.relnamespace
            WHERE n.nspname NOT IN ('pg_catalog', 'information_schema')
              AND n.nspname NOT LIKE 'pg_toast%' AND c.relkind IN ('r', 'p', 'v', 'm')
              AND c.relowner <> (SELECT oid FROM pg_roles WHERE rolname = 'jpu') LOOP
    EXECUTE format('ALTER %s %I.%I OWNER TO jpu',
      CASE r.relkind WHEN 'v' THEN 'VIEW' WHEN 'm' THEN 'MATERIALIZED VIEW' ELSE 'TABLE' END,
      r.nspname, r.relname);
  END LOOP;
  FOR r IN SELECT n.nspname, c.relname FROM pg_class c
             JOIN pg_namespace n ON n.oid = c.relnamespace
            WHERE c.relkind = 'S' AND n.nspname NOT IN ('pg_catalog', 'information_schema')
              AND c.relowner <> (SELECT oid FROM pg_roles WHERE rolname = 'jpu') LOOP
    EXECUTE format('ALTER SEQUENCE %I.%I OWNER TO jpu', r.nspname, r.relname);
  END LOOP;
END $$;
"""


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

    @property
    def secrets_dir(self) -> Path:
        return self.data_dir / "secrets"

    def passfile(self, role: str = APP_ROLE) -> Path:
        """The pgpass file (0600) holding `role`'s generated password."""
        return self.secrets_dir / f"postgres-{role}.pgpass"

    def dsn(self, database: str | None = None) -> str:
        """The services' DSN: role `jpu`, its password in a file the URL names."""
        return self._dsn(APP_ROLE, database)

    def admin_dsn(self, database: str | None = None) -> str:
        """The superuser's DSN (creating databases for tests, operator work); not for services."""
        return self._dsn(SUPERUSER, database)

    def _dsn(self, role: str, database: str | None) -> str:
        return (
            f"postgresql://{role}@{self.host}:{self.port}/{database or self.database}"
            f"?passfile={self.passfile(role)}"
        )

    def start(self) -> str:
        """initdb if needed, start, wait until ready (≤ ~10 s), create the database; its DSN."""
        if self.running:
            return self.dsn()
        self._bin = find_pg_bin_dir()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._prepare_socket_dir()
        self._chown_for_postgres()
        fresh = not (self.pgdata / "PG_VERSION").exists()
        new = {r: not self.passfile(r).exists() for r in (SUPERUSER, APP_ROLE)}
        passwords = {role: self._password(role) for role in (SUPERUSER, APP_ROLE)}
        if fresh:
            self._initdb()
        self._stop_stale_postmaster()
        if fresh or new[SUPERUSER] or self._hba_path.read_text() != PG_HBA:
            # A new cluster, a pre-SEC2 one (pg_hba `trust`) or a lost password file: the
            # superuser's password is set offline, in single-user mode, then our pg_hba is
            # written — no window where the server runs trusting anyone.
            self._single_user(
                f"ALTER ROLE {SUPERUSER} PASSWORD '{passwords[SUPERUSER]}'", passwords[SUPERUSER]
            )
            self._hba_path.write_text(PG_HBA)  # keeps its owner and mode (the server's, 0600)
        if self._requested_port == 0:
            self.port = free_port(self.host)
        self._spawn()
        self._wait_ready()
        self._ensure_app_role(passwords[APP_ROLE])
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
        """CREATE DATABASE name unless it exists, owned by the services' role; returns its DSN.
        An existing one (from before SEC2: the superuser's) is handed to that role."""
        self._check_name(name)
        exists = self.psql(f"SELECT 1 FROM pg_database WHERE datname = '{name}'").strip()
        if exists != "1":
            self.psql(f'CREATE DATABASE "{name}" OWNER {APP_ROLE}')
        else:
            self.psql(f'ALTER DATABASE "{name}" OWNER TO {APP_ROLE}')
            self.psql(_REOWN_SQL, database=name)
        return self.dsn(name)

    def drop_database(self, name: str) -> None:
        self._check_name(name)
        self.psql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def psql(self, sql: str, database: str = "postgres") -> str:
        """Run SQL as the superuser with the server's own psql (no event loop needed). The SQL
        goes on stdin: a password in it must not show in the process list."""
        args = ["-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-h", self.host,
                "-p", str(self.port), "-U", SUPERUSER, "-d", database, "-f", "-"]  # fmt: skip
        env = {**self._env(), "PGPASSFILE": str(self.passfile(SUPERUSER))}
        out = subprocess.run(
            [str(self._bin / "psql"), *args], input=sql, capture_output=True, text=True, env=env
        )
        if out.returncode != 0:
            shown, why = (_PASSWORD.sub("PASSWORD '...'", t) for t in (sql, out.stderr.strip()))
            raise EmbeddedPostgresError(f"psql failed: {shown!r}: {why[-2000:]}")
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
        self._socket_dir.chmod(0o700)  # SPEC SEC2: only the server's user reaches the socket

    def _password(self, role: str) -> str:
        """`role`'s password: from its pgpass file, else a new one written there (0600)."""
        path = self.passfile(role)
        if path.exists():
            return path.read_text().strip().rsplit(":", 1)[1]
        self.secrets_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.secrets_dir.chmod(0o700)
        password = secrets.token_urlsafe(24)  # [A-Za-z0-9_-]: no pgpass or SQL quoting needed
        fd = os.open(path.with_suffix(".tmp"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(f"*:*:*:{role}:{password}\n")  # any host/port: the port changes per start
        os.replace(path.with_suffix(".tmp"), path)
        return password

    @property
    def _hba_path(self) -> Path:
        return self.pgdata / "pg_hba.conf"

    def _single_user(self, sql: str, secret: str) -> None:
        """One statement in single-user mode: the server not running, no connection at all.
        `secret` (in the statement) is kept out of the error."""
        cmd = [str(self._bin / "postgres"), "--single", "-D", str(self.pgdata), "postgres"]
        out = subprocess.run(
            self._as_postgres(cmd), input=sql + "\n", capture_output=True, text=True,
            env=self._env(), cwd="/",
        )  # fmt: skip
        if out.returncode != 0 or "ERROR:" in out.stdout + out.stderr:
            raise EmbeddedPostgresError(
                f"single-user PostgreSQL failed in {self.pgdata}: "
                + (out.stdout + out.stderr)[-2000:].replace(secret, "...")
            )

    def _ensure_app_role(self, password: str) -> None:
        """The services' role: login with its password, never superuser nor role admin.
        CREATEDB: the audit (jpu.tools.replay, SPEC E6) rebuilds into a scratch database."""
        self.psql(
            f"DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '{APP_ROLE}') "
            f"THEN CREATE ROLE {APP_ROLE}; END IF; END $$;\n"
            f"ALTER ROLE {APP_ROLE} WITH LOGIN NOSUPERUSER NOCREATEROLE CREATEDB NOREPLICATION "
            f"NOBYPASSRLS PASSWORD '{password}';\n"
        )

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
        # `reject` until start() sets the password (single-user mode) and writes our pg_hba:
        # no trust line is ever written, and initdb needs no password file the server user reads.
        cmd = [str(self._bin / "initdb"), "-D", str(self.pgdata), "-U", SUPERUSER,
               "-A", "reject", "-E", "UTF8", "--locale=C"]  # fmt: skip
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
            "unix_socket_permissions": "0700",  # SPEC SEC2, besides the directory's 0700
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
