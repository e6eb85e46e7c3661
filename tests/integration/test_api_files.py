"""SPEC §8 `GET /v1/jobs/{id}/files` (X2, M5) over real HTTP against the whole stack in one
process: real NATS JetStream + PostgreSQL, the gateway under uvicorn, and jobs that are real
processes of the users' own accounts writing into their JOB_OUTPUT_DIR — files, a directory, and
the links a hostile job plants (to /etc/shadow, to another user's output)."""

from __future__ import annotations

import asyncio
from typing import Any

import asyncpg
import httpx

from jpu.testing.api import add_lab_admins, assert_error, bearer
from jpu.testing.stack import NUMBERS, Stack, ended, logs_stack, wait_job

WRITER = """mkdir -p "$JOB_OUTPUT_DIR/results/deep"
seq 1 20000 > "$JOB_OUTPUT_DIR/results/numbers.txt"
printf 'a\\377\\000b' > "$JOB_OUTPUT_DIR/results/bin.dat"
printf 'step,loss\\n1,0.5\\n' > "$JOB_OUTPUT_DIR/metrics.csv"
ln -s /etc/shadow "$JOB_OUTPUT_DIR/shadow"
ln -s "$THEIRS" "$JOB_OUTPUT_DIR/theirs"
ln -s "$THEIRS/secret.txt" "$JOB_OUTPUT_DIR/theirs-secret"
ln -s results/numbers.txt "$JOB_OUTPUT_DIR/inside"
mkfifo "$JOB_OUTPUT_DIR/pipe"
echo written
"""


async def listing(s: Stack, user: str, job_id: str, **params: Any) -> httpx.Response:
    return await s.client.get(f"/v1/jobs/{job_id}/files", params=params, headers=bearer(user))


async def get(
    s: Stack,
    user: str,
    job_id: str,
    path: str,
    headers: dict[str, str] | None = None,
    **params: Any,
) -> httpx.Response:
    return await s.client.get(
        f"/v1/jobs/{job_id}/files/{path}",
        params=params,
        headers={**bearer(user), **(headers or {})},
    )


async def _jobs(s: Stack) -> tuple[str, str]:
    """bob's job leaves a secret; alice's writes her files and links to bob's output."""
    bob = await s.submit("bcg-bob", 'echo bobs-secret > "$JOB_OUTPUT_DIR/secret.txt"')
    theirs = (await wait_job(s, "bcg-bob", bob, ended))["output_dir"]
    alice = await s.submit("bcg-alice", WRITER, env={"THEIRS": theirs})
    done = await wait_job(s, "bcg-alice", alice, ended)
    assert done["state"] == "COMPLETED", done
    return alice, bob


def _refused_path(r: httpx.Response, why: str) -> None:
    """422 VALIDATION_ERROR naming `path` (SPEC §8)."""
    err = assert_error(r, 422, "VALIDATION_ERROR")
    assert err["details"]["field"] == "path" and err["message"].startswith("path"), err
    assert why in err["message"], err


