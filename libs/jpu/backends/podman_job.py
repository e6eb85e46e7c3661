"""The node's root helper that runs a Slurm job's container (SPEC X4a on the Slurm backend).

A batch script runs as the job's user, and rootless podman would need, for every mapped account,
subordinate UID ranges, a home, a runtime directory and its own copy of every workspace image.
Sites do what they do for other privileged steps instead: a small root-owned helper, allowed to
everyone through sudo, that can do exactly one thing — run the platform's `podman run` (the same
argv as the local backend's, isolation.podman_argv) as the CALLER's UID/GID:

    sudo -n /usr/local/libexec/jpu-podman-job run SLURM_JOB_ID OUT WORKDIR IMAGE
    /usr/local/libexec/jpu-podman-job cleanup SLURM_JOB_ID      (root: Slurm's Epilog)

The shim at /usr/local/libexec/jpu-podman-job execs `python -I -m jpu.backends.podman_job
--config /etc/jpu/podman-job.json …` (scripts/slurm-testcluster podman-helper writes all three).
What the caller chooses is checked, never trusted:
  * the UID/GID are sudo's SUDO_UID/SUDO_GID (the real caller), never root;
  * IMAGE is the configured base image or a workspace image (WORKSPACE_IMAGE_PREFIX);
  * OUT and WORKDIR are absolute directories the caller itself can open (checked in a child
    that has dropped to the caller's account): a bind mount must not reach what the user cannot;
  * podman's own options (store, shared paths, devices) come from the root-owned config only;
  * SEC1: WORKDIR, resolved, lies under the config's `workdir_roots` and outside its `data_dir`,
    /proc, /sys, /run, /dev, /etc (jpu.policy.workdir.outside_roots_problem);
  * SEC6: the container gets the Slurm job's own CPUs and memory (`scontrol show job`, as root:
    never the caller's word; a job of another account is refused), bounded pids and /tmp, and
    the seccomp profile refusing nested user namespaces (jpu.backends.seccomp).
The job's variables travel in OUT/.jpu-env, written by the batch script as the user and read
inside by the loader (process.LOADER), as on the local backend: none reaches root's podman.
The helper stays the podman client's parent: Slurm's SIGTERM (sudo relays it to the helper)
goes into the container with `podman kill`, retried until the container runs, and `--init`
passes it to the job (X5). Not through the client's own signal proxy: a proxy that finds the
container not yet marked running re-sends the signal to the client, which dies, and the job
then loses its grace. A SIGKILL ends only the helper and the client, so the Epilog removes the
container by name (`cleanup`). The helper's own `podman inspect`/`podman kill` are in the batch
step too, so `scancel --full` signals them as well: one interrupted that way can exit 0 having
said nothing, which counts as no answer (containers.state, containers.kill), never as "the
container has ended" nor "the signal arrived".
"""

from __future__ import annotations

import argparse
import json
import math
import os
import pwd
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from jpu.backends import isolation as iso_
from jpu.backends import seccomp
from jpu.backends.process import ENV_FILE, LOADER
from jpu.backends.supervise import ARGV as SUPERVISOR
from jpu.policy.workdir import DEFAULT_ROOTS, outside_roots_problem

CONFIG = "/etc/jpu/podman-job.json"
SHIM = "/usr/local/libexec/jpu-podman-job"
SLURM_PREFIX = "jpu-slurm-"  # container name: jpu-slurm-<Slurm job id>
PROFILE = Path("/run/jpu-podman-job/seccomp.json")  # SEC6: rewritten (atomically) per run
_UNITS = {"M": 1 / 1024, "G": 1, "T": 1024}
_TERM_RETRY_S = 0.2


@dataclass(frozen=True)
class HelperConfig:
    podman: iso_.Podman  # base image, bin, store, shared paths, site args (CDI devices)
    stop_timeout_s: float = 30.0
    workdir_roots: tuple[str, ...] = DEFAULT_ROOTS  # SEC1
    data_dir: str = ""  # SEC1: the platform's, where the nodes see it ("": none here)
    slurm_conf: str = ""  # SEC6: where `scontrol` finds the cluster ("": Slurm's default)


def load(path: str) -> HelperConfig:
    raw = json.loads(Path(path).read_text())
    p = iso_.Podman(
        raw["image"], bin=raw.get("bin", "podman"), storage=raw.get("storage", ""),
        shared=tuple(raw.get("shared", ())), args=tuple(raw.get("args", ())),
    )  # fmt: skip
    roots = tuple(raw.get("workdir_roots", DEFAULT_ROOTS))
    return HelperConfig(
        p, float(raw.get("stop_timeout_s", 30.0)), roots, raw.get("data_dir", ""),
        raw.get("slurm_conf", ""),
    )  # fmt: skip


