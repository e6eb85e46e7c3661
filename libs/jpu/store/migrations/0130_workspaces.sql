-- SPEC X4a: workspaces, folded from their events (jpu.store.projections.workspaces), and the
-- workspace a job runs in (JobSubmitted.workspace). Both rebuilt from the log (E3).
ALTER TABLE jobs ADD COLUMN workspace text;

CREATE TABLE workspaces (
    workspace_id text PRIMARY KEY,
    scope text NOT NULL,            -- user | lab
    "user" text NOT NULL,           -- who asked for the last build (a user workspace's owner)
    lab text NOT NULL,
    name text NOT NULL,
    state text NOT NULL,            -- BUILDING | READY | FAILED
    build integer NOT NULL,
    source_kind text NOT NULL,
    source text NOT NULL,
    requested_at double precision NOT NULL,
    reason text,
    image text,
    size bigint,
    created_at double precision,
    log text NOT NULL DEFAULT '',
    last_seq bigint NOT NULL
);
CREATE INDEX workspaces_lab ON workspaces (lab);