async def test_files_owner_lists_and_downloads_whole_and_ranged(
    nats_url: str, pool: asyncpg.Pool, pg_dsn: str
) -> None:
    async with logs_stack(nats_url, pool, pg_dsn) as s:
        job, _ = await _jobs(s)
        r = await listing(s, "bcg-alice", job)
        assert r.status_code == 200, r.text
        body = r.json()
        assert (body["job_id"], body["attempt"], body["path"], body["ended"]) == (job, 1, "", True)
        entries = {e["name"]: e for e in body["entries"]}
        assert [e["name"] for e in body["entries"]] == sorted(entries)
        assert entries["metrics.csv"]["type"] == "file" and entries["metrics.csv"]["size"] == 16
        assert entries["results"]["type"] == "dir" and entries["results"]["size"] is None
        assert entries["stdout"]["size"] == len(b"written\n")
        for link in ("shadow", "theirs", "theirs-secret", "inside"):
            assert entries[link]["type"] == "symlink" and entries[link]["size"] is None, link
        assert entries["pipe"]["type"] == "other"
        assert all(isinstance(e["mtime"], float) and e["mtime"] > 1.7e9 for e in entries.values())
        assert body["next_cursor"] is None

        sub = (await listing(s, "bcg-alice", job, path="results/")).json()
        assert sub["path"] == "results"
        assert [(e["name"], e["type"], e["size"]) for e in sub["entries"]] == [
            ("bin.dat", "file", 4), ("deep", "dir", None), ("numbers.txt", "file", len(NUMBERS)),
        ]  # fmt: skip
        page = (await listing(s, "bcg-alice", job, limit=2)).json()
        assert len(page["entries"]) == 2 and page["next_cursor"] == page["entries"][1]["name"]
        rest = (await listing(s, "bcg-alice", job, cursor=page["next_cursor"])).json()
        assert [e["name"] for e in page["entries"] + rest["entries"]] == list(entries)

        # the whole file: bytes as written, its size and mtime in the headers
        whole = await get(s, "bcg-alice", job, "results/numbers.txt")
        assert whole.status_code == 200 and whole.content == NUMBERS
        h = whole.headers
        assert h["content-type"] == "application/octet-stream"
        assert h["content-length"] == h["jpu-file-size"] == str(len(NUMBERS))
        assert h["accept-ranges"] == "bytes" and h["etag"] and h["last-modified"]
        assert (
            "attachment" in h["content-disposition"] and "numbers.txt" in h["content-disposition"]
        )
        assert float(h["jpu-file-mtime"]) == sub["entries"][2]["mtime"]
        assert (await get(s, "bcg-alice", job, "results/bin.dat")).content == b"a\xff\x00b"

        # one byte range: 206 with Content-Range; from the end; open-ended
        n = len(NUMBERS)
        part = await get(s, "bcg-alice", job, "results/numbers.txt", {"Range": "bytes=2-9"})
        assert part.status_code == 206 and part.content == NUMBERS[2:10]
        assert part.headers["content-range"] == f"bytes 2-9/{n}"
        assert part.headers["content-length"] == "8"
        tail = await get(s, "bcg-alice", job, "results/numbers.txt", {"Range": "bytes=-6"})
        assert tail.status_code == 206 and tail.content == b"20000\n"
        rest_ = await get(s, "bcg-alice", job, "results/numbers.txt", {"Range": "bytes=100000-"})
        assert rest_.content == NUMBERS[100000:]
        assert rest_.headers["content-range"] == f"bytes 100000-{n - 1}/{n}"
        # unsatisfiable: 416 with the size; several ranges: the whole file (a server may)
        bad = await get(s, "bcg-alice", job, "results/numbers.txt", {"Range": f"bytes={n}-"})
        assert_error(bad, 416, "RANGE_NOT_SATISFIABLE")
        assert bad.headers["content-range"] == f"bytes */{n}"
        multi = await get(s, "bcg-alice", job, "metrics.csv", {"Range": "bytes=0-1,4-5"})
        assert multi.status_code == 200 and multi.content == b"step,loss\n1,0.5\n"
        # If-Range: the range while the validator matches, the whole file once it does not
        same = {"Range": "bytes=0-3", "If-Range": h["etag"]}
        assert (await get(s, "bcg-alice", job, "results/numbers.txt", same)).status_code == 206
        by_date = {"Range": "bytes=0-3", "If-Range": h["last-modified"]}
        assert (await get(s, "bcg-alice", job, "results/numbers.txt", by_date)).status_code == 206
        changed = {"Range": "bytes=0-3", "If-Range": '"0-0"'}
        again = await get(s, "bcg-alice", job, "results/numbers.txt", changed)
        assert again.status_code == 200 and again.content == NUMBERS

        # 404s: a missing file or directory, an attempt the job does not have
        err = assert_error(await get(s, "bcg-alice", job, "results/nope"), 404, "NOT_FOUND")
        assert "results/nope" in err["message"]
        assert_error(await listing(s, "bcg-alice", job, path="nope"), 404, "NOT_FOUND")
        err = assert_error(await listing(s, "bcg-alice", job, attempt=2), 404, "NOT_FOUND")
        assert "no attempt 2" in err["message"]


