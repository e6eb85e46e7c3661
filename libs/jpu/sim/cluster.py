"""The simulated cluster: `gpu_resources` rows kept up to date in place (SPEC §1.2).

The policy only ever sees `Gpu` rows, exactly as the dispatcher builds them from its projection;
this adapter is the simulator's stand-in for the slurm-agent and the GPU pool projection.
A backfill job may keep running on a GPU a reservation holds (SPEC R2), so backfill is tracked
beside the state string, not only in it.
"""

from __future__ import annotations

from jpu.config import Cluster
from jpu.policy.model import Gpu

GpuKey = tuple[str, str, int]  # (node, tier, index)


class SimCluster:
    def __init__(self, cluster: Cluster) -> None:
        self.gpus: list[Gpu] = [
            Gpu(node.name, tier, i)
            for node in cluster.nodes
            for tier, count in sorted(node.gpus.items())
            for i in range(count)
        ]
        self.pos: dict[GpuKey, int] = {
            (g.node, g.tier, g.index): p for p, g in enumerate(self.gpus)
        }
        self.capacity = len(self.gpus)
        self.idle_count = self.capacity  # GPUs free or backfilled (SPEC P2), not reserved
        self.idle_since: dict[int, float] = dict.fromkeys(range(self.capacity), 0.0)
        self.backfill: dict[int, tuple[str, float]] = {}  # position -> (backfill id, since)

    @classmethod
    def from_rows(cls, rows: list[Gpu], now: float) -> SimCluster:
        """A cluster as it stands now (a forward estimate's start), from `gpu_resources` rows.

        Backfill is dropped: it always yields (B4), so a backfilled GPU is simply free here."""
        self = cls(Cluster(tiers=[], nodes=[]))
        self.gpus = [
            Gpu(g.node, g.tier, g.index, "free" if g.state.startswith("backfill:") else g.state)
            for g in rows
        ]
        self.pos = {(g.node, g.tier, g.index): p for p, g in enumerate(self.gpus)}
        self.capacity = len(self.gpus)
        self.idle_count = sum(1 for g in self.gpus if g.state == "free")
        self.idle_since = {p: now for p, g in enumerate(self.gpus) if g.state == "free"}
        return self

    # --- state changes --------------------------------------------------------------------

    def _set(self, p: int, state: str) -> None:
        g = self.gpus[p]
        was_idle = g.state == "free" or g.state.startswith("backfill:")
        now_idle = state == "free" or state.startswith("backfill:")
        self.idle_count += now_idle - was_idle
        bf = self.backfill.get(p) if state.startswith("reserved:") else None
        self.gpus[p] = Gpu(g.node, g.tier, g.index, state, bf[0] if bf else None)  # R2

    def positions(self, node: str, tier: str, gpus: tuple[int, ...] | list[int]) -> list[int]:
        return [self.pos[(node, tier, i)] for i in gpus]

    def take(self, positions: list[int], state: str) -> None:
        """Give GPUs to a job or reservation; they stop being idle."""
        for p in positions:
            self._set(p, state)
            self.idle_since.pop(p, None)

    def free(self, positions: list[int], now: float) -> None:
        """GPUs come back: idle again (to their backfill job if one kept running, SPEC R2)."""
        for p in positions:
            bf = self.backfill.get(p)
            self._set(p, f"backfill:{bf[0]}" if bf else "free")
            self.idle_since[p] = now

    def start_backfill(self, p: int, backfill_id: str, now: float) -> None:
        self.backfill[p] = (backfill_id, now)
        if self.gpus[p].state == "free":
            self._set(p, f"backfill:{backfill_id}")

    def end_backfill(self, p: int) -> tuple[str, float]:
        bf = self.backfill.pop(p)
        state = self.gpus[p].state
        self._set(p, "free" if state.startswith("backfill:") else state)
        return bf

    def state(self, p: int) -> str:
        return self.gpus[p].state
