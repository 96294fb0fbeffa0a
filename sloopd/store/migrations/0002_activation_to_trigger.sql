-- Version 2 (0.4.0): an activation is now a trigger.  The table is rebuilt
-- (not renamed) so that the migrated schema is the one schema.sql creates,
-- and every id A<n> is rewritten to TR<n> in place, keeping its ordinal.
-- Runs gain the stage log and stage-tagged output records.
-- 0.4.0 also remembers a --manual post on the ticket.
ALTER TABLE tickets ADD COLUMN manual INTEGER NOT NULL DEFAULT 0;

CREATE TABLE triggers (
    ordinal       INTEGER PRIMARY KEY AUTOINCREMENT,
    id            TEXT NOT NULL UNIQUE,
    ticket        TEXT NOT NULL REFERENCES tickets (id),
    due_at_ms     INTEGER NOT NULL,
    created_at_ms INTEGER NOT NULL,
    state         TEXT NOT NULL,
    run           TEXT
);
INSERT INTO triggers (ordinal, id, ticket, due_at_ms, created_at_ms, state, run)
    SELECT ordinal, 'TR' || ordinal, ticket, due_at_ms, created_at_ms, state, run
    FROM activations;
-- Ordinals are never reused: carry the sequence over before the old table goes.
DELETE FROM sqlite_sequence WHERE name = 'triggers';
INSERT INTO sqlite_sequence (name, seq)
    SELECT 'triggers', seq FROM sqlite_sequence WHERE name = 'activations';
DROP TABLE activations;
CREATE INDEX triggers_queued ON triggers (state, due_at_ms);
CREATE INDEX triggers_ticket ON triggers (ticket, state);

CREATE TABLE runs_new (
    ordinal         INTEGER PRIMARY KEY AUTOINCREMENT,
    id              TEXT NOT NULL UNIQUE,
    alias           TEXT NOT NULL UNIQUE,
    ticket          TEXT NOT NULL REFERENCES tickets (id),
    attempt         INTEGER NOT NULL,
    state           TEXT NOT NULL,
    trigger         TEXT,
    flow            TEXT NOT NULL,
    flow_snapshot   TEXT NOT NULL,
    branch          TEXT NOT NULL,
    worktree        TEXT NOT NULL,
    claimed_at_ms   INTEGER NOT NULL,
    started_at_ms   INTEGER,
    finished_at_ms  INTEGER,
    agent_exit_code INTEGER,
    halt            TEXT,
    reason          TEXT,
    classification  TEXT,
    UNIQUE (ticket, attempt)
);
INSERT INTO runs_new
    SELECT ordinal, id, alias, ticket, attempt, state,
           CASE WHEN activation LIKE 'A%' THEN 'TR' || substr(activation, 2) ELSE activation END,
           flow, flow_snapshot, branch, worktree, claimed_at_ms, started_at_ms,
           finished_at_ms, agent_exit_code, halt, reason, classification
    FROM runs;
DELETE FROM sqlite_sequence WHERE name = 'runs_new';
INSERT INTO sqlite_sequence (name, seq)
    SELECT 'runs_new', seq FROM sqlite_sequence WHERE name = 'runs';
DROP TABLE runs;
ALTER TABLE runs_new RENAME TO runs;
CREATE INDEX runs_state ON runs (state);

-- The walk's source of truth: a run's steps, appended, never updated.
-- kind: stage_started | stage_finished | seat_started | seat_finished |
--       verdict | returned | halted; data holds the step's facts as JSON.
CREATE TABLE stage_log (
    run     TEXT NOT NULL,
    seq     INTEGER NOT NULL,
    kind    TEXT NOT NULL,
    stage   TEXT,
    attempt INTEGER,
    seat    INTEGER,
    at_ms   INTEGER NOT NULL,
    data    TEXT NOT NULL DEFAULT '{}',
    PRIMARY KEY (run, seq)
) WITHOUT ROWID;

-- Captured output, clustered on (run, position).  Positions count per run,
-- per (run, stage) and per (run, stage, attempt), so a page and its elided
-- count cost what the page costs.  body is the record's wire JSON without
-- its cursor, stored once at ingest.  stage is NULL on rows captured before
-- stages were recorded.
CREATE TABLE log_records (
    run                TEXT NOT NULL,
    position           INTEGER NOT NULL,
    stage              TEXT,
    attempt            INTEGER,
    stage_position     INTEGER,
    execution_position INTEGER,
    stream             TEXT NOT NULL,
    ts_ms              INTEGER NOT NULL,
    body               BLOB NOT NULL,
    PRIMARY KEY (run, position)
) WITHOUT ROWID;
-- One index per selector form, each in position order, carrying the ordinal
-- that turns an elided count into a subtraction.
CREATE INDEX log_records_stage ON log_records (run, stage, position, stage_position);
CREATE INDEX log_records_execution
    ON log_records (run, stage, attempt, position, execution_position);

-- Scoped event pages read per-ticket and per-run ranges.
CREATE INDEX events_ticket ON events (ticket, position);
CREATE INDEX events_run ON events (run, position);

-- The gate (one row): open, cooldown (a vendor limit, until until_ms) or paused
-- by an operator.  Kept in the store so a restart keeps it and its deadline.
CREATE TABLE gate (
    id            INTEGER PRIMARY KEY CHECK (id = 1),
    state         TEXT NOT NULL,
    until_ms      INTEGER,
    reason        TEXT,
    changed_at_ms INTEGER NOT NULL
);
