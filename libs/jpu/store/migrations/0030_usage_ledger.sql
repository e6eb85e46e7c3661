-- SPEC F5: every charge with what it paid for (jpu.explain.usage.Ledger), so that
-- explain-usage and the usage statement read an index, not the whole log, however long it is.
-- A fold of the log like every projection (E3): rebuilt and audited from it.
CREATE TABLE usage_ledger (
    seq         bigint PRIMARY KEY,            -- the UsageCharged event's stream seq
    charge_id   text NOT NULL,
    lab         text NOT NULL,
    reason      text NOT NULL,
    kind        text NOT NULL,                 -- run | reservation | initial
    job_id      text,
    attempt     integer,
    "user"      text,
    at          double precision NOT NULL,     -- the charge's as_of (F3)
    amount      double precision NOT NULL,
    held        jsonb NOT NULL,                -- [{what, tier, gpu_seconds, tflops}]
    value_after double precision NOT NULL
);
CREATE INDEX usage_ledger_lab_idx ON usage_ledger (lab, at);
CREATE INDEX usage_ledger_at_idx ON usage_ledger (at);

-- What the ledger fold carries between events: `src:<charge id>` (what a charge will pay for,
-- until its UsageCharged) and `lazy:<job id>` (reservation time riding with the attempt, R4/F4).
CREATE TABLE usage_ledger_pending (
    key   text PRIMARY KEY,
    held  jsonb NOT NULL
);

-- Job -> lab and user, for the charges' user column.
CREATE TABLE usage_ledger_jobs (
    job_id text PRIMARY KEY,
    lab    text NOT NULL,
    "user" text NOT NULL
);
