"""SPEC §8 `GET /v1/jobs/{id}/files`, X2: the files of an attempt's JOB_OUTPUT_DIR
(jpu.backends.jobfiles) — which paths are refused, the Range header, and never following what the
job's own account may have planted in its output directory (a link out of it, a FIFO, another
account's file)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from jpu.backends import jobfiles, joblogs


def _attempt(root: Path, job: str = "j1", attempt: int = 1) -> Path:
    d = joblogs.attempt_dir(root, job, attempt)
    (d / "sub" / "deeper").mkdir(parents=True)
    (d / "stdout").write_bytes(b"out\n")
    (d / "model.ckpt").write_bytes(b"0123456789")
    (d / "sub" / "metrics.csv").write_text("step,loss\n1,0.5\n")
    return d


@pytest.mark.parametrize(
    ("path", "why"),
    [
        ("../j2/1/stdout", "'..'"),
        ("sub/../../j2", "'..'"),
        ("..", "'..'"),
        ("/etc/shadow", "absolute"),
        ("a\x00b", "NUL"),
        ("x" * 256, "255 bytes"),
        ("a/" * 2049, "4096 bytes"),
        ("\udcff", "UTF-8"),
    ],
)
def test_files_path_problem_refuses_traversal_absolute_nul_and_overlong(
    path: str, why: str
) -> None:
    problem = jobfiles.path_problem(path)
    assert problem is not None and why in problem


def test_files_harmless_paths_are_accepted_and_normalised() -> None:
    for ok in ("", ".", "sub", "sub/", "./sub//metrics.csv", "..x", "x..", "a b/ü.txt"):
        assert jobfiles.path_problem(ok) is None, ok
    assert jobfiles.names("./sub//metrics.csv") == ["sub", "metrics.csv"]
    assert jobfiles.names(".") == jobfiles.names("") == []


@pytest.mark.parametrize(
    ("header", "size", "expected"),
    [
        (None, 10, None),
        ("bytes=0-3", 10, (0, 4)),
        ("bytes=4-", 10, (4, 10)),
        ("bytes=8-100", 10, (8, 10)),  # past the end: up to the end
        ("bytes=-3", 10, (7, 10)),  # the last 3
        ("bytes=-30", 10, (0, 10)),
        ("Bytes = 2 - 2", 10, (2, 3)),
        ("bytes=0-1,4-5", 10, None),  # several ranges: the whole file
        ("bytes=5-2", 10, None),  # malformed: ignored
        ("items=0-3", 10, None),  # another unit: ignored
        ("bytes=-", 10, None),
        ("bytes=abc", 10, None),
    ],
)
def test_files_http_range(header: str | None, size: int, expected: tuple[int, int] | None) -> None:
    assert jobfiles.http_range(header, size) == expected


@pytest.mark.parametrize(("header", "size"), [("bytes=10-", 10), ("bytes=-0", 10), ("bytes=-5", 0)])
def test_files_http_range_unsatisfiable(header: str, size: int) -> None:
    with pytest.raises(jobfiles.RangeUnsatisfiable):
        jobfiles.http_range(header, size)


def test_files_lists_a_directory_sorted_with_type_size_mtime_and_pages(tmp_path: Path) -> None:
    d = _attempt(tmp_path)
    os.utime(d / "model.ckpt", (1_700_000_000, 1_700_000_000))
    entries, more = jobfiles.list_dir(tmp_path, "j1", 1, "", after=None, limit=100)
    assert not more
    assert [(e.name, e.type, e.size) for e in entries] == [
        ("model.ckpt", "file", 10), ("stdout", "file", 4), ("sub", "dir", None),
    ]  # fmt: skip
    assert entries[0].mtime == 1_700_000_000
    sub, _ = jobfiles.list_dir(tmp_path, "j1", 1, "sub/", after=None, limit=100)
    assert [(e.name, e.type) for e in sub] == [("deeper", "dir"), ("metrics.csv", "file")]
    first, more = jobfiles.list_dir(tmp_path, "j1", 1, "", after=None, limit=2)
    assert [e.name for e in first] == ["model.ckpt", "stdout"] and more
    rest, more = jobfiles.list_dir(tmp_path, "j1", 1, "", after="stdout", limit=2)
    assert [e.name for e in rest] == ["sub"] and not more


def test_files_opens_a_file_below_the_attempt(tmp_path: Path) -> None:
    _attempt(tmp_path)
    with jobfiles.open_file(tmp_path, "j1", 1, "sub/metrics.csv") as f:
        assert f.read(0, f.size()) == b"step,loss\n1,0.5\n"


def test_files_missing_is_path_missing(tmp_path: Path) -> None:
    with pytest.raises(jobfiles.PathMissing, match="no output directory"):
        jobfiles.list_dir(tmp_path, "j1", 1, "", after=None, limit=10)
    _attempt(tmp_path)
    with pytest.raises(jobfiles.PathMissing, match="'sub/nope'"):
        jobfiles.open_file(tmp_path, "j1", 1, "sub/nope")
    with pytest.raises(jobfiles.PathMissing):
        jobfiles.list_dir(tmp_path, "j1", 1, "nope/deeper", after=None, limit=10)


def test_files_symlinks_are_never_followed_out_or_in(tmp_path: Path) -> None:
    d = _attempt(tmp_path)
    secret = tmp_path / "secret"
    secret.write_text("root only")
    other = _attempt(tmp_path, "j2")  # another user's job
    (d / "shadow").symlink_to("/etc/shadow")
    (d / "theirs").symlink_to(other)  # a directory link to another job's output
    (d / "sub" / "inside").symlink_to(d / "model.ckpt")  # even one that stays inside
    (d / "secret").symlink_to(secret)
    for path in ("shadow", "secret", "sub/inside", "theirs/stdout", "theirs"):
        with pytest.raises(jobfiles.PathRefused, match="symbolic link"):
            jobfiles.open_file(tmp_path, "j1", 1, path)
    for path in ("theirs", "theirs/sub"):
        with pytest.raises(jobfiles.PathRefused, match="symbolic link"):
            jobfiles.list_dir(tmp_path, "j1", 1, path, after=None, limit=10)
    listed = jobfiles.list_dir(tmp_path, "j1", 1, "", after=None, limit=100)[0]
    types = {e.name: (e.type, e.size) for e in listed}
    assert types["shadow"] == types["theirs"] == ("symlink", None)  # listed, never resolved


def test_files_fifos_directories_and_files_in_the_wrong_place_are_refused(tmp_path: Path) -> None:
    d = _attempt(tmp_path)
    os.mkfifo(d / "pipe")  # would block a reader without O_NONBLOCK
    with pytest.raises(jobfiles.PathRefused, match="not a plain file"):
        jobfiles.open_file(tmp_path, "j1", 1, "pipe")
    with pytest.raises(jobfiles.PathRefused, match="is a directory"):
        jobfiles.open_file(tmp_path, "j1", 1, "sub")
    with pytest.raises(jobfiles.PathRefused, match="directory itself"):
        jobfiles.open_file(tmp_path, "j1", 1, ".")
    with pytest.raises(jobfiles.PathRefused, match="is a file"):
        jobfiles.list_dir(tmp_path, "j1", 1, "model.ckpt", after=None, limit=10)
    with pytest.raises(jobfiles.PathRefused, match="is a file"):
        jobfiles.open_file(tmp_path, "j1", 1, "model.ckpt/x")
    entries = jobfiles.list_dir(tmp_path, "j1", 1, "", after=None, limit=100)[0]
    assert {e.name: e.type for e in entries}["pipe"] == "other"


@pytest.mark.usefixtures("as_root")  # to own files as another account
def test_files_a_file_or_directory_not_owned_by_the_attempts_account_is_refused(
    tmp_path: Path,
) -> None:
    d = _attempt(tmp_path)
    for p in (d, d / "sub", d / "sub" / "metrics.csv"):
        os.chown(p, 65534, 65534)  # the job's account owns these…
    with pytest.raises(jobfiles.PathRefused, match="not a plain file"):
        jobfiles.open_file(tmp_path, "j1", 1, "model.ckpt")  # …not this (root's, a hard link)
    with pytest.raises(jobfiles.PathRefused, match="not a directory of the job"):
        jobfiles.list_dir(tmp_path, "j1", 1, "sub/deeper", after=None, limit=10)
    assert jobfiles.open_file(tmp_path, "j1", 1, "sub/metrics.csv").size() == 16
    listed = jobfiles.list_dir(tmp_path, "j1", 1, "", after=None, limit=100)[0]
    assert {e.name: e.type for e in listed}["model.ckpt"] == "other"


def test_files_a_name_that_is_not_utf8_is_listed_escaped(tmp_path: Path) -> None:
    d = _attempt(tmp_path)
    (d / os.fsdecode(b"bad\xff.txt")).write_text("x")
    listed = jobfiles.list_dir(tmp_path, "j1", 1, "", after=None, limit=100)[0]
    assert "bad\\xff.txt" in [e.name for e in listed]


def test_files_an_attempt_directory_swapped_for_a_link_is_refused(tmp_path: Path) -> None:
    other = _attempt(tmp_path, "j2")  # the job's account owns <job_id>/: it could do this
    (tmp_path / "j1").mkdir()
    (tmp_path / "j1" / "1").symlink_to(other)
    with pytest.raises(joblogs.OutputError, match="not a plain directory"):
        jobfiles.list_dir(tmp_path, "j1", 1, "", after=None, limit=10)
    with pytest.raises(joblogs.OutputError, match="not a plain directory"):
        jobfiles.open_file(tmp_path, "j1", 1, "stdout")
