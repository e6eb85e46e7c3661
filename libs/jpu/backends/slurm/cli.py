"""The Slurm CLI as async calls (SPEC X9: the CLI path, for clusters where pyslurm does not match).

Every call is an argv (never a shell line) with `SLURM_CONF` set when configured. Nothing a user
wrote ever reaches an argv: the batch script comes on stdin and the job's environment through an
inherited file descriptor (`--export-file=<fd>`), see submit.py (X3).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from collections.abc import Mapping, Sequence
from typing import Any

from jpu.backends.accounts import Account
from jpu.backends.base import BackendError
from jpu.backends.slurm.parse import (
    SACCT_FIELDS,
    SQUEUE_FORMAT,
    SQUEUE_NAMED_FORMAT,
    SlurmJob,
    job_from_sacct,
    named_states_from_squeue,
    states_from_squeue,
)

_TIMEOUT_S = 30.0
_OPTION_ENV = ("SBATCH_", "SQUEUE_", "SINFO_", "SCANCEL_", "SACCT_", "SLURM_")


class SlurmCli:
    def __init__(self, conf: str | None = None) -> None:
        self.conf = conf
        env = dict(os.environ)
        if conf:
            env["SLURM_CONF"] = conf
        for key in list(env):  # SBATCH_*/SQUEUE_* of the agent's environment would change options
            if key.startswith(_OPTION_ENV) and key != "SLURM_CONF":
                env.pop(key)
        self.env = env
        self._epoch_env = {**env, "SLURM_TIME_FORMAT": "%s"}  # squeue times as epochs

    async def run(
        self,
        argv: Sequence[str],
        *,
        stdin: bytes | None = None,
        pass_fds: Sequence[int] = (),
        check: bool = True,
        env: Mapping[str, str] | None = None,
        account: Account | None = None,
    ) -> tuple[int, str, str]:
        """`account`: run as that Unix account (its UID, GID and groups, set by the child
        before exec, as `runuser -u` would without its PAM session: a start burst runs one
        process per sbatch instead of two, and about half the CPU per start)."""
        drop: dict[str, Any] = {}
        if account is not None:
            groups = os.getgrouplist(account.name, account.gid)
            drop = {"user": account.uid, "group": account.gid, "extra_groups": groups}
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                env=self.env if env is None else env,
                pass_fds=tuple(pass_fds),
                **drop,
            )
        except OSError as e:
            raise BackendError(f"cannot run {argv[0]}: {e}") from e
        try:
            out, err = await asyncio.wait_for(proc.communicate(stdin), _TIMEOUT_S)
        except TimeoutError as e:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()
            raise BackendError(f"{argv[0]} timed out after {_TIMEOUT_S:.0f}s") from e
        rc = proc.returncode or 0
        text, errs = out.decode("utf-8", "replace"), err.decode("utf-8", "replace")
        if check and rc != 0:
            raise BackendError(f"{' '.join(argv[:2])} failed ({rc}): {errs.strip()[:500]}")
        return rc, text, errs

    async def _json(self, argv: Sequence[str]) -> Mapping[str, Any]:
        """squeue/sinfo --json exit 0 even when slurmctld is down: the `errors` list says so."""
        _, out, _ = await self.run(argv)
        try:
            doc = json.loads(out)
        except ValueError as e:
            raise BackendError(f"{argv[0]} printed no JSON: {out[:200]!r}") from e
        errors = doc.get("errors") or []
        if errors:
            raise BackendError(f"{argv[0]}: {errors}")
        return doc

    async def squeue(self) -> Mapping[str, Any]:
        return await self._json(["squeue", "--json"])

    async def squeue_states(self, name: str | None = None) -> dict[int, SlurmJob]:
        """Every job's state (or those named exactly `name`), lean (SQUEUE_FORMAT). Unlike
        `--json`, a text squeue exits non-zero when slurmctld does not answer, so an empty
        listing is a real one."""
        argv = ["squeue", "--noheader", "--states=all", f"--Format={SQUEUE_FORMAT}"]
        if name is not None:
            argv.append(f"--name={name}")
        _, out, _ = await self.run(argv, env=self._epoch_env)
        return states_from_squeue(out)

    async def squeue_named(self, names: Sequence[str]) -> dict[str, dict[int, SlurmJob]]:
        """name → the jobs of exactly that name, for many names in one `squeue --name=a,b,…`
        (lean, plus the name: only jobs bearing one of `names`, which are ours, are listed)."""
        argv = ["squeue", "--noheader", "--states=all", f"--Format={SQUEUE_NAMED_FORMAT}",
                f"--name={','.join(names)}"]  # fmt: skip
        _, out, _ = await self.run(argv, env=self._epoch_env)
        return named_states_from_squeue(out, names)

    async def sinfo(self) -> Mapping[str, Any]:
        return await self._json(["sinfo", "--json"])

    async def sacct_job(self, job_id: int) -> SlurmJob | None:
        """A job slurmctld forgot (older than MinJobAge): the job completion log (`-c`, for
        JobCompType=jobcomp/filetxt), else the accounting database (slurmdbd)."""
        for source in (["-c"], []):
            argv = ["sacct", *source, "-P", "-n", f"--format={SACCT_FIELDS}", "-j", str(job_id)]
            rc, out, _ = await self.run(argv, check=False)
            for line in out.splitlines() if rc == 0 else []:
                job = job_from_sacct(line)
                if job is not None and job.job_id == job_id:
                    return job
        return None

    async def scancel(self, job_id: int, *args: str) -> bool:
        """False when Slurm refused (e.g. the job already ended)."""
        rc, _, _ = await self.run(["scancel", *args, str(job_id)], check=False)
        return rc == 0

    async def drain(self, node: str, reason: str) -> None:
        await self.run(
            ["scontrol", "update", f"nodename={node}", "state=drain", f"reason={reason}"]
        )

    async def resume(self, node: str) -> None:
        await self.run(["scontrol", "update", f"nodename={node}", "state=resume"])
