"""SPEC SEC1 live: a job's working directory outside the site's roots — the host's /proc and
/run, /tmp itself, the platform's own PostgreSQL socket directory, a symlink leading out — is
refused at submit through the real stack (gateway, intake, agent, local backend: 422 naming
`chdir`), and refused again at launch when the directory became such a symlink after submit
(resolved as the job's account, podman never mounts it). The pure rule: test_sec1_workdir_rule."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import asyncpg
import pytest
import pytest_asyncio

from jpu.backends import BackendError
from jpu.testing.api import assert_error, bearer
from jpu.testing.local_world import LocalWorld, root_dir
from jpu.testing.stack import ended, logs_stack, wait_job
from jpu.testing.stack_process import world_searchable_tmpdir
from jpu.testing.unavailable import needs_root

needs_root("creates the job accounts and runs the root side of the launch chain")
BODY = {"name": "sec1", "command": "pwd", "num_gpus": 1}


@pytest.fixture
def links() -> Iterator[Path]:
    """A user's folder under /tmp (allowed) holding symlinks that lead out of the roots."""
    d = world_searchable_tmpdir("jpu-test-sec1-")
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


async def test_sec1_chdir_outside_the_roots_is_refused_at_submit_naming_chdir(
    nats_url: str, pool: asyncpg.Pool, pg_dsn: str, links: Path
) -> None:
    async with logs_stack(nats_url, pool, pg_dsn) as s:
        pg_run = s.data_dir / "pg" / "run"  # where `make run` keeps PostgreSQL's socket
        pg_run.mkdir(parents=True, mode=0o755)
        (links / "to-run").symlink_to("/run")
        (links / "to-data").symlink_to(pg_run)
        refused = {
            "/proc": "/proc, the host's own",
            "/run": "/run, the host's own",
            "/etc": "/etc, the host's own",
            "/tmp": "allowed: /home, /srv, /data, /scratch, subdirectories of /tmp",
            str(pg_run): "the platform's data directory",
            str(links / "to-run"): "/run, the host's own",
            str(links / "to-data"): "the platform's data directory",
            str(links / "to-data" / ".."): "the platform's data directory",  # the kernel's ..
        }
        home = None
        if os.access("/home", os.W_OK):  # a symlink out of /home (an allowed root) to /proc
            home = Path(tempfile.mkdtemp(prefix="jpu-test-sec1-", dir="/home"))
            (home / "proc").symlink_to("/proc")
            refused[str(home / "proc")] = "/proc, the host's own"
            (home / "host").symlink_to("/proc/1/root")  # the host's / through a magic link
            refused[str(home / "host")] = "cannot be resolved"
        try:
            for chdir, why in refused.items():
                r = await s.client.post(
                    "/v1/jobs", json={**BODY, "chdir": chdir}, headers=bearer("bcg-alice")
                )
                err = assert_error(r, 422, "VALIDATION_ERROR")
                assert err["details"]["field"] == "chdir", (chdir, err)
                assert err["message"].startswith("chdir: ") and why in err["message"], (chdir, err)
            # the control: a folder of the user's under an allowed root runs
            r = await s.client.post(
                "/v1/jobs", json={**BODY, "chdir": str(links)}, headers=bearer("bcg-alice")
            )
            assert r.status_code == 201, r.text
            done = await wait_job(s, "bcg-alice", r.json()["id"], ended)
            assert done["state"] == "COMPLETED", done
        finally:
            if home is not None:
                shutil.rmtree(home, ignore_errors=True)


@pytest_asyncio.fixture
async def podman_world() -> AsyncIterator[LocalWorld]:
    assert shutil.which("podman"), "podman is missing: run scripts/install-podman"
    w = LocalWorld("jpu-sec1", isolation="container")
    try:
        yield w
    finally:
        await w.aclose()


async def test_sec1_a_chdir_swapped_for_a_symlink_after_submit_is_refused_at_launch(
    podman_world: LocalWorld,
) -> None:
    """What the gateway accepted was a directory; by the launch it is a symlink to the host's
    /run, then to the platform's data directory: the backend resolves it again, as the job's
    account, and refuses (the agent ends the attempt with this reason, `launch failed: …`)."""
    world = podman_world
    project = root_dir("jpu-test-sec1-project-")
    project.chmod(0o755)
    try:
        backend = world.backend()
        wd = project / "wd"
        for target, why in (("/run", "/run, the host's own"),
                            (str(world.data_dir), "the platform's data directory")):  # fmt: skip
            wd.symlink_to(target)  # swapped in after submit
            spec = world.spec("echo never", chdir=str(wd))
            with pytest.raises(BackendError, match=r"^chdir: ") as raised:
                await backend.submit(spec)
            assert why in str(raised.value)
            assert await backend.find(spec.job_id, 1) is None  # nothing ran, nothing mounted
            wd.unlink()
        # a directory the account cannot enter is not mounted by root's podman either
        private = project / "private"
        private.mkdir(mode=0o700)
        (private / "inner").mkdir(mode=0o777)
        with pytest.raises(BackendError, match="cannot enter"):
            await backend.submit(world.spec("echo never", chdir=str(private / "inner")))
    finally:
        shutil.rmtree(project, ignore_errors=True)


async def test_sec1_the_agent_ends_an_attempt_whose_chdir_became_a_symlink_after_submit(
    nats_url: str, pool: asyncpg.Pool, pg_dsn: str, links: Path
) -> None:
    """Through the whole stack: accepted while `wd` was a directory, held, swapped for a symlink
    to the platform's data directory, released: the launch refuses it and the job ends FAILED
    with the reason, never run (`launch failed: chdir: …`)."""
    async with logs_stack(nats_url, pool, pg_dsn) as s:
        wd = links / "wd"
        wd.mkdir(mode=0o755)
        body = {**BODY, "chdir": str(wd), "hold": True, "command": "touch ran"}
        r = await s.client.post("/v1/jobs", json=body, headers=bearer("bcg-alice"))
        assert r.status_code == 201, r.text
        job_id = r.json()["id"]
        wd.rmdir()
        wd.symlink_to(s.data_dir)  # after submit: the gateway's check is behind it
        r = await s.client.post(f"/v1/jobs/{job_id}/release", headers=bearer("bcg-alice"))
        assert r.status_code < 300, r.text
        done = await wait_job(s, "bcg-alice", job_id, ended)
        assert done["state"] == "FAILED", done
        assert "launch failed: chdir: " in done["reason"], done
        assert "the platform's data directory" in done["reason"], done
        assert not (s.data_dir / "ran").exists()
