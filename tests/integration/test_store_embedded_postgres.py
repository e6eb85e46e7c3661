"""The embedded PostgreSQL of SPEC O2: a real server on a free port, data kept across restarts."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from urllib.parse import urlsplit

import asyncpg
import pytest

from jpu.embedded.postgres import EmbeddedPostgres, EmbeddedPostgresError, find_pg_bin_dir


@pytest.fixture
def data_root():
    root = Path(tempfile.mkdtemp(prefix="jpu-test-embpg-"))
    root.chmod(0o755)  # as root, the server runs as `postgres` and must reach its data dir
    yield root
    shutil.rmtree(root, ignore_errors=True)


async def test_O2_embedded_postgres_starts_restarts_and_keeps_data(data_root: Path) -> None:
    assert (find_pg_bin_dir() / "initdb").exists()
    with EmbeddedPostgres(data_root / "pg", durable=False) as pg:
        dsn = pg.dsn()
        assert pg.port not in (0, 5432)  # never the machine's own server
        conn = await asyncpg.connect(dsn)
        await conn.execute("CREATE TABLE kept (x int); INSERT INTO kept VALUES (42)")
        await conn.close()
        other = pg.create_database("second_db")
        assert urlsplit(other).path == "/second_db"
        assert pg.create_database("second_db") == other  # idempotent
    assert not pg.running

    with EmbeddedPostgres(data_root / "pg", durable=False) as again:
        conn = await asyncpg.connect(again.dsn())
        assert await conn.fetchval("SELECT x FROM kept") == 42
        await conn.close()
        again.drop_database("second_db")
        assert (
            again.psql("SELECT count(*) FROM pg_database WHERE datname = 'second_db'").strip()
            == "0"
        )


def test_embedded_postgres_rejects_bad_database_names(data_root: Path) -> None:
    pg = EmbeddedPostgres(data_root / "pg")
    with pytest.raises(ValueError):
        pg.create_database('x"; DROP DATABASE jpu; --')


def test_embedded_postgres_reports_a_failed_start(data_root: Path) -> None:
    with EmbeddedPostgres(data_root / "pg", durable=False) as first:
        clash = EmbeddedPostgres(data_root / "other", port=first.port, durable=False)
        with pytest.raises(EmbeddedPostgresError, match="log tail"):
            clash.start()  # the port is taken: a clear error with the server's log
