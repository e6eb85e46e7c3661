"""SPEC SEC2 for PostgreSQL: the finding — a job whose working directory was the embedded server's
socket directory (0755, socket 0777, pg_hba `trust`) connected as `postgres` and inserted an admin
token. Now: no connection without a password (socket or TCP), the socket directory private to the
server's user, the services on their own role that is not superuser, and no password committed
in compose/ or k8s/. A real embedded server throughout."""

from __future__ import annotations

import os
import pwd
import re
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import asyncpg
import pytest
import yaml

from jpu.embedded.postgres import PG_HBA, EmbeddedPostgres, find_pg_bin_dir
from jpu.store.db import create_pool, migrate

ROOT = Path(__file__).resolve().parents[2]
REFUSED = (asyncpg.InvalidPasswordError, asyncpg.InvalidAuthorizationSpecificationError)


def _root() -> Path:
    root = Path(tempfile.mkdtemp(prefix="jpu-test-sec2-"))
    root.chmod(0o755)  # as root, the server runs as `postgres` and must reach its data dir
    return root


@pytest.fixture(scope="module")
def pg() -> Iterator[EmbeddedPostgres]:
    root = _root()
    server = EmbeddedPostgres(root / "pg", durable=False)
    server.start()
    try:
        yield server
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)


def _server_user() -> str:
    return "postgres" if os.geteuid() == 0 else pwd.getpwuid(os.geteuid()).pw_name


async def _refused(**where: object) -> str:
    with pytest.raises(REFUSED) as e:
        await asyncpg.connect(user="postgres", database="postgres", password=None, **where)
    return str(e.value)


async def test_SEC2_a_connection_without_password_is_refused_on_tcp_and_socket(
    pg: EmbeddedPostgres, monkeypatch: pytest.MonkeyPatch
) -> None:
    for var in ("PGPASSWORD", "PGPASSFILE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("PGPASSFILE", "/nonexistent")  # no ~/.pgpass either
    assert "password" in await _refused(host=pg.host, port=pg.port)
    assert "password" in await _refused(host=str(pg._socket_dir), port=pg.port)
    # the services' role needs its password too
    with pytest.raises(REFUSED):
        await asyncpg.connect(host=pg.host, port=pg.port, user="jpu", database="jpu")
    hba = (pg.pgdata / "pg_hba.conf").read_text()
    assert hba == PG_HBA and not re.search(r"^\s*[^#].*\btrust\b", hba, re.MULTILINE)


def test_SEC2_the_socket_directory_is_private_to_the_server_user(pg: EmbeddedPostgres) -> None:
    st = pg._socket_dir.stat()
    assert stat.S_IMODE(st.st_mode) == 0o700
    assert pwd.getpwuid(st.st_uid).pw_name == _server_user()
    if os.geteuid() != 0:
        return
    # What a job's account meets there (the attack): not even the socket's name.
    psql = str(find_pg_bin_dir() / "psql")
    as_nobody = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", "--"]
    r = subprocess.run(
        [*as_nobody, psql, "-X", "-h", str(pg._socket_dir), "-p", str(pg.port), "-U", "postgres",
         "-c", "SELECT 1"],
        capture_output=True, text=True, cwd="/", env={"PATH": os.environ["PATH"]},
    )  # fmt: skip
    assert r.returncode != 0 and "Permission denied" in r.stderr, r.stderr


async def test_SEC2_the_services_role_is_not_superuser(pg: EmbeddedPostgres) -> None:
    dsn = pg.dsn()
    assert urlsplit(dsn).password is None  # a printed or recorded DSN holds no password
    for f in (pg.passfile("jpu"), pg.passfile("postgres")):
        assert stat.S_IMODE(f.stat().st_mode) == 0o600
    assert stat.S_IMODE(pg.secrets_dir.stat().st_mode) == 0o700
    conn = await asyncpg.connect(dsn)
    try:
        assert await conn.fetchval("SELECT current_user") == "jpu"
        assert await conn.fetchval("SELECT rolsuper FROM pg_roles WHERE rolname = 'jpu'") is False
        # (it may create databases: the audit's scratch one, SPEC E6 — not a way to superuser)
        for sql in (
            "CREATE ROLE intruder LOGIN",
            "ALTER ROLE jpu SUPERUSER",
            "ALTER ROLE postgres PASSWORD 'x'",
            "COPY (SELECT 1) TO PROGRAM 'true'",
        ):
            with pytest.raises(asyncpg.InsufficientPrivilegeError):
                await conn.execute(sql)
    finally:
        await conn.close()
    pool = await create_pool(dsn)  # still enough for the platform: the migrations apply
    try:
        await migrate(pool)
        assert await pool.fetchval("SELECT count(*) FROM api_tokens") == 0
    finally:
        await pool.close()


async def test_SEC2_a_data_dir_from_before_is_upgraded_at_start() -> None:
    root = _root()
    try:
        server = EmbeddedPostgres(root / "pg", durable=False)
        server.start()
        server.psql("CREATE TABLE old (id serial PRIMARY KEY, x int)", database="jpu")
        server.stop()
        # What main left behind: initdb's trust, an open socket dir, no password files.
        (server.pgdata / "pg_hba.conf").write_text(
            "local all all trust\nhost all all 127.0.0.1/32 trust\n"
        )
        shutil.rmtree(server.secrets_dir)
        (root / "pg" / "run").chmod(0o755)

        again = EmbeddedPostgres(root / "pg", durable=False)
        again.start()
        try:
            assert (again.pgdata / "pg_hba.conf").read_text() == PG_HBA
            assert stat.S_IMODE((root / "pg" / "run").stat().st_mode) == 0o700
            assert "password" in await _refused(host=again.host, port=again.port)
            conn = await asyncpg.connect(again.dsn())  # the superuser's table is the role's now
            try:
                await conn.execute("INSERT INTO old (x) VALUES (1); ALTER TABLE old ADD y int")
                assert await conn.fetchval("SELECT count(*) FROM old") == 1
            finally:
                await conn.close()
        finally:
            again.stop()
    finally:
        shutil.rmtree(root, ignore_errors=True)


COMMITTED_DEFAULTS = ("jpu-dev-only", "change-me")


def test_SEC2_no_database_password_is_committed_in_compose_or_k8s() -> None:
    files = [p for d in ("compose", "k8s") for p in (ROOT / d).rglob("*") if p.is_file()]
    files.append(ROOT / "scripts" / "cluster")
    for path in files:
        text = path.read_text(errors="replace")
        for literal in COMMITTED_DEFAULTS:
            assert literal not in text, f"{path}: {literal}"
    for path in (ROOT / "k8s").glob("*.yaml"):
        for doc in yaml.safe_load_all(path.read_text()):
            assert not (doc and doc.get("kind") == "Secret"), f"{path}: a Secret with values"
    compose = yaml.safe_load((ROOT / "compose" / "docker-compose.yml").read_text())
    env = compose["services"]["postgres"]["environment"]
    for key in ("POSTGRES_PASSWORD", "JPU_APP_PASSWORD"):  # from the generated file, or nothing
        assert re.fullmatch(r"\$\{\w+:\?[^}]+\}", env[key]), env[key]
    assert env["JPU_APP_USER"] != env["POSTGRES_USER"]  # the services are not the superuser
    url = compose["services"]["gateway"]["environment"]["JPU_DATABASE_URL"]
    assert url.startswith("postgresql://jpu:${JPU_PG_PASSWORD:?")  # the role, its password
