-- SPEC X8: an attempt ended FAILED by GPU OOM and the retry is not decided yet (the dispatcher
-- records JobRetryScheduled or JobRetryDeclined once). While pending the job keeps its slot (S1).
ALTER TABLE jobs ADD COLUMN oom_pending boolean NOT NULL DEFAULT false;
