"""SPEC §8 logs, U5, X2: reading an attempt's stdout/stderr (jpu.backends.joblogs) — the byte range,
and never following what the job's own account may have planted in its output directory."""

from __future__ import annotations

import os
from hashlib import sha1
from pathlib import Path

import pytest

from jpu.backends import joblogs
from jpu.config import load_config


def _attempt(root: Path, job: str = "j1", attempt: int = 1, out: bytes = b"0123456789") -> Path:
    d = joblogs.attempt_dir(root, job, attempt)
    d.mkdir(parents=True)
    (d / "stdout").write_bytes(out)
    (d / "stderr").write_bytes(b"")
    return d


@pytest.mark.parametrize(
    ("size", "offset", "limit", "expected"),
    [
        (10, 0, None, (0, 10)),
        (10, 3, 4, (3, 7)),
        (10, 8, 100, (8, 10)),
        (10, -4, None, (6, 10)),  # from the end, like `tail -c 4`
        (10, -40, None, (0, 10)),
        (10, -4, 2, (6, 8)),
        (10, 25, None, (25, 25)),  # past the end: empty, at that offset
        (0, 0, None, (0, 0)),
    ],
)
def test_U5_byte_range(
    size: int, offset: int, limit: int | None, expected: tuple[int, int]
) -> None:
    assert joblogs.byte_range(size, offset, limit) == expected


def test_U5_reads_stdout_and_stderr_of_an_attempt(tmp_path: Path) -> None:
    _attempt(tmp_path, out=b"a" * (joblogs.CHUNK + 10))
    with joblogs.open_output(tmp_path, "j1", 1, "stdout") as out:  # type: ignore[union-attr]
        assert out.size() == joblogs.CHUNK + 10
        assert out.read(0, 5) == b"aaaaa"
        assert len(out.read(0, out.size())) == joblogs.CHUNK  # one chunk at a time
        assert out.read(out.size(), out.size() + 9) == b""
    assert joblogs.open_output(tmp_path, "j1", 1, "stderr") is not None


def test_U5_no_output_yet_is_none(tmp_path: Path) -> None:
    assert joblogs.open_output(tmp_path / "missing-root", "j1", 1, "stdout") is None
    assert joblogs.open_output(tmp_path, "j1", 1, "stdout") is None
    _attempt(tmp_path)
    assert joblogs.open_output(tmp_path, "j1", 2, "stdout") is None
    assert joblogs.open_output(tmp_path, "../j1", 1, "stdout") is None  # never a path
    assert joblogs.open_output(tmp_path, "j1", 0, "stdout") is None


def test_U5_planted_symlinks_and_fifos_are_refused(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_text("root only")
    d = _attempt(tmp_path)
    (d / "stdout").unlink()
    (d / "stdout").symlink_to(secret)  # the job's account owns d: it can do this
    with pytest.raises(joblogs.OutputError, match="not a plain file"):
        joblogs.open_output(tmp_path, "j1", 1, "stdout")
    (d / "stderr").unlink()
    os.mkfifo(d / "stderr")  # would block a reader without O_NONBLOCK
    with pytest.raises(joblogs.OutputError, match="not a plain file"):
        joblogs.open_output(tmp_path, "j1", 1, "stderr")
    other = tmp_path / "other"
    other.mkdir()
    (other / "stdout").write_text("someone else's")
    (tmp_path / "j2").mkdir()
    (tmp_path / "j2" / "1").symlink_to(other)  # a directory link, one level up
    with pytest.raises(joblogs.OutputError, match="not a plain directory"):
        joblogs.open_output(tmp_path, "j2", 1, "stdout")


@pytest.mark.usefixtures("as_root")  # to own files as another account
def test_U5_a_file_not_owned_by_the_attempts_account_is_refused(tmp_path: Path) -> None:
    d = _attempt(tmp_path)
    os.chown(d, 65534, 65534)  # the job's account owns its attempt directory…
    with pytest.raises(joblogs.OutputError, match="not a plain file"):
        joblogs.open_output(tmp_path, "j1", 1, "stdout")  # …but not this (root's) file
    os.chown(d / "stdout", 65534, 65534)
    assert joblogs.open_output(tmp_path, "j1", 1, "stdout") is not None


def test_U5_output_root_is_the_agents(tmp_path: Path) -> None:
    config = load_config(env={"JPU_DATA_DIR": str(tmp_path)})
    # SEC1: root's data dir is 0700, so its jobs' outputs live outside it, the same for every
    # service that computes it (a gateway started alone finds what the agent wrote)
    outside = (
        Path("/var/lib/jpu-share") / f"outputs-{sha1(str(tmp_path).encode()).hexdigest()[:10]}"
    )
    expected = outside if os.geteuid() == 0 else tmp_path / "outputs"
    assert joblogs.output_root(config, env={}) == expected
    config = load_config(env={"JPU_DATA_DIR": str(tmp_path), "JPU_OUTPUT_ROOT": "/shared/out"})
    assert joblogs.output_root(config, env={}) == Path("/shared/out")
    env = {"JPU_AGENT_OUTPUT_ROOT": "/nfs/jpu"}  # the agent's own override wins for both
    assert joblogs.output_root(config, env=env) == Path("/nfs/jpu")
