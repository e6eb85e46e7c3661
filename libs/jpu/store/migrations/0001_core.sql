-- Core projections (SPEC E3). Every projection table is a fold of the event log; the tracking
-- row in projection_positions is written in the same transaction as the rows it covers.
-- schema_migrations itself is created by jpu.store.db.migrate before any file runs.

CREATE TABLE projection_positions (
    projection text PRIMARY KEY,
    last_seq   bigint NOT NULL DEFAULT 0          -- last stream sequence applied (E3)
);

-- The job view (SPEC S1–S3). NB: "user" is a reserved word in SQL: always quote it
-- (unquoted `user` silently means current_user).
CREATE TABLE jobs (
    job_id            text PRIMARY KEY,
    lab               text NOT NULL,
    "user"            text NOT NULL,
    name              text NOT NULL,
    num_gpus          integer NOT NULL,
    tiers             text[],                      -- NULL = any tier
    min_vram_gb       integer,
    time_limit_s      integer,
    env               jsonb NOT NULL DEFAULT '{}',
    command           text NOT NULL,
    state             text NOT NULL,
    attempt           integer NOT NULL DEFAULT 1,
    queue_entered_at  double precision,            -- set by JobPromoted (Q5)
    submitted_at      double precision NOT NULL,
    node              text,                        -- placement of the current/last attempt
    tier              text,
    gpus              integer[],
    dispatched_at     double precision,
    started_at        double precision,
    ended_at          double precision,
    reservation_node  text,                        -- the reservation held now (R2), if any
    reservation_tier  text,
    reservation_gpus  integer[],
    reservation_since double precision,
    backend_job_id    text,                        -- Slurm job id (X6)
    isolation         text,                        -- X4: what isolation the attempt got
    exit_code         integer,
    end_reason        text,
    oom               boolean NOT NULL DEFAULT false,
    usage_charged     double precision NOT NULL DEFAULT 0,   -- TFLOP-s, from UsageCharged
    kill_failed       boolean NOT NULL DEFAULT false,         -- X5
    cancel_requested_by text,
    updated_at        double precision NOT NULL,   -- ts of the last event that changed the row
    updated_seq       bigint NOT NULL              -- stream seq of that event
);
CREATE INDEX jobs_state_idx ON jobs (state);
CREATE INDEX jobs_lab_idx ON jobs (lab);
CREATE INDEX jobs_user_idx ON jobs ("user");

-- Lab usage (SPEC F3): stored (value, as_of); readers decay it to "now".
CREATE TABLE lab_usage (
    lab         text PRIMARY KEY,
    value       double precision NOT NULL,
    as_of       double precision NOT NULL,
    updated_seq bigint NOT NULL
);

-- One point per charge, for the console's usage chart (U2).
CREATE TABLE usage_history (
    seq    bigint PRIMARY KEY,                     -- the UsageCharged event's stream seq
    lab    text NOT NULL,
    as_of  double precision NOT NULL,
    value  double precision NOT NULL,
    amount double precision NOT NULL,
    job_id text,
    reason text NOT NULL
);
CREATE INDEX usage_history_lab_idx ON usage_history (lab, as_of);

-- Maintenance mode (SPEC §7): a single row; absent means NORMAL.
CREATE TABLE maintenance (
    id          integer PRIMARY KEY DEFAULT 1 CHECK (id = 1),
    state       text NOT NULL,
    since       double precision NOT NULL,
    message     text NOT NULL DEFAULT '',
    by          text NOT NULL DEFAULT '',
    updated_seq bigint NOT NULL
);

-- One row per physical GPU (SPEC §1.2, P1: placements = GROUP BY node, tier).
-- state ∈ free | job:<id> | reserved:<id> | backfill:<id> | down.
-- `available` = the backend last saw this GPU up on an undrained node; a GPU released while
-- unavailable becomes 'down' instead of 'free'.
CREATE TABLE gpu_resources (
    node        text NOT NULL,
    tier        text NOT NULL,
    index       integer NOT NULL,
    state       text NOT NULL DEFAULT 'free',
    available   boolean NOT NULL DEFAULT true,
    updated_seq bigint NOT NULL,
    PRIMARY KEY (node, tier, index)
);
CREATE INDEX gpu_resources_state_idx ON gpu_resources (state);
