-- `jpu-admin user remove` (issue 34): a removed user keeps its row (its name is in the log's jobs,
-- charges and tokens, which the audit reads) but is marked removed: its tokens are revoked, none
-- can be created or authenticate, and `user add` does not bring the name back silently.
ALTER TABLE users ADD COLUMN IF NOT EXISTS removed_at timestamptz;
