"""E3: a projection applies each event after its position once, in seq order — the slice taken
from a chunk already in the log's order gives what the general path (dedupe, sort) gives."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from jpu.events import Delivered, MaintenanceChanged
from jpu.store.projection import _fresh

_E = MaintenanceChanged(event_id="", ts=0.0, state="none", message="", by="")


def _reference(batch: list[Delivered], last: int, upto: int | None) -> list[Delivered]:
    """The general path: the last copy of each seq after `last` (up to `upto`), sorted."""
    by_seq = {d.seq: d for d in batch if d.seq > last and (upto is None or d.seq <= upto)}
    return [by_seq[s] for s in sorted(by_seq)]


@given(
    seqs=st.lists(st.integers(1, 60), max_size=40),
    in_order=st.booleans(),
    last=st.integers(0, 70),
    upto=st.none() | st.integers(0, 70),
)
def test_E3_fresh_events_are_the_same_whether_the_chunk_is_in_log_order_or_not(
    seqs: list[int], in_order: bool, last: int, upto: int | None
) -> None:
    if in_order:  # a rebuild's chunk: strictly increasing seqs (the slice)
        seqs = sorted(set(seqs))
    batch = [Delivered(s, f"s{i}", _E, {}) for i, s in enumerate(seqs)]
    assert _fresh(batch, last, upto) == _reference(batch, last, upto)
