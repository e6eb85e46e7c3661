"""Execution backends (SPEC X9): the contract (base.py), the local backend (local/) and the
Slurm backend (slurm/); shared plumbing (process, isolation, accounts, outputs) beside them.

`make_backend(config)` picks one by `slurm_backend` (local | slurm). Isolation (X4) comes from
the shared configuration (`isolation`, `container_runtime`, `container_image`,
`container_storage`, `container_shared_paths`, `apptainer_image`, `apptainer_bin`, `apptainer_args`;
JPU_LOCAL_ISOLATION / JPU_SLURM_ISOLATION override `isolation` per backend). Backend settings
not in the shared configuration are read from the environment:
  local: JPU_LOCAL_ACCOUNT_TEMPLATE (default "jpu-{user}"), JPU_LOCAL_CREATE_ACCOUNTS (1 | 0),
         JPU_LOCAL_FALLBACK_ACCOUNT (default "nobody").
  slurm: JPU_SLURM_CONF (else SLURM_CONF, else Slurm's default),
         JPU_SLURM_ACCOUNT_TEMPLATE (default "jpu-{user}"; "{user}" where users have cluster
         accounts), JPU_SLURM_CREATE_ACCOUNTS (1 | 0), JPU_SLURM_FALLBACK_ACCOUNT ("nobody"),
         JPU_SLURM_PYSLURM (auto | off), JPU_SLURM_TIMEOUT_GRACE_S (sub-minute limits; default
         the cancel grace), JPU_SLURM_BACKFILL_PARTITION (the preemptible one; default "llm").
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from jpu.backends.accounts import AccountMap
from jpu.backends.base import (
    TERMINAL_STATES,
    BackendError,
    BackendState,
    BackendStatus,
    ExecutionBackend,
    LaunchSpec,
    NodeInventory,
    UnknownBackendJob,
)
from jpu.backends.isolation import Apptainer, Podman
from jpu.backends.workspaces import pip_site
from jpu.config import Config, ConfigError

__all__ = [
    "TERMINAL_STATES",
    "BackendError",
    "BackendState",
    "BackendStatus",
    "ExecutionBackend",
    "LaunchSpec",
    "NodeInventory",
    "UnknownBackendJob",
    "make_backend",
]


def apptainer_of(config: Config) -> Apptainer | None:
    """X4: Apptainer is configured where `apptainer_image` is set."""
    if not config.apptainer_image:
        return None
    return Apptainer(config.apptainer_image, config.apptainer_bin, tuple(config.apptainer_args))


def account_map(config: Config, env: Mapping[str, str] | None = None) -> AccountMap:
    """The configured backend's user → Unix account map (X4), for the gateway to name the
    account and check the `chdir` at submit (U5) as the agent will run the job."""
    env = os.environ if env is None else env
    pre = "JPU_SLURM_" if config.slurm_backend == "slurm" else "JPU_LOCAL_"
    return AccountMap(
        env.get(pre + "ACCOUNT_TEMPLATE", "jpu-{user}"),
        env.get(pre + "CREATE_ACCOUNTS", "1") != "0",
        env.get(pre + "FALLBACK_ACCOUNT", "nobody"),
    )


def podman_of(config: Config) -> Podman:
    """X4a: the podman settings of `isolation: container` (the runtime checks them at start)."""
    return Podman(
        config.container_image,
        storage=config.container_storage,
        shared=tuple(config.container_shared_paths),
    )


def make_backend(config: Config, env: Mapping[str, str] | None = None) -> ExecutionBackend:
    env = os.environ if env is None else env
    accounts = account_map(config, env)  # the one the gateway checks a chdir with (U5, SEC1)
    if config.slurm_backend == "local":
        from jpu.backends.local.backend import LocalBackend, LocalSettings

        return LocalBackend(
            LocalSettings(
                data_dir=Path(config.data_dir),
                nodes=list(config.nodes),
                timeout_grace_s=config.cancel_grace_s,
                kill_failed_after_s=config.kill_failed_after_s,
                isolation=env.get("JPU_LOCAL_ISOLATION", config.isolation),
                apptainer=apptainer_of(config),
                container_runtime=config.container_runtime,
                podman=podman_of(config),
                pip=pip_site(config.workspace_pip_index_url, config.workspace_pip_ca_bundle),
                account_template=accounts.template,
                create_accounts=accounts.create,
                fallback_account=accounts.fallback,
                workdir_roots=tuple(config.workdir_roots),  # SEC1
            )
        )
    if config.slurm_backend == "slurm":
        from jpu.backends.slurm.backend import SlurmBackend, SlurmSettings

        return SlurmBackend(
            SlurmSettings(
                data_dir=Path(config.data_dir),
                conf=env.get("JPU_SLURM_CONF") or env.get("SLURM_CONF") or None,
                timeout_grace_s=float(env.get("JPU_SLURM_TIMEOUT_GRACE_S", config.cancel_grace_s)),
                kill_failed_after_s=config.kill_failed_after_s,
                isolation=env.get("JPU_SLURM_ISOLATION", config.isolation),
                apptainer=apptainer_of(config),
                container_runtime=config.container_runtime,
                podman=podman_of(config),
                pip=pip_site(config.workspace_pip_index_url, config.workspace_pip_ca_bundle),
                account_template=accounts.template,
                create_accounts=accounts.create,
                fallback_account=accounts.fallback,
                pyslurm=env.get("JPU_SLURM_PYSLURM", "auto"),
                backfill_partition=env.get("JPU_SLURM_BACKFILL_PARTITION", "llm"),
                submit_concurrency=int(env.get("JPU_SLURM_SUBMIT_CONCURRENCY", "8")),
            )
        )
    raise ConfigError(f"slurm_backend: {config.slurm_backend!r} is not available (local | slurm)")
