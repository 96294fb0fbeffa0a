-- Version 5 (0.9.0): a needs_review run can be resolved by a person (or by the daemon
-- when its branch was merged by hand).
--
-- runs.resolution: NULL, or the resolution as JSON
-- {"resolution": "merged" | "dismissed", "by", "reason", "at_ms", "auto"}.  The run's
-- state stays needs_review (run states are a closed set in protocol v1); the ticket
-- follows in the same transaction.
ALTER TABLE runs ADD COLUMN resolution TEXT;