async def test_files_path_traversal_absolute_nul_and_symlink_escapes_are_refused_422(
    nats_url: str, pool: asyncpg.Pool, pg_dsn: str
) -> None:
    async with logs_stack(nats_url, pool, pg_dsn) as s:
        job, bob = await _jobs(s)
        up = f"../../{bob}/1/secret.txt"  # from alice's attempt dir to bob's
        for path, why in ((up, "'..'"), ("..", "'..'"), ("/etc", "absolute")):
            _refused_path(await listing(s, "bcg-alice", job, path=path), why)
        # the download's path is in the URL: `..` escaped so no client normalises it away
        for raw, why in (
            (f"%2E%2E/%2E%2E/{bob}/1/secret.txt", "'..'"),
            ("results/%2e%2e/%2e%2e", "'..'"),
            ("/etc/passwd", "absolute"),  # …/files//etc/passwd
            ("%2Fetc%2Fshadow", "absolute"),
        ):
            _refused_path(await get(s, "bcg-alice", job, raw), why)
        for r in (
            await get(s, "bcg-alice", job, "a%00b"),
            await listing(s, "bcg-alice", job, path="a\x00b"),
        ):
            err = assert_error(r, 422, "VALIDATION_ERROR")
            assert err["details"]["field"] == "path", err
        # links the job planted are never followed: out to /etc/shadow, to bob's output, or
        # even to its own file
        for link in ("shadow", "theirs/secret.txt", "theirs-secret", "inside"):
            r = await get(s, "bcg-alice", job, link)
            _refused_path(r, "symbolic link")
            assert b"bobs-secret" not in r.content and b"root:" not in r.content
        _refused_path(await listing(s, "bcg-alice", job, path="theirs"), "symbolic link")
        _refused_path(await get(s, "bcg-alice", job, "pipe"), "not a plain file")
        _refused_path(await get(s, "bcg-alice", job, "results"), "is a directory")
        _refused_path(await listing(s, "bcg-alice", job, path="metrics.csv"), "is a file")
        # bob reads his own file, so the refusals above are about the links, not the file
        mine = await get(s, "bcg-bob", bob, "secret.txt")
        assert mine.status_code == 200 and mine.content == b"bobs-secret\n"


async def test_files_visible_to_owner_lab_admin_and_admin_only_also_in_maintenance_M5(
    nats_url: str, pool: asyncpg.Pool, pg_dsn: str
) -> None:
    async with logs_stack(nats_url, pool, pg_dsn) as s:
        await add_lab_admins(s.bus, pool)
        job = await s.submit("bcg-alice", 'echo secret-data > "$JOB_OUTPUT_DIR/data.txt"')
        await wait_job(s, "bcg-alice", job, ended)
        assert (await s.maintenance("start", "storage swap")).status_code == 200
        status = (await s.client.get("/v1/maintenance/status")).json()
        assert status["state"] != "NORMAL", status
        for who in ("bcg-alice", "bcg-lead", "admin"):  # M5: reads go on during maintenance
            names = [e["name"] for e in (await listing(s, who, job)).json()["entries"]]
            assert "data.txt" in names, (who, names)
            r = await get(s, who, job, "data.txt")
            assert r.status_code == 200 and r.content == b"secret-data\n", (who, r.text)
        # another lab (user and lab_admin), and a user of the same lab who is not the owner
        for who in ("kdg-carol", "kdg-lead", "bcg-bob"):
            for r in await asyncio.gather(listing(s, who, job), get(s, who, job, "data.txt")):
                err = assert_error(r, 403, "FORBIDDEN")
                assert err["details"] == {"job_id": job} and b"secret-data" not in r.content
        assert_error(await s.client.get(f"/v1/jobs/{job}/files"), 401, "UNAUTHENTICATED")
        assert_error(await get(s, "bcg-alice", "no-such-job", "data.txt"), 404, "NOT_FOUND")
        assert (await s.maintenance("end")).status_code == 200

        # an attempt that has not started has no output directory yet: a clear 404
        await pool.execute("UPDATE users SET max_active_jobs = 0 WHERE name = 'osl-erin'")
        held = await s.submit("osl-erin", "echo never")
        err = assert_error(await listing(s, "osl-erin", held), 404, "NOT_FOUND")
        assert "no output directory (yet)" in err["message"]
