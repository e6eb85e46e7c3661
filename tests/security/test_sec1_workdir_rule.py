"""SPEC SEC1: the pure rule of where a job may run (jpu.policy.workdir.outside_roots_problem),
on resolved paths. Live (422 at submit, refusal at launch): test_sec1_workdir_live.py."""

from __future__ import annotations

import pytest

from jpu.config import load_config
from jpu.policy.workdir import DEFAULT_ROOTS, outside_roots_problem

DATA = "/work/jpu/.jpu"


@pytest.mark.parametrize(
    "path",
    ["/home/alice/proj", "/home", "/srv/x", "/data/set/a", "/scratch/u", "/tmp/jpu-test-1/w"],
)
def test_sec1_under_a_root_is_allowed(path: str) -> None:
    assert outside_roots_problem("chdir", path, DEFAULT_ROOTS, DATA) is None


@pytest.mark.parametrize(
    ("path", "why"),
    [
        ("/proc", "/proc, the host's own"),
        ("/proc/1/root", "/proc, the host's own"),
        ("/sys/fs/cgroup", "/sys, the host's own"),
        ("/run", "/run, the host's own"),
        ("/run/user/0", "/run, the host's own"),
        ("/dev/shm", "/dev, the host's own"),
        ("/etc", "/etc, the host's own"),
        ("/tmp", "not under the site's workdir_roots"),  # /tmp itself: never
        ("/", "not under the site's workdir_roots"),
        ("/work/jpu", "not under the site's workdir_roots"),
        ("/var/lib/postgresql", "not under the site's workdir_roots"),
        ("/homely", "not under the site's workdir_roots"),  # a prefix is not a parent
        ("/tmpfoo", "not under the site's workdir_roots"),
    ],
)
def test_sec1_outside_the_roots_or_in_the_hosts_trees_is_refused(path: str, why: str) -> None:
    got = outside_roots_problem("chdir", path, DEFAULT_ROOTS, DATA)
    assert got is not None and got.startswith("chdir: ") and why in got


def test_sec1_the_refusal_names_the_allowed_roots() -> None:
    got = outside_roots_problem("chdir", "/opt/x", DEFAULT_ROOTS, DATA)
    assert got == (
        "chdir: /opt/x (symlinks followed) is not under the site's workdir_roots; "
        "allowed: /home, /srv, /data, /scratch, subdirectories of /tmp"
    )


@pytest.mark.parametrize("path", [DATA, f"{DATA}/pg/run", f"{DATA}/outputs/j/1"])
def test_sec1_the_platforms_data_dir_is_refused_even_under_a_root(path: str) -> None:
    roots = [*DEFAULT_ROOTS, "/work"]
    got = outside_roots_problem("chdir", path, roots, DATA)
    assert got is not None and "platform's data directory /work/jpu/.jpu" in got
    assert outside_roots_problem("chdir", "/work/jpu/src", roots, DATA) is None


def test_sec1_the_hosts_trees_are_refused_whatever_the_roots_say() -> None:
    assert outside_roots_problem("chdir", "/etc/x", ["/"], DATA) is not None
    assert outside_roots_problem("chdir", "/opt/x", ["/"], DATA) is None


def test_sec1_the_field_is_named_for_output_files_too() -> None:
    got = outside_roots_problem("output", "/proc/self", DEFAULT_ROOTS, DATA)
    assert got is not None and got.startswith("output: ")


def test_sec1_the_default_configuration_has_the_roots() -> None:
    assert tuple(load_config(env={}).workdir_roots) == DEFAULT_ROOTS
