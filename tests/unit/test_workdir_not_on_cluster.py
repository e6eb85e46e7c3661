"""SPEC U5 in a deployment: a `chdir` the cluster does not have is refused at submit (before a
GPU is held) where the gateway sees the storage jobs run in; else the node decides."""

from __future__ import annotations

from jpu.policy.workdir import not_on_cluster_problem


def test_U5_a_missing_chdir_is_refused_naming_what_is_missing_and_the_ways_out() -> None:
    got = not_on_cluster_problem("/home/alice/project", "/home/alice", sees_job_storage=True)
    assert got is not None and got.startswith("chdir: /home/alice/project does not exist on")
    assert "(/home/alice is missing where jobs run)" in got
    assert "--chdir DIR" in got and "output directory" in got and "GPU" in got


def test_U5_the_chdir_itself_missing_is_said_as_it() -> None:
    got = not_on_cluster_problem("/srv/p/", "/srv/p", sees_job_storage=True)
    assert got is not None and "(it is missing where jobs run)" in got


def test_U5_an_existing_or_unknowable_chdir_is_not_refused() -> None:
    assert not_on_cluster_problem("/srv/p", None, sees_job_storage=True) is None


def test_U5_a_gateway_that_does_not_see_the_nodes_storage_leaves_it_to_the_node() -> None:
    assert not_on_cluster_problem("/home/alice/p", "/home/alice", sees_job_storage=False) is None
