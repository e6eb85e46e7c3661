"""SPEC X9, X2 on a site's Slurm as shipped: the agent image variant
(compose/images/agent-slurm.Containerfile, `scripts/images agent-slurm`) talks to a real slurmctld
through the host's munged (its socket and slurm.conf mounted, as docs/deployment.md "Slurm" says),
runs as root only to submit as each user's own account (`runuser -u ACCOUNT -- sbatch`, what
jpu.backends.slurm does when the agent is root), and the job runs on the node as that account's
UID, writing to the output storage both share at one path. The users come from the host's
accounts (NSS: /etc/passwd and /etc/group mounted read-only), so the UIDs match the node's."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from jpu.testing.slurm_fixtures import SlurmCluster
from jpu.testing.unavailable import needs_root

ROOT = Path(__file__).resolve().parents[2]
needs_root("the Slurm test cluster and podman")


def _agent_image() -> str:
    assert shutil.which("podman"), "podman is missing: run scripts/install-podman"
    done = subprocess.run(
        ["bash", str(ROOT / "scripts/images"), "agent-slurm"],
        capture_output=True, text=True, cwd=ROOT, timeout=900,
        env={**os.environ, "PY": str(ROOT / ".venv/bin/python")},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    (image,) = re.findall(r"^JPU_AGENT_SLURM_IMAGE=(\S+)$", done.stdout, re.M)
    return image


def test_X9_agent_slurm_image_submits_through_munge_as_the_users_own_account(
    slurm_cluster: SlurmCluster,
) -> None:
    image = _agent_image()
    conf = Path(slurm_cluster.conf)
    (munge,) = re.findall(r"AuthInfo=socket=(\S+?)[,\s]", conf.read_text())
    outputs = Path(tempfile.mkdtemp(prefix="jpu-agent-slurm-out-", dir="/var/tmp"))
    outputs.chmod(0o1777)  # shared output storage: the job's account writes its own file
    name = f"jpu-k8s-agent-slurm-{os.getpid()}"
    script = (
        "set -e; echo agent_uid=$(id -u); sinfo -h -o 'partition=%P'\n"
        f"j=$(runuser -u nobody -- sbatch --parsable -p rtx4090 --chdir {outputs} "
        f"-o {outputs}/%j.out --wrap 'echo job_user=$(id -un) job_uid=$(id -u)')\n"
        'for i in $(seq 120); do [ -z "$(squeue -h -j $j -o %T)" ] && break; sleep 0.5; done\n'
        f"cat {outputs}/$j.out\n"
    )
    try:
        done = subprocess.run(
            ["podman", "run", "--rm", "--name", name, "--network=host",
             "-v", f"{conf}:{conf}:ro", "-v", f"{Path(munge).parent}:{Path(munge).parent}",
             "-v", "/etc/passwd:/etc/passwd:ro", "-v", "/etc/group:/etc/group:ro",
             "-v", f"{outputs}:{outputs}", "-e", f"SLURM_CONF={conf}",
             image, "bash", "-c", script],
            capture_output=True, text=True, timeout=180,
        )  # fmt: skip
    finally:
        subprocess.run(["podman", "rm", "-f", "--ignore", name], capture_output=True, check=False)
        shutil.rmtree(outputs, ignore_errors=True)
    assert done.returncode == 0, done.stderr[-2000:]
    out = done.stdout
    assert "agent_uid=0" in out  # root, to become each user (the one exception: docs)
    assert "partition=rtx4090" in out  # the client reached slurmctld, munge authenticated it
    nobody = subprocess.run(["id", "-u", "nobody"], capture_output=True, text=True).stdout.strip()
    assert f"job_user=nobody job_uid={nobody}" in out  # the user's own account on the node
