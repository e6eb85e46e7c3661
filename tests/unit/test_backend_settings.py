"""SPEC X4, U5, SEC1: the gateway checks a job's `chdir` as the Unix account the agent will run
the job as, so both read that account map from one place (`backends.account_map`), whichever
backend is configured, and the two backends' shared settings are one definition."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path

import pytest

from jpu.backends import account_map, make_backend
from jpu.backends.local.backend import LocalBackend
from jpu.backends.local.settings import LocalSettings
from jpu.backends.settings import BackendSettings
from jpu.backends.slurm.backend import SlurmBackend
from jpu.backends.slurm.settings import SlurmSettings
from jpu.config import load_config


@pytest.mark.parametrize(("backend", "prefix"), [("local", "JPU_LOCAL_"), ("slurm", "JPU_SLURM_")])
def test_X4_U5_the_agent_runs_a_job_as_the_account_the_gateway_checked(
    tmp_path: Path, backend: str, prefix: str
) -> None:
    env = {
        prefix + "ACCOUNT_TEMPLATE": "lab-{user}",
        prefix + "CREATE_ACCOUNTS": "0",
        prefix + "FALLBACK_ACCOUNT": "daemon",
    }
    config = load_config(
        env={"JPU_DATA_DIR": str(tmp_path), "JPU_ISOLATION": "none", "JPU_SLURM_BACKEND": backend}
    )
    assert config.slurm_backend == backend
    checked = account_map(config, env)  # what the gateway checks a chdir with
    made = make_backend(config, env)  # what the agent runs the job as
    assert isinstance(made, LocalBackend | SlurmBackend), made
    runs = made.accounts
    assert (runs.template, runs.create, runs.fallback) == ("lab-{user}", False, "daemon")
    assert (checked.template, checked.create, checked.fallback) == (
        runs.template,
        runs.create,
        runs.fallback,
    )


def test_X9_both_backends_share_one_definition_of_their_common_settings() -> None:
    shared = {f.name for f in fields(BackendSettings)}
    assert {"data_dir", "isolation", "account_template", "kill_failed_after_s"} <= shared
    for settings in (LocalSettings, SlurmSettings):
        assert issubclass(settings, BackendSettings)
        redefined = set(settings.__annotations__) & shared  # its own class body only
        assert not redefined, f"{settings.__name__} defines again {sorted(redefined)}"
    # a backend's own fields keep their places after data_dir
    assert SlurmSettings(Path("/d"), "/etc/slurm.conf").conf == "/etc/slurm.conf"
    assert LocalSettings(Path("/d"), []).nodes == []