def container_of(slurm_job_id: str) -> str:
    if not slurm_job_id.isdigit():
        raise ValueError(f"bad Slurm job id {slurm_job_id!r}")
    return SLURM_PREFIX + slurm_job_id


def allowed_image(config: HelperConfig, image: str) -> bool:
    """The base image or a workspace's (built by the platform's builder): never an image the
    caller names freely."""
    return image == config.podman.image or (
        image.startswith(iso_.WORKSPACE_IMAGE_PREFIX) and "/" not in image[len("localhost/") :]
    )


def limits_of(scontrol_line: str, uid: int) -> iso_.Limits | None:
    """SEC6: the CPUs and memory Slurm allocated, from `scontrol show job -o` (TRES=cpu=N,
    mem=M…); None when the job is not the caller's or says no such thing."""
    fields = dict(w.split("=", 1) for w in scontrol_line.split() if "=" in w)
    owner = fields.get("UserId", "")
    if not owner.endswith(f"({uid})"):
        return None
    tres = dict(t.split("=", 1) for t in fields.get("TRES", "").split(",") if "=" in t)
    cpus, mem = tres.get("cpu", ""), tres.get("mem", "")
    try:
        gb = float(mem[:-1]) * _UNITS[mem[-1:]]
        n = int(cpus)
    except (KeyError, ValueError):
        return None
    # podman refuses more CPUs than the host has (a test cluster's nodes claim more)
    return iso_.Limits(mem_gb=max(1, math.ceil(gb)), cpus=max(1, min(n, os.cpu_count() or 1)))


def _slurm_limits(config: HelperConfig, slurm_job_id: str, uid: int) -> iso_.Limits | None:
    env = {"PATH": iso_.RUNTIME_PATH, "LANG": "C.UTF-8"}
    if config.slurm_conf:
        env["SLURM_CONF"] = config.slurm_conf
    try:
        done = subprocess.run(
            [_which("scontrol"), "show", "job", "-o", slurm_job_id], capture_output=True,
            text=True, timeout=30, env=env,
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return None
    return limits_of(done.stdout, uid) if done.returncode == 0 else None


def run_argv(
    config: HelperConfig, uid: int, gid: int, slurm_job_id: str, out: str, workdir: str,
    image: str, limits: iso_.Limits | None = None, profile: str = "",
) -> list[str]:  # fmt: skip
    """The one `podman run` of the platform (isolation.podman_argv) for a Slurm job."""
    p = iso_.Podman(image, config.podman.bin, config.podman.storage, config.podman.shared,
                    config.podman.args, seccomp=profile)  # fmt: skip
    inner = ["/bin/bash", "-c", LOADER, "jpu-env", f"{out}/{ENV_FILE}", *SUPERVISOR,
             "/bin/bash", f"{out}/job.sh"]  # fmt: skip
    wd = None if workdir == out else workdir
    labels = {"jpu.slurm-job": slurm_job_id}
    return iso_.podman_argv(
        p,
        container_of(slurm_job_id),
        uid,
        gid,
        out,
        wd,
        inner,
        config.stop_timeout_s,
        labels,
        limits,
    )


def _caller() -> tuple[int, int]:
    uid, gid = int(os.environ.get("SUDO_UID", "-1")), int(os.environ.get("SUDO_GID", "-1"))
    if os.getuid() != 0 or uid <= 0 or gid < 0:
        raise PermissionError("run through sudo by the job's own (non-root) account")
    return uid, gid


def _openable_as(uid: int, gid: int, path: str) -> bool:
    """Whether the caller's account itself can open `path` as a directory (a forked child drops
    to it first), and it is the same directory root sees."""
    try:
        mine = os.stat(path)
    except OSError:
        return False
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            name = pwd.getpwuid(uid).pw_name
            os.setgroups(os.getgrouplist(name, gid))
            os.setgid(gid)
            os.setuid(uid)
            fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
            st = os.fstat(fd)
            os._exit(0 if (st.st_dev, st.st_ino) == (mine.st_dev, mine.st_ino) else 1)
        except BaseException:
            os._exit(1)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status) == 0


