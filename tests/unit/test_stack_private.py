"""SPEC SEC1: where a root stack keeps what other accounts must reach, outside its 0700 data
directory (jpu.stack.private): one place per data dir, earlier data carried over, never
abandoned or overwritten."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

from jpu.config import load_config
from jpu.stack import private


def test_sec1_the_place_outside_is_one_per_data_dir_and_stable(tmp_path: Path) -> None:
    a, b = tmp_path / "a" / ".jpu", tmp_path / "b" / ".jpu"
    assert private.outside(a, "pg") == private.outside(a, "pg")  # every service, every run
    assert private.outside(a, "pg") != private.outside(b, "pg")
    assert private.outside(a, "outputs").parent == private.SITE_DIR
    assert private.outside(a, "outputs").name.startswith("outputs-")


def test_sec1_the_data_dir_is_made_0700(tmp_path: Path) -> None:
    d = tmp_path / "checkout" / ".jpu"
    d.mkdir(parents=True, mode=0o755)
    private.make_private(d)
    assert d.stat().st_mode & 0o777 == 0o700


@pytest.mark.parametrize("shared", ["/tmp", "/home", "/"])
def test_sec1_a_shared_directory_is_never_made_private(shared: str) -> None:
    before = os.stat(shared).st_mode
    with pytest.raises(RuntimeError, match="shared directory"):
        private.make_private(Path(shared))
    assert os.stat(shared).st_mode == before


def test_sec1_a_configured_output_root_is_kept(tmp_path: Path) -> None:
    config = load_config(env={"JPU_DATA_DIR": str(tmp_path), "JPU_OUTPUT_ROOT": "/shared/out"})
    assert private.chosen_output_root(config, {}) is None
    assert private.output_root(config, {}) == Path("/shared/out")
    env = {"JPU_AGENT_OUTPUT_ROOT": "/nfs/jpu"}
    assert private.output_root(config, env) == Path("/nfs/jpu")
    config = load_config(env={"JPU_DATA_DIR": str(tmp_path)})
    unset = private.output_root(config, {})
    if os.geteuid() == 0:  # root: outside the data dir the job accounts cannot enter
        assert unset == private.outside(tmp_path, "outputs")
    else:  # the jobs run as the stack's own account
        assert unset == tmp_path / "outputs"


def test_sec1_earlier_data_is_moved_once(tmp_path: Path) -> None:
    old, new = tmp_path / "data" / "pg", tmp_path / "site" / "pg-x"
    (old / "pgdata").mkdir(parents=True)
    (old / "pgdata" / "PG_VERSION").write_text("16\n")
    new.parent.mkdir()
    private.carry_over(old, new, merge=False)
    assert (new / "pgdata" / "PG_VERSION").read_text() == "16\n" and not old.exists()
    private.carry_over(old, new, merge=False)  # nothing left to move: a no-op
    assert (new / "pgdata" / "PG_VERSION").exists()


def test_sec1_two_clusters_are_never_merged_nor_overwritten(tmp_path: Path) -> None:
    old, new = tmp_path / "old", tmp_path / "new"
    for d in (old, new):
        (d / "pgdata").mkdir(parents=True)
        (d / "pgdata" / "PG_VERSION").write_text(d.name)
    with pytest.raises(RuntimeError, match="keep one"):
        private.carry_over(old, new, merge=False)
    assert (old / "pgdata" / "PG_VERSION").read_text() == "old"
    assert (new / "pgdata" / "PG_VERSION").read_text() == "new"


def test_sec1_outputs_are_merged_job_by_job(tmp_path: Path) -> None:
    old, new = tmp_path / "old", tmp_path / "new"
    for d, jobs in ((old, ("j1", "j2")), (new, ("j2", "j3"))):
        for job in jobs:
            (d / job / "1").mkdir(parents=True)
            (d / job / "1" / "stdout").write_text(f"{d.name} {job}")
    private.carry_over(old, new, merge=True)
    assert (new / "j1" / "1" / "stdout").read_text() == "old j1"  # moved
    assert (new / "j2" / "1" / "stdout").read_text() == "new j2"  # never overwritten…
    assert (old / "j2" / "1" / "stdout").read_text() == "old j2"  # …nor lost
    assert sorted(os.listdir(old)) == ["j2"]
    private.carry_over(new / "j3", tmp_path / "moved", merge=True)
    assert (tmp_path / "moved" / "1" / "stdout").read_text() == "new j3"


def test_sec1_a_move_across_file_systems_keeps_modes(tmp_path: Path) -> None:
    shm = Path("/dev/shm")
    if not shm.is_dir() or shm.stat().st_dev == tmp_path.stat().st_dev:
        pytest.skip("no second file system here")
    old = tmp_path / "outputs"
    (old / "j1").mkdir(parents=True, mode=0o700)
    (old / "j1" / "stdout").write_text("kept")
    (old / "j1").chmod(0o700)
    new = Path(tempfile.mkdtemp(dir=shm)) / "outputs"
    try:
        private.carry_over(old, new, merge=True)
        assert (new / "j1" / "stdout").read_text() == "kept" and not old.exists()
        assert (new / "j1").stat().st_mode & 0o777 == 0o700
    finally:
        shutil.rmtree(new.parent)


@pytest.mark.skipif(os.geteuid() != 0, reason="the rule is for a stack run as root")
def test_sec1_an_output_root_inside_the_data_dir_is_refused_at_start(tmp_path: Path) -> None:
    inside = str(tmp_path / "outputs")
    config = load_config(env={"JPU_DATA_DIR": str(tmp_path), "JPU_OUTPUT_ROOT": inside})
    with pytest.raises(RuntimeError, match="inside the data dir"):
        private.prepare_output_root(config, {})
    with pytest.raises(RuntimeError, match="inside the data dir"):
        private.prepare_output_root(config, {"JPU_AGENT_OUTPUT_ROOT": str(tmp_path)})
    outside = tmp_path.parent / f"{tmp_path.name}-out"
    assert private.prepare_output_root(config, {"JPU_AGENT_OUTPUT_ROOT": str(outside)}) is None
