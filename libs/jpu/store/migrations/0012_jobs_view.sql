-- SPEC E3: a jobs row is a function of the domain's JobView (jpu.domain.states), which the row
-- keeps here so the next event is folded by the services' own code (no second state machine).
-- Rows written before have no view: the jobs projection starts over from sequence 1 (the
-- projector rebuilds it on its next start; the other projections keep their positions).
ALTER TABLE jobs ADD COLUMN view jsonb;
DELETE FROM jobs;
DELETE FROM projection_faults WHERE projection = 'jobs';
UPDATE projection_positions SET last_seq = 0 WHERE projection = 'jobs';