def run(config: HelperConfig, slurm_job_id: str, out: str, workdir: str, image: str) -> int:
    uid, gid = _caller()
    container_of(slurm_job_id)
    if not allowed_image(config, image):
        print(f"jpu-podman-job: image {image!r} is not the base image or a workspace's",
              file=sys.stderr)  # fmt: skip
        return 2
    dirs = []
    for path in (out, workdir):
        real = os.path.realpath(path)
        if not path.startswith("/") or not _openable_as(uid, gid, real):
            print(f"jpu-podman-job: cannot use {path!r} (not a directory you can open)",
                  file=sys.stderr)  # fmt: skip
            return 2
        dirs.append(real)
    data_dir = os.path.realpath(config.data_dir) if config.data_dir else ""
    problem = outside_roots_problem("chdir", dirs[1], config.workdir_roots, data_dir)
    if dirs[1] != dirs[0] and problem is not None:  # SEC1 (OUT is the platform's own)
        print(f"jpu-podman-job: {problem}", file=sys.stderr)
        return 2
    limits = _slurm_limits(
        config, slurm_job_id, uid
    )  # SEC6: Slurm's allocation, not the caller's word
    if limits is None:
        print(f"jpu-podman-job: Slurm job {slurm_job_id} is not yours, or has no CPUs and memory",
              file=sys.stderr)  # fmt: skip
        return 2
    profile = str(seccomp.write_profile(PROFILE))
    argv = run_argv(config, uid, gid, slurm_job_id, dirs[0], dirs[1], image, limits, profile)
    argv[0] = _which(config.podman.bin)
    return _supervise(config, argv, container_of(slurm_job_id))


def _supervise(config: HelperConfig, argv: list[str], name: str) -> int:
    """Run the podman client (root's podman gets our own environment, never the caller's), pass
    a SIGTERM or SIGINT to the container itself, and return when the container has ended: with
    the client's exit status (the job's), or the container's when the client died first."""
    from jpu.backends import containers

    asked: list[str] = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda n, _: asked.append(signal.Signals(n).name[3:]))
    base = iso_.podman_base(config.podman)

    def pass_on() -> None:
        if asked and containers.kill(base, name, asked[0]):
            asked.pop(0)

    client = subprocess.Popen(argv, env={"PATH": iso_.RUNTIME_PATH, "LANG": "C.UTF-8"})
    while True:
        try:
            rc = client.wait(timeout=_TERM_RETRY_S)  # returns as the client ends
            break
        except subprocess.TimeoutExpired:
            pass_on()
    if rc >= 0:
        return rc
    # `scancel --full` signals the client too, and its proxy may re-send a signal to itself:
    # the client is gone, its container perhaps not. Stay until it ends, passing signals on.
    # Said on the job's stderr: the job's exit status is then the container's, not the client's.
    print(f"jpu-podman-job: the podman client of {name} ended by signal {-rc}; staying until "
          "the container ends", file=sys.stderr, flush=True)  # fmt: skip
    while True:
        try:
            now = containers.state(base, name)
        except containers.EngineError:
            now = "running"  # podman did not say (a signal reached it too): ask again
        if now == "gone":
            print(f"jpu-podman-job: {name} is gone", file=sys.stderr, flush=True)
            return 128 - rc  # killed by signal n: 128 + n, as a shell says
        if now != "running":
            print(f"jpu-podman-job: {name} exited {now}", file=sys.stderr, flush=True)
            return now
        pass_on()
        time.sleep(_TERM_RETRY_S)


def cleanup(config: HelperConfig, slurm_job_id: str) -> int:
    """Slurm's Epilog (root): the job's container is gone when the job is (a SIGKILL after the
    grace reaches only the podman client)."""
    if os.getuid() != 0 or "SUDO_UID" in os.environ:
        print("jpu-podman-job: cleanup is the Epilog's (root)", file=sys.stderr)
        return 2
    from jpu.backends.containers import remove

    return 0 if remove(iso_.podman_base(config.podman), container_of(slurm_job_id)) else 1


def _which(program: str) -> str:
    from shutil import which

    return which(program, path=iso_.RUNTIME_PATH) or program


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="jpu-podman-job")
    parser.add_argument("--config", default=CONFIG)
    sub = parser.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    for name in ("slurm_job_id", "out", "workdir", "image"):
        r.add_argument(name)
    c = sub.add_parser("cleanup")
    c.add_argument("slurm_job_id")
    args = parser.parse_args(argv)
    config = load(args.config)
    try:
        if args.cmd == "run":
            return run(config, args.slurm_job_id, args.out, args.workdir, args.image)
        return cleanup(config, args.slurm_job_id)
    except (PermissionError, ValueError) as e:
        print(f"jpu-podman-job: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
