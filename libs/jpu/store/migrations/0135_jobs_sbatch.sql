-- SPEC U6: the sbatch fields of a job's request (-o, -e, --open-mode, --signal) and the warnings
-- its submit gave, as one jsonb (NULL: none). Rebuilt from JobSubmitted like every column (E3).
ALTER TABLE jobs ADD COLUMN sbatch jsonb;
