"""The projections the services read (SPEC E3). `ALL` is what a rebuild or an audit covers."""

from __future__ import annotations

from typing import Final

from jpu.store.projection import Projection
from jpu.store.projections import (
    backfill_instances,
    gpu_resources,
    identities,
    jobs,
    lab_usage,
    maintenance,
    usage_ledger,
    workspaces,
)

ALL: Final[tuple[Projection, ...]] = (
    jobs.projection,
    lab_usage.projection,
    maintenance.projection,
    gpu_resources.projection,
    backfill_instances.projection,
    usage_ledger.projection,
    workspaces.projection,
    identities.projection,
)

BY_NAME: Final[dict[str, Projection]] = {p.name: p for p in ALL}

__all__ = [
    "ALL",
    "BY_NAME",
    "backfill_instances",
    "gpu_resources",
    "identities",
    "jobs",
    "lab_usage",
    "maintenance",
    "usage_ledger",
    "workspaces",
]
