-- SPEC U5: the directory a job runs in, as submitted (JobSubmitted.chdir; NULL: the attempt's
-- JOB_OUTPUT_DIR). Rebuilt from the log like every other column of the jobs projection (E3).
ALTER TABLE jobs ADD COLUMN chdir text;
