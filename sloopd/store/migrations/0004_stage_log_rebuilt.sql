-- Version 4 (0.9.0): the stage log gains the merge queue's rows.
--
-- No table changes: a stage log may now hold rows of kind 'rebuilt' (the merge queue
-- sent the walk back to its landing's sync) and stage_finished rows with "ended_by".
-- The version moves so that a 0.8 binary refuses this store (a store newer than it)
-- instead of replaying such a log as corrupt_log and failing every run in flight.
SELECT 1;
