-- Events a projection could not apply (SPEC E3, E6). Intake refuses what the database cannot
-- store, so a row here is an alarm, never a silent park: the runner records the event with the
-- error in the same transaction that moves the projection past it, /readyz reports "degraded"
-- while a row exists, and `python -m jpu.tools.replay` lists them. An operator who fixed the cause
-- rebuilds the projection (which clears its rows) or deletes the row.
CREATE TABLE projection_faults (
    projection  text NOT NULL,
    seq         bigint NOT NULL,                   -- stream sequence of the event
    subject     text NOT NULL,
    event_type  text NOT NULL,
    error       text NOT NULL,
    recorded_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (projection, seq)
);
