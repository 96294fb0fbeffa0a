-- Version 1 (0.3.x): the schema before the activation -> trigger rename.
-- Kept verbatim so that a store of that release can be migrated and tested.
CREATE TABLE schema_migrations (
    version       INTEGER PRIMARY KEY,
    name          TEXT NOT NULL,
    applied_at_ms INTEGER NOT NULL
);

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
    updated_at_ms INTEGER NOT NULL
);

CREATE TABLE activations (
    ordinal       INTEGER PRIMARY KEY AUTOINCREMENT,
    id            TEXT NOT NULL UNIQUE,
    ticket        TEXT NOT NULL REFERENCES tickets (id),
    due_at_ms     INTEGER NOT NULL,
    created_at_ms INTEGER NOT NULL,
    state         TEXT NOT NULL,
    run           TEXT
);
CREATE INDEX activations_queued ON activations (state, due_at_ms);
CREATE INDEX activations_ticket ON activations (ticket, state);

CREATE TABLE runs (
    ordinal         INTEGER PRIMARY KEY AUTOINCREMENT,
    id              TEXT NOT NULL UNIQUE,
    alias           TEXT NOT NULL UNIQUE,
    ticket          TEXT NOT NULL REFERENCES tickets (id),
    attempt         INTEGER NOT NULL,
    state           TEXT NOT NULL,
    activation      TEXT,
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
CREATE INDEX runs_state ON runs (state);

CREATE TABLE events (
    position INTEGER PRIMARY KEY AUTOINCREMENT,
    kind     TEXT NOT NULL,
    at_ms    INTEGER NOT NULL,
    ticket   TEXT,
    run      TEXT,
    data     TEXT NOT NULL DEFAULT '{}'
);
