-- The current schema of the store; its version is SCHEMA_VERSION in migrations.py.
-- A change here needs a migration that produces the same structure from the
-- previous version (tests/migration proves the two agree).
CREATE TABLE schema_migrations (
    version       INTEGER PRIMARY KEY,
    name          TEXT NOT NULL,
    applied_at_ms INTEGER NOT NULL
);

-- Ordinals come from AUTOINCREMENT so that they are never reused.
CREATE TABLE tickets (
    ordinal       INTEGER PRIMARY KEY AUTOINCREMENT,
    id            TEXT NOT NULL UNIQUE,
    name          TEXT NOT NULL UNIQUE,
    path          TEXT NOT NULL UNIQUE,
    title         TEXT NOT NULL,
    body          TEXT NOT NULL,
    project       TEXT NOT NULL,
    flow          TEXT NOT NULL,
    priority      INTEGER NOT NULL DEFAULT 0,
    state         TEXT NOT NULL,
    created_at_ms INTEGER NOT NULL,
    updated_at_ms INTEGER NOT NULL,
    -- Posted with --manual: only an explicit 'run' queues its triggers.
    manual        INTEGER NOT NULL DEFAULT 0
);
-- A project reference (and the project_exists check) seeks instead of scanning.
CREATE INDEX tickets_project ON tickets (project);

-- state: queued | claimed | cancelled.  Only queued triggers are shown.
CREATE TABLE triggers (
    ordinal       INTEGER PRIMARY KEY AUTOINCREMENT,
    id            TEXT NOT NULL UNIQUE,
    ticket        TEXT NOT NULL REFERENCES tickets (id),
    due_at_ms     INTEGER NOT NULL,
    created_at_ms INTEGER NOT NULL,
    state         TEXT NOT NULL,
    run           TEXT
);
CREATE INDEX triggers_queued ON triggers (state, due_at_ms);
CREATE INDEX triggers_ticket ON triggers (ticket, state);

CREATE TABLE runs (
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
    -- (0.9.0) NULL, or how a person resolved a needs_review run (JSON; migration 0005).
    resolution      TEXT,
    UNIQUE (ticket, attempt)
);
CREATE INDEX runs_state ON runs (state);

-- The append-only activity feed; position is the cursor's ordinal.  project is
-- the ticket's project, copied at append (and rewritten when a re-post moves the
-- ticket), so that a project scope is one range of events_project; NULL on
-- repository-wide events.
CREATE TABLE events (
    position INTEGER PRIMARY KEY AUTOINCREMENT,
    kind     TEXT NOT NULL,
    at_ms    INTEGER NOT NULL,
    ticket   TEXT,
    run      TEXT,
    data     TEXT NOT NULL DEFAULT '{}',
    project  TEXT
);
CREATE INDEX events_ticket ON events (ticket, position);
CREATE INDEX events_run ON events (run, position);
CREATE INDEX events_project ON events (project, position);
-- A ticket that moves to another project (a re-post) takes its events along,
-- so events_project keeps serving project scopes; only when the project changed.
CREATE TRIGGER tickets_project_moves AFTER UPDATE OF project ON tickets
WHEN old.project IS NOT new.project
BEGIN
    UPDATE events SET project = new.project WHERE ticket = new.id;
END;

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
-- count cost what the page costs.  body is the record's wire JSON, cursor
-- included, built once at ingest: a page is its bodies joined by SQLite.
-- Positions are gapless per run (a dropped line never gets one), so the page
-- after a cursor is a range of positions.  stage is NULL on rows captured
-- before stages were recorded.
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

-- The gate (one row): open, cooldown (a vendor limit, until until_ms) or paused
-- by an operator.  Kept in the store so a restart keeps it and its deadline.
CREATE TABLE gate (
    id            INTEGER PRIMARY KEY CHECK (id = 1),
    state         TEXT NOT NULL,
    until_ms      INTEGER,
    reason        TEXT,
    changed_at_ms INTEGER NOT NULL
);
