-- SPEC Q7: a task of a job array is a job of its own; these columns name its array and index
-- (NULL for a single job). Rebuilt from the log like every other column of the jobs projection
-- (E3): the array's one JobSubmitted becomes one row per task.
ALTER TABLE jobs ADD COLUMN array_id text, ADD COLUMN array_task integer;
CREATE INDEX jobs_array_id ON jobs (array_id) WHERE array_id IS NOT NULL;
