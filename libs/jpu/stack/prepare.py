"""One-time preparation before the services start: schema, stream, inventory, labs; the demo's
users only for the demo (`make run`, SPEC SEC3)."""

from __future__ import annotations

import logging

from jpu import commands
from jpu.bus.snapshots import SnapshotStore
from jpu.bus.views import ViewStore
from jpu.config import Config
from jpu.events import NodeInventoryObserved, new_event_id, subject_for
from jpu.runtime.clock import Clock, SystemClock
from jpu.runtime.edges import Edges, connect_edges
from jpu.tools.admin import DemoUser, seed_config_labs, seed_demo
from jpu.tools.identities import Identities, adopt

log = logging.getLogger("jpu.stack")


async def publish_missing_inventory(edges: Edges, clock: Clock) -> list[str]:
    """NodeInventoryObserved for each configured node the log has never seen (SPEC §1.2).

    The gpu_resources projection then holds the configured cluster before any Slurm agent
    reports; a node already observed is left to what was observed. Returns the nodes published.
    """
    published = []
    for node in edges.config.nodes:
        event = NodeInventoryObserved(
            event_id=new_event_id(), ts=clock.now(), node=node.name, gpus=dict(node.gpus)
        )
        if await edges.bus.last_subject_seq(subject_for(event, edges.config.subject_prefix)):
            continue
        await edges.bus.append(event)
        published.append(node.name)
    if published:
        log.info("inventory published from configuration", extra={"nodes": published})
    return published


async def prepare(
    config: Config, clock: Clock | None = None, *, demo: bool = False
) -> list[DemoUser]:
    """Migrate, ensure the stream, publish the configured inventory, seed the configured labs;
    with `demo` (only `make run`: SPEC SEC3) the demo users and their well-known tokens too."""
    edges = await connect_edges(config, name="stack", timeout_s=30.0)
    try:
        # SPEC SEC2: only the admin creates streams; the services' identities bind to these.
        await SnapshotStore.configured(edges.bus.js, edges.bus.stream, config)._bucket()
        await ViewStore(edges.bus)._value(commands.queue_view_key(edges.bus.stream), create=True)
        clock = clock or SystemClock()
        await publish_missing_inventory(edges, clock)
        # SPEC SEC3: identities are events. An earlier version's rows become events first (their
        # history then starts in the log); the projector folds them into the tables once it runs.
        await adopt(edges.bus, edges.pool, clock.now())
        ids = Identities(edges.bus, None, clock.now(), by="prepare")
        await seed_config_labs(ids, config)
        return await seed_demo(ids) if demo else []
    finally:
        await edges.close()


FIRST_ADMIN = """No demo users here (SPEC SEC3). Create the first admin with the admin tool,
where the services' JPU_DATABASE_URL is set (e.g. inside a service container):
  python -m jpu.tools.admin lab add <LAB>
  python -m jpu.tools.admin user add <NAME> --lab <LAB> --role admin
  python -m jpu.tools.admin token create <NAME>     # printed once: keep it"""
