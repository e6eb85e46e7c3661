-- LLM backfill instances (SPEC §6 B1–B3) from BackfillStarted / BackfillEnded: where each one
-- runs and the endpoint it serves, whatever its GPU's state in gpu_resources (a reservation may
-- cover a backfilled GPU, R2/B4). An ended instance keeps its row with ended_at set, so a
-- late or duplicated BackfillStarted can never bring it back.
CREATE TABLE backfill_instances (
    backfill_id    text PRIMARY KEY,
    node           text NOT NULL,
    tier           text NOT NULL,
    gpu            integer NOT NULL,
    backend_job_id text,
    endpoint       text,                         -- OpenAI-compatible base URL, when it has one
    started_at     double precision NOT NULL,
    ended_at       double precision,             -- NULL while it runs
    end_reason     text,                         -- preempted | reclaimed | exited | failed
    updated_seq    bigint NOT NULL
);
CREATE INDEX backfill_instances_live_idx ON backfill_instances (node, tier, gpu)
    WHERE ended_at IS NULL;
