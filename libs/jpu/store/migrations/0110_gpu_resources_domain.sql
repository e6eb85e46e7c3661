-- The GPU rows become the domain's answer (SPEC §1.2, P1): each keeps its facts (holder, backfill
-- instance, availability) and the holding jobs' views; the rows are rebuilt from the log.
ALTER TABLE gpu_resources ADD COLUMN holder text, ADD COLUMN backfill_id text;
CREATE TABLE gpu_resources_jobs (
    job_id text PRIMARY KEY,
    view   jsonb NOT NULL
);
DELETE FROM gpu_resources;
UPDATE projection_positions SET last_seq = 0 WHERE projection = 'gpu_resources';
