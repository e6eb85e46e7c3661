"""The notifier's sent-log in PostgreSQL (SPEC Q10; migration 0120_notifications.sql).

A notification is recorded `pending` when decided, in one transaction with the notifier's
position, and marked `sent` only after the receiver accepted it: at-least-once. A notifier
killed between the receiver's answer and the mark sends that one notification again on restart
(at most one duplicate per kill); none is lost.
"""

from __future__ import annotations

from dataclasses import dataclass

import asyncpg

from jpu.domain.notify import Notification


@dataclass(frozen=True, slots=True)
class Due:
    event_id: str
    channel: str
    recipient: str
    subject: str
    body: str
    attempts: int

    @property
    def key(self) -> str:
        return f"{self.event_id}/{self.channel}/{self.recipient}"


async def position(pool: asyncpg.Pool) -> int | None:
    """The last seq whose notifications were decided; None before the first start."""
    value = await pool.fetchval("SELECT last_seq FROM notifier_position WHERE id = 1")
    return None if value is None else int(value)


async def record(pool: asyncpg.Pool, owed: list[Notification], seq: int, now: float) -> None:
    """Record `owed` (pending) and move the position to `seq`, together; a notification already
    recorded (the same key decided again) is kept as it is."""
    async with pool.acquire() as conn, conn.transaction():
        await conn.executemany(
            "INSERT INTO notification_sent (event_id, channel, recipient, seq, job_id, kind,"
            " subject, body, next_at, decided_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $9)"
            " ON CONFLICT DO NOTHING",
            [
                (
                    n.event_id,
                    n.channel,
                    n.recipient,
                    n.seq,
                    n.job_id,
                    n.kind,
                    n.subject,
                    n.text,
                    now,
                )
                for n in owed
            ],
        )
        await conn.execute(
            "INSERT INTO notifier_position (id, last_seq) VALUES (1, $1)"
            " ON CONFLICT (id) DO UPDATE SET last_seq = GREATEST(notifier_position.last_seq, $1)",
            seq,
        )


async def due(pool: asyncpg.Pool, now: float, inflight: list[str], limit: int = 200) -> list[Due]:
    """Pending rows due now, oldest first, except those being sent (`inflight` keys): sends
    that hang until their timeout never hold back the rows behind them."""
    rows = await pool.fetch(
        "SELECT event_id, channel, recipient, subject, body, attempts FROM notification_sent"
        " WHERE state = 'pending' AND next_at <= $1"
        " AND NOT (event_id || '/' || channel || '/' || recipient = ANY($3::text[]))"
        " ORDER BY next_at, seq LIMIT $2",
        now,
        limit,
        inflight,
    )
    return [Due(**dict(r)) for r in rows]


async def mark_sent(pool: asyncpg.Pool, d: Due, now: float) -> None:
    await pool.execute(
        "UPDATE notification_sent SET state = 'sent', sent_at = $4, attempts = attempts + 1"
        " WHERE event_id = $1 AND channel = $2 AND recipient = $3",
        d.event_id,
        d.channel,
        d.recipient,
        now,
    )


async def mark_failed(pool: asyncpg.Pool, d: Due, error: str, next_at: float | None) -> None:
    """Another try at `next_at`, or abandoned (None): kept with its last error."""
    await pool.execute(
        "UPDATE notification_sent SET attempts = attempts + 1, last_error = $4,"
        " state = CASE WHEN $5::float8 IS NULL THEN 'abandoned' ELSE state END,"
        " next_at = COALESCE($5::float8, next_at)"
        " WHERE event_id = $1 AND channel = $2 AND recipient = $3",
        d.event_id,
        d.channel,
        d.recipient,
        error[:1000],
        next_at,
    )
