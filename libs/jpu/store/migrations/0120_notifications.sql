-- SPEC Q10: the notifier's sent-log. One row per (event, channel, recipient), written when the
-- notification is decided, in the same transaction as the notifier's position in the log, so a
-- decision is recorded once; `state` goes pending -> sent (or abandoned after the bounded
-- retries). A row is marked sent only after the receiver accepted it: a notifier killed between
-- the two sends it again once on restart (at-least-once, docs/notifications.md).
CREATE TABLE notification_sent (
    event_id    text NOT NULL,
    channel     text NOT NULL,                 -- email | webhook
    recipient   text NOT NULL,                 -- the address or the URL
    seq         bigint NOT NULL,               -- the event's stream seq
    job_id      text NOT NULL,
    kind        text NOT NULL,                 -- BEGIN | END | FAIL | REQUEUE
    subject     text NOT NULL,
    body        text NOT NULL,                 -- the sentence
    state       text NOT NULL DEFAULT 'pending',
    attempts    integer NOT NULL DEFAULT 0,
    next_at     double precision NOT NULL,     -- when the next try is due (backoff)
    last_error  text,
    decided_at  double precision NOT NULL,
    sent_at     double precision,
    PRIMARY KEY (event_id, channel, recipient)
);
CREATE INDEX notification_sent_due_idx ON notification_sent (next_at) WHERE state = 'pending';

-- How far the notifier has decided: events at or below it are only folded on a restart.
CREATE TABLE notifier_position (
    id       integer PRIMARY KEY DEFAULT 1 CHECK (id = 1),
    last_seq bigint NOT NULL
);
