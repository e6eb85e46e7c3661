"""A snapshot + the log's tail equals a full replay, for generated logs (SPEC E3, E6).

The logs come from the simulator (the services' policy on random workloads: reservations,
demotions, swaps, OOM retries, cancels, backfill, usage charges), cut at every point.
"""

from __future__ import annotations

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jpu.bus import Delivered
from jpu.domain.cluster import ClusterState
from jpu.domain.codec import MAGIC, SCHEMA_VERSION, SnapshotInvalid, assign, pack, unpack
from jpu.sim.params import SimParams
from jpu.testing.fold import fold
from jpu.testing.workloads import CLUSTER, simulated_log, workloads


def _log(jobs, backfill: bool) -> list[Delivered]:
    return simulated_log(jobs, SimParams(backfill=backfill, half_life_s=900))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(jobs=workloads(), backfill=st.booleans(), cut=st.floats(0.0, 1.0), bounded=st.booleans())
def test_E3_snapshot_plus_tail_equals_a_full_replay(
    jobs, backfill: bool, cut: float, bounded: bool
) -> None:
    """Also with the services' bounded state (ended jobs dropped, SPEC O6)."""
    log = _log(jobs, backfill)
    k = int(len(log) * cut)
    full = fold(log, ClusterState.new(CLUSTER, keep_ended=not bounded))
    header, restored = unpack(
        pack(fold(log[:k], ClusterState.new(CLUSTER, keep_ended=not bounded)), "JPU", 1.0), CLUSTER
    )
    assert header.seq == (log[k - 1].seq if k else 0)
    held = ClusterState.new(CLUSTER, keep_ended=not bounded)  # the service's own object
    assign(held, restored)
    assert fold(log[k:], held) == full
    if bounded:  # memory follows the work in flight: every job held is still live
        assert all(not j.terminal or j.oom_pending for j in full.jobs.values())


def test_E3_a_snapshot_at_every_cut_of_one_log_equals_the_full_replay() -> None:
    from jpu.sim.workload import WorkloadJob

    jobs = [
        WorkloadJob(id=f"j{i}", lab="ABC"[i % 3], user=f"u{i % 4 + 1}", submit_s=float(20 * i),
                    num_gpus=1 + i % 4, duration_s=float(100 + 37 * i),
                    peak_vram_gb=16.0 if i % 5 == 0 else None,
                    cancel_s=300.0 if i % 7 == 3 else None)
        for i in range(14)
    ]  # fmt: skip
    log = _log(jobs, backfill=True)
    full = fold(log, ClusterState.new(CLUSTER))
    for k in range(len(log) + 1):
        _, restored = unpack(pack(fold(log[:k], ClusterState.new(CLUSTER)), "JPU", 1.0), CLUSTER)
        assert fold(log[k:], restored) == full, k


def test_E3_a_damaged_or_foreign_snapshot_is_refused_with_the_reason() -> None:
    from jpu.sim.workload import WorkloadJob

    jobs = [WorkloadJob(id="j0", lab="A", user="u1", submit_s=0.0, num_gpus=2, duration_s=60.0)]
    good = pack(fold(_log(jobs, backfill=False), ClusterState.new(CLUSTER)), "JPU", 1.0)
    with pytest.raises(SnapshotInvalid, match="checksum"):
        unpack(good[:-5], CLUSTER)  # a writer killed mid-write
    flipped = bytearray(good)
    flipped[-1] ^= 0xFF
    with pytest.raises(SnapshotInvalid, match="checksum"):
        unpack(bytes(flipped), CLUSTER)
    head, _, payload = good[len(MAGIC) :].partition(b"\n")
    other = msgspec.json.decode(head)
    other["schema"] = SCHEMA_VERSION + 1
    with pytest.raises(SnapshotInvalid, match="schema version"):
        unpack(MAGIC + msgspec.json.encode(other) + b"\n" + payload, CLUSTER)
    with pytest.raises(SnapshotInvalid, match="not a snapshot"):
        unpack(b"garbage", CLUSTER)
