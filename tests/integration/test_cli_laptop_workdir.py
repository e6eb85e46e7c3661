"""`jpu submit` from a folder the cluster does not have — a laptop's (SPEC U5, SEC1): the user
learns it before a GPU is held. The CLI runs as a real process in a mount namespace of its own
whose folder exists only there (a tmpfs the gateway's namespace does not see), as a laptop's
folder exists only on the laptop; the gateway and the services are the real stack."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sys

import asyncpg

from jpu.policy.workdir import NOT_ON_CLUSTER
from jpu.testing.api import bearer
from jpu.testing.cli import raw_env
from jpu.testing.stack import ended, logs_stack, wait_job
from jpu.testing.stack_process import world_searchable_tmpdir
from jpu.testing.unavailable import needs_root

# a private mount namespace: a tmpfs over `$1` holding the "laptop" folder, then the CLI there
_LAPTOP = 'mount -t tmpfs tmpfs "$1" && mkdir -p "$1/home/alice/project" && cd "$1/home/alice/project" && shift && exec "$@"'  # noqa: E501


async def _from_laptop(url: str, root: str, *argv: str) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        "unshare", "--mount", "--propagation", "private", "--", "sh", "-c", _LAPTOP, "sh",
        root, sys.executable, "-P", "-m", "jpu.cli.main", *argv,
        env=raw_env(url, "bcg-bob"), cwd="/",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    return int(proc.returncode or 0), out.decode(), err.decode()


async def test_U5_submit_from_a_folder_the_cluster_lacks_runs_in_the_output_dir_and_says_so(
    nats_url: str, pool: asyncpg.Pool, pg_dsn: str
) -> None:
    needs_root("a mount namespace for the laptop's folder")
    root = world_searchable_tmpdir("jpu-laptop-")
    laptop = f"{root}/home/alice/project"
    try:
        async with logs_stack(nats_url, pool, pg_dsn) as s:
            url = str(s.client.base_url).rstrip("/")
            assert not os.path.exists(laptop)  # the gateway's view: no such folder
            before = await s.bus.last_seq()

            # given explicitly, it is refused at submit, naming chdir: nothing appended
            rc, out, err = await _from_laptop(url, root, "submit", "-D", laptop, "--wrap", "pwd")
            assert rc == 1 and out == "", (rc, out, err)
            assert "chdir" in err and laptop in err and "does not exist on the cluster" in err
            assert err.count("\n") == 1, err
            assert await s.bus.last_seq() == before, "a refused submit appends nothing"

            # the implicit default (the folder `jpu submit` ran in): the job runs in its own
            # output directory, and the user is told before it ever holds a GPU
            rc, out, err = await _from_laptop(url, root, "submit", "--wrap", "pwd", "--json")
            assert rc == 0, err
            job = json.loads(out)
            assert job["chdir"] is None and job["workdir"] == job["output_dir"], job
            assert err == (
                f"jpu submit: note: {laptop} is not on the cluster, so the job runs in "
                f"{job['output_dir']}; give --chdir DIR to run it in a directory of the "
                "cluster\n"
            ), err
            done = await wait_job(s, "bcg-bob", job["id"], ended)
            assert done["state"] == "COMPLETED", done
            log = await s.client.get(f"/v1/jobs/{job['id']}/logs", headers=bearer("bcg-bob"))
            assert log.content.decode().strip() == done["output_dir"], log.content

            # the API's own answer to the same request says why, for any client
            r = await s.client.post(
                "/v1/jobs",
                json={"command": "pwd", "num_gpus": 1, "chdir": laptop},
                headers=bearer("bcg-bob"),
            )
            assert r.status_code == 422, r.text
            details = r.json()["error"]["details"]
            assert details["field"] == "chdir" and details["reason"] == NOT_ON_CLUSTER
    finally:
        shutil.rmtree(root, ignore_errors=True)
