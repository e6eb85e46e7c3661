"""SPEC X5: what podman says of a container counts, not how it exited. A podman client hit by a
signal of its own (on Slurm, `scancel --full` signals every process of the batch step, the node
helper's podman calls too) can exit 0 having said and done nothing: that is no answer, never a
state nor a delivered signal. Stand-ins for podman are real executables that exit 0 silently
(`true`) or say what podman says."""

from __future__ import annotations

import pytest

from jpu.backends import containers


def test_X5_a_silent_podman_is_no_answer_about_its_container() -> None:
    with pytest.raises(containers.EngineError, match="podman said '' of jpu-slurm-7"):
        containers.state(["true"], "jpu-slurm-7")


def test_X5_a_silent_podman_signalled_nothing() -> None:
    assert containers.kill(["true"], "jpu-slurm-7", "TERM") is False


def test_X5_podman_answers_are_read() -> None:
    # `echo` stands in for podman: it says its arguments back, the container's name last
    assert containers.kill(["echo"], "jpu-slurm-7", "TERM") is True
    with pytest.raises(containers.EngineError):  # echo's words are no container state
        containers.state(["echo"], "jpu-slurm-7")
    said = ["sh", "-c", 'echo "true 0"', "podman"]  # the rest become sh's $0, $1, …
    assert containers.state(said, "jpu-slurm-7") == "running"
    said = ["sh", "-c", 'echo "false 137"', "podman"]
    assert containers.state(said, "jpu-slurm-7") == 137
