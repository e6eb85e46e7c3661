"""SPEC SEC6: the pure parts — the seccomp profile (podman's default minus nested user
namespaces) and the podman options of a job's limits. Live: test_sec6_job_limits.py."""

from __future__ import annotations

import os
from typing import Any

from jpu.backends.isolation import Limits, Podman, podman_argv
from jpu.backends.podman_job import limits_of
from jpu.backends.seccomp import CLONE_NEWUSER, ENOSYS, EPERM, PODMAN_DEFAULT, profile

BASE: dict[str, Any] = {
    "defaultAction": "SCMP_ACT_ERRNO",
    "defaultErrnoRet": 38,
    "syscalls": [
        {"names": ["read", "clone", "clone3", "setns", "unshare"], "action": "SCMP_ACT_ALLOW"},
        {"names": ["setns"], "action": "SCMP_ACT_ALLOW", "includes": {"caps": ["CAP_SYS_ADMIN"]}},
    ],
}


def _rules(p: dict[str, Any], name: str) -> list[dict[str, Any]]:
    return [r for r in p["syscalls"] if name in r["names"]]


def test_sec6_the_profile_keeps_podmans_rules_and_refuses_new_user_namespaces() -> None:
    p = profile(BASE)
    assert p["defaultAction"] == "SCMP_ACT_ERRNO" and p["defaultErrnoRet"] == 38
    assert p["syscalls"][0] == {"names": ["read"], "action": "SCMP_ACT_ALLOW"}  # others kept
    for name in ("unshare", "clone"):
        allow, deny = _rules(p, name)
        assert allow["action"] == "SCMP_ACT_ALLOW" and deny["action"] == "SCMP_ACT_ERRNO"
        assert allow["args"] == [{"index": 0, "value": CLONE_NEWUSER, "valueTwo": 0,
                                  "op": "SCMP_CMP_MASKED_EQ"}]  # fmt: skip
        assert deny["args"][0]["valueTwo"] == CLONE_NEWUSER and deny["errnoRet"] == EPERM
    assert _rules(p, "clone3") == [{"names": ["clone3"], "action": "SCMP_ACT_ERRNO",
                                    "errnoRet": ENOSYS}]  # fmt: skip  # glibc falls back to clone
    assert _rules(p, "setns") == [{"names": ["setns"], "action": "SCMP_ACT_ERRNO",
                                   "errnoRet": EPERM}]  # fmt: skip  # even with caps: none


def test_sec6_without_podmans_file_the_same_rules_over_allow() -> None:
    p = profile(None)
    assert p["defaultAction"] == "SCMP_ACT_ALLOW"
    assert {n for r in p["syscalls"] for n in r["names"]} == {"unshare", "clone", "clone3", "setns"}


def test_sec6_podmans_default_profile_is_where_it_is_read() -> None:
    assert PODMAN_DEFAULT.is_file(), "podman's seccomp.json: run scripts/install-podman"


def test_sec6_podman_run_has_the_tiers_limits_pids_tmp_and_the_profile() -> None:
    pod = Podman("img", seccomp="/d/seccomp.json")
    argv = podman_argv(pod, "jpu-x", 1001, 1001, "/o", None, ["job"], 5.0,
                       limits=Limits(mem_gb=64, cpus=16))  # fmt: skip
    flags = argv[: argv.index("img")]

    def after(flag: str) -> str:
        return flags[flags.index(flag) + 1]

    assert after("--memory") == after("--memory-swap") == "64g"  # no swap beyond it
    assert (after("--cpus"), after("--pids-limit")) == ("16", "4096")
    assert after("--tmpfs") == "/tmp:rw,size=4096m,mode=1777,nosuid,nodev"
    assert "seccomp=/d/seccomp.json" in flags
    small = podman_argv(pod, "jpu-x", 1, 1, "/o", None, ["job"], 5.0, limits=Limits(1, 1))
    assert small[small.index("--tmpfs") + 1].startswith("/tmp:rw,size=1024m,")  # ≤ memory


def test_sec6_slurm_helper_takes_cpus_and_memory_from_slurms_own_record() -> None:
    line = ("JobId=42 JobName=jpu UserId=jpu-alice(1001) GroupId=jpu-alice(1001) NumCPUs=2 "
            "TRES=cpu=2,mem=3G,node=1,billing=2,gres/gpu=1 WorkDir=/o")  # fmt: skip
    got = limits_of(line, 1001)
    assert got is not None and (got.mem_gb, got.cpus) == (3, min(2, os.cpu_count() or 1))
    assert limits_of(line, 1002) is None  # another account's job: never its limits
    small = limits_of(line.replace("mem=3G", "mem=1500M"), 1001)
    assert small is not None and small.mem_gb == 2  # rounded up to whole GiB
    assert limits_of(line.replace("TRES=cpu=2,mem=3G,", "TRES="), 1001) is None
