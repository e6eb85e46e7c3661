"""PostgreSQL side of JPU-Share: pool, migrations, exactly-once projections (SPEC E3)."""

from jpu.store.db import (
    create_database,
    create_pool,
    drop_database,
    migrate,
    migration_files,
    with_database,
)
from jpu.store.projection import (
    NOTIFY_CHANNEL,
    Projection,
    apply_batch,
    last_applied,
    run_projection,
    wait_applied,
)
from jpu.store.rebuilding import rebuild

__all__ = [
    "NOTIFY_CHANNEL",
    "Projection",
    "apply_batch",
    "create_database",
    "create_pool",
    "drop_database",
    "last_applied",
    "migrate",
    "migration_files",
    "rebuild",
    "run_projection",
    "wait_applied",
    "with_database",
]
