"""Appending to the log: optimistic concurrency and de-duplication (SPEC E2)."""

from __future__ import annotations

import asyncio

import pytest

from jpu.bus import ConcurrencyConflict, EventBus
from jpu.events import subject_for
from jpu.testing.sample_events import promoted, submitted


async def test_E2_concurrent_writers_on_one_job_exactly_one_wins(bus: EventBus, nats_url: str):
    other = await EventBus.connect(nats_url, stream=bus.stream, prefix=bus.prefix)
    try:
        first = await bus.append(submitted("j1"), expected_last_subject_seq=0)
        subject = subject_for(submitted("j1"), bus.prefix)
        last = await bus.last_subject_seq(subject)
        assert last == first

        a, b = promoted("j1", 2.0), promoted("j1", 3.0)
        results = await asyncio.gather(
            bus.append(a, expected_last_subject_seq=last),
            other.append(b, expected_last_subject_seq=last),
            return_exceptions=True,
        )
        wins = [r for r in results if isinstance(r, int)]
        losses = [r for r in results if isinstance(r, ConcurrencyConflict)]
        assert len(wins) == 1 and len(losses) == 1, results
        assert losses[0].subject == subject
        assert losses[0].expected_last_subject_seq == last

        # The loser re-reads the job's last sequence and retries against it.
        loser, loser_event = (other, b) if isinstance(results[1], Exception) else (bus, a)
        now = await loser.last_subject_seq(subject)
        assert now == wins[0]
        retried = await loser.append(loser_event, expected_last_subject_seq=now)
        assert retried > now

        trail = await bus.job_events("j1")
        assert [d.seq for d in trail] == [first, wins[0], retried]
        assert trail[-1].event == loser_event
    finally:
        await other.close()


async def test_E2_expected_zero_means_subject_must_be_new(bus: EventBus):
    await bus.append(submitted("j2"), expected_last_subject_seq=0)
    with pytest.raises(ConcurrencyConflict):
        await bus.append(submitted("j2"), expected_last_subject_seq=0)


async def test_E2_duplicate_event_id_is_deduplicated(bus: EventBus):
    event = submitted("j3")
    s1 = await bus.append(event)
    s2 = await bus.append(event)
    assert s1 == s2
    # A retried batch with an already-appended event does not duplicate it either.
    other = promoted("j3")
    seqs = await bus.append_many([event, other, other])
    assert seqs[0] == s1 and seqs[1] == seqs[2]
    assert [d.event for d in await bus.job_events("j3")] == [event, other]
    assert await bus.last_seq() == seqs[1]


async def test_E2_retry_after_lost_ack_with_expected_seq_is_not_a_conflict(bus: EventBus):
    # A writer whose ack was lost retries the same event with the same expectation.
    event = submitted("j4")
    s1 = await bus.append(event, expected_last_subject_seq=0)
    assert await bus.append(event, expected_last_subject_seq=0) == s1


async def test_append_many_keeps_order_per_subject(bus: EventBus):
    events = [promoted(f"job{i % 3}", float(i)) for i in range(300)]
    seqs = await bus.append_many(events)
    assert seqs == sorted(seqs) and len(set(seqs)) == 300
    trail = await bus.job_events("job1")
    assert [d.event for d in trail] == events[1::3]


async def test_last_subject_seq_is_zero_for_an_unknown_subject(bus: EventBus):
    assert await bus.last_subject_seq(f"{bus.prefix}.job.nobody") == 0
    assert await bus.job_events("nobody") == []


async def test_ensure_stream_idempotent(bus: EventBus, nats_url: str):
    seq = await bus.append(submitted("j5"))
    before = await bus.js.stream_info(bus.stream)
    # Several services starting at once all ensure the same streams.
    others = [
        await EventBus.connect(nats_url, stream=bus.stream, prefix=bus.prefix) for _ in range(3)
    ]
    try:
        await asyncio.gather(bus.ensure_stream(), *(o.ensure_stream() for o in others))
        await bus.ensure_stream()
    finally:
        for o in others:
            await o.close()
    after = await bus.js.stream_info(bus.stream)
    assert after.config == before.config
    assert after.config.subjects == [f"{bus.prefix}.>"]
    assert after.config.storage == "file" and after.config.duplicate_window == 120.0
    assert (await bus.js.stream_info(bus.dlq_stream)).config.subjects == [f"{bus.prefix}_dlq.>"]
    assert await bus.last_seq() == seq
