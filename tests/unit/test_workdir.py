"""SPEC U5 and Q1: a job's `chdir` — validated at submit (absolute, no NUL, ≤ PATH_MAX),
carried by JobSubmitted (v2), entered by the job's own account before its script runs; the
Slurm batch wrapper's lines run for real in bash here (with a stand-in `apptainer` that prints
its arguments), the local chain in tests/integration/test_isolation_local.py."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import msgspec
import pytest

from jpu.backends import LaunchSpec
from jpu.backends.isolation import Apptainer, container, netns
from jpu.backends.slurm.submit import job_env, wrapper
from jpu.domain.states import request_digest
from jpu.domain.validation import validate_submit
from jpu.events import JobSubmitted, decode, encode
from jpu.policy.workdir import MAX_CHDIR_BYTES, chdir_problem


def _spec(**kw: object) -> LaunchSpec:
    base: dict[str, object] = {
        "job_id": "j1", "attempt": 1, "user": "alice", "node": "n", "tier": "t", "gpus": [0],
        "num_gpus": 1, "command": "true", "output_dir": "/out/j1/1",
    }  # fmt: skip
    return LaunchSpec(**{**base, **kw})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ("relative/dir", "absolute"),
        ("", "absolute"),
        ("/a\x00b", "NUL"),
        ("/" + "x" * MAX_CHDIR_BYTES, "at most"),
        ("/\ud800", "UTF-8"),
        (7, "string"),
        (["/x"], "string"),
    ],
)
def test_U5_bad_chdir_is_refused_naming_why(value: object, why: str) -> None:
    assert why in str(chdir_problem(value))
    problems = validate_submit({"command": "x", "num_gpus": 1, "chdir": value}, ["rtx4090"])
    assert any(p.field == "chdir" or "chdir" in p.message for p in problems), problems


def test_U5_good_chdir_is_accepted() -> None:
    for value in ("/", "/home/alice/project", "/data/한글 dir", "/" + "x" * (MAX_CHDIR_BYTES - 1)):
        assert chdir_problem(value) is None
    body = {"command": "x", "num_gpus": 1, "chdir": "/home/alice/p"}
    assert validate_submit(body, ["rtx4090"]) == []


def test_E1_U5_job_submitted_v2_carries_chdir_and_v1_still_decodes() -> None:
    kw = {"event_id": "e", "ts": 1.0, "job_id": "j", "lab": "L", "user": "u", "name": "n",
          "command": "c", "num_gpus": 1}  # fmt: skip
    event = JobSubmitted(**kw, chdir="/p")  # type: ignore[arg-type]
    assert event.schema_version >= 2 and decode(encode(event)) == event  # v3: array (Q7)
    v1 = msgspec.json.encode({"type": "JobSubmitted", "schema_version": 1, **kw})
    old = decode(v1)
    assert isinstance(old, JobSubmitted) and old.chdir is None
    # Q6: the digest of a v1 body is unchanged; another chdir is another body
    assert request_digest(old) == request_digest(JobSubmitted(**kw))  # type: ignore[arg-type]
    assert request_digest(event) != request_digest(old)


def _run_wrapper(tmp_path: Path, isolation: object, workdir: Path, out: Path) -> tuple[int, str]:
    script = tmp_path / "batch.sh"
    script.write_bytes(wrapper(isolation))  # type: ignore[arg-type]
    (out / "job.sh").write_text('echo "pwd=$(pwd)"\n')
    env = {"PATH": os.environ["PATH"], "JOB_OUTPUT_DIR": str(out), "JPU_WORKDIR": str(workdir)}
    done = subprocess.run(
        ["/bin/bash", str(script)], env=env, capture_output=True, text=True, timeout=30, cwd="/"
    )
    return done.returncode, done.stdout + done.stderr


def test_U5_slurm_wrapper_enters_the_chdir_or_fails_clearly(tmp_path: Path) -> None:
    out, work = tmp_path / "out", tmp_path / "work"
    out.mkdir()
    work.mkdir()
    assert job_env(_spec(chdir=str(work)), "jpu-alice")["JPU_WORKDIR"] == str(work)
    assert job_env(_spec(), "jpu-alice")["JPU_WORKDIR"] == _spec().output_dir
    rc, text = _run_wrapper(tmp_path, netns([]), work, out)
    assert rc == 0 and text == f"pwd={work}\n", text
    rc, text = _run_wrapper(tmp_path, netns([]), tmp_path / "missing", out)
    assert rc == 1 and f"jpu: cannot run in {tmp_path / 'missing'} (chdir)" in text, text


def test_U5_slurm_wrapper_binds_the_chdir_into_apptainer_once(tmp_path: Path) -> None:
    out, work = tmp_path / "out", tmp_path / "work"
    out.mkdir()
    work.mkdir()
    fake = tmp_path / "apptainer"
    fake.write_text('#!/bin/bash\nprintf "%s\\n" "$@"\n')
    fake.chmod(0o755)
    image = container(Apptainer(str(tmp_path / "img.sif"), str(fake)))
    rc, text = _run_wrapper(tmp_path, image, work, out)
    argv = text.splitlines()
    assert rc == 0, text
    i = argv.index("--no-eval")
    assert argv[i + 1 : i + 7] == ["--bind", str(out), "--bind", str(work), "--pwd", str(work)]
    rc, text = _run_wrapper(tmp_path, image, out, out)  # no chdir: OUT, bound once
    argv = text.splitlines()
    i = argv.index("--no-eval")
    assert argv[i + 1 : i + 5] == ["--bind", str(out), "--pwd", str(out)] and rc == 0


def test_U5_SEC1_intake_answers_a_chdir_from_what_the_account_may_do_there() -> None:
    """jpu.domain.submission.chdir_answer: SEC1 refuses whoever the account is; a directory
    the account cannot enter is refused naming `chdir` and the account; one it cannot write is
    accepted with a warning; undecidable here (None) is the node's to decide at launch."""
    from jpu.domain.submission import chdir_answer
    from jpu.policy.workdir import Access

    roots = ["/home", "/tmp/*"]
    outside = "chdir: /opt/x (symlinks followed) is not under the site's workdir_roots; …"
    refusal, warnings = chdir_answer("/opt/x", None, outside, "", None, roots)
    assert refusal is not None and refusal.error is not None and warnings == []
    assert (refusal.status, refusal.error.message) == (422, outside)
    assert refusal.error.details == {"field": "chdir", "chdir": "/opt/x", "workdir_roots": roots}
    shut = Access(enter=False, write=False, message="the job runs as Unix account jpu-a, …")
    refusal, _ = chdir_answer("/home/p", None, None, "jpu-a", shut, roots)
    assert refusal is not None and refusal.error is not None
    assert refusal.error.message == f"chdir: {shut.message}"
    assert refusal.error.details == {"field": "chdir", "account": "jpu-a", "chdir": "/home/p"}
    read_only = Access(enter=True, write=False, message="cannot write /home/p")
    assert chdir_answer("/home/p", None, None, "jpu-a", read_only, roots) == (
        None, [{"field": "chdir", "account": "jpu-a", "message": "chdir: cannot write /home/p"}]
    )  # fmt: skip
    assert chdir_answer("/home/p", None, None, "jpu-a", Access(enter=True, write=True), roots) == (
        None, []
    )  # fmt: skip
    assert chdir_answer("/home/p", None, None, "jpu-a", None, roots) == (None, [])
    # a folder the cluster has not (a laptop's): refused before anything else, with the reason
    # the CLI falls back on (U5, jpu.policy.workdir.not_on_cluster_problem)
    unseen = "chdir: /Users/a/p does not exist on the cluster (…)"
    refusal, _ = chdir_answer("/Users/a/p", unseen, outside, "", None, roots)
    assert refusal is not None and refusal.error is not None
    assert refusal.error.details == {
        "field": "chdir", "chdir": "/Users/a/p", "reason": "not_on_cluster"
    }  # fmt: skip
