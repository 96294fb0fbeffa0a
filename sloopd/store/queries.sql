-- Named queries.  Python calls them by name (sloopd/store/queries.py).
-- Column lists are fixed per row kind: each names the fields of its row type
-- (ROW_TYPES in sloopd/store/rowtypes.py; tests/unit/test_row_types.py checks them).

-- name: ticket_insert
INSERT INTO tickets (id, name, path, title, body, project, flow, priority, state, manual,
                     created_at_ms, updated_at_ms)
VALUES ('', :name, :path, :title, :body, :project, :flow, :priority, :state, :manual, :now, :now);
UPDATE tickets SET id = 'T' || ordinal WHERE ordinal = last_insert_rowid()
RETURNING id

-- name: ticket_refresh
-- (A ticket moved to another project takes its events along: the trigger
-- tickets_project_moves in schema.sql.)
UPDATE tickets
SET title = :title, body = :body, project = :project, flow = :flow, priority = :priority,
    manual = :manual, updated_at_ms = :now
WHERE id = :id

-- name: ticket_set_state
UPDATE tickets SET state = :state, updated_at_ms = :now WHERE id = :id

-- name: ticket_by_id
SELECT id, name, title, path, project, flow, priority, state, created_at_ms, updated_at_ms
FROM tickets WHERE id = ?

-- name: ticket_by_name
SELECT id, name, title, path, project, flow, priority, state, created_at_ms, updated_at_ms
FROM tickets WHERE name = ?

-- name: ticket_by_path
SELECT id, name, title, path, project, flow, priority, state, created_at_ms, updated_at_ms
FROM tickets WHERE path = ?

-- name: ticket_extra
SELECT body, manual FROM tickets WHERE id = ?

-- name: tickets_nonterminal
SELECT id, name, title, path, project, flow, priority, state, created_at_ms, updated_at_ms
FROM tickets WHERE state NOT IN ('merged', 'failed', 'needs_review')
ORDER BY ordinal DESC

-- name: tickets_all
SELECT id, name, title, path, project, flow, priority, state, created_at_ms, updated_at_ms
FROM tickets ORDER BY ordinal DESC

-- name: tickets_in_project
SELECT id, name, title, path, project, flow, priority, state, created_at_ms, updated_at_ms
FROM tickets WHERE project = ? ORDER BY ordinal DESC

-- name: project_exists
SELECT 1 FROM tickets WHERE project = ? LIMIT 1

-- name: ticket_state_counts
SELECT state, count(*) FROM tickets GROUP BY state

-- name: trigger_insert
INSERT INTO triggers (id, ticket, due_at_ms, created_at_ms, state)
VALUES ('', :ticket, :due, :now, 'queued');
UPDATE triggers SET id = 'TR' || ordinal WHERE ordinal = last_insert_rowid()
RETURNING id, ticket, due_at_ms, created_at_ms

-- name: trigger_queued_for_ticket
SELECT id, ticket, due_at_ms, created_at_ms
FROM triggers WHERE ticket = ? AND state = 'queued' ORDER BY ordinal LIMIT 1

-- name: triggers_queued
SELECT id, ticket, due_at_ms, created_at_ms
FROM triggers WHERE state = 'queued' ORDER BY due_at_ms, ordinal

-- name: trigger_next_wake
SELECT min(due_at_ms) FROM triggers WHERE state = 'queued' AND due_at_ms > ?

-- name: ticket_state_manual
SELECT state, manual FROM tickets WHERE id = ?

-- name: triggers_queued_count
SELECT count(*) FROM triggers WHERE state = 'queued'

-- name: runs_in_flight
SELECT id, alias, ticket, attempt, state, trigger, flow, flow_snapshot, branch, worktree,
       claimed_at_ms, started_at_ms, finished_at_ms, agent_exit_code, halt, reason,
       classification, resolution
FROM runs WHERE state IN ('claimed', 'running') ORDER BY ordinal

-- name: runs_in_flight_count
SELECT count(*) FROM runs WHERE state IN ('claimed', 'running')

-- name: runs_recent
-- The settled runs, most recently finished first, each with usage_for_run's sums
-- (reported, input, output, cached, cost; NULL when its log has no stage_finished):
-- one statement for a window of thousands, reading only those runs' stage logs.
WITH recent AS (
    SELECT id, alias, ticket, attempt, state, trigger, flow, NULL AS flow_snapshot, branch,
           worktree, claimed_at_ms, started_at_ms, finished_at_ms, agent_exit_code, halt,
           reason, classification, resolution, ordinal
    FROM runs WHERE state IN ('merged', 'failed', 'needs_review', 'aborted')
    ORDER BY finished_at_ms DESC, ordinal DESC LIMIT ?
)
SELECT r.id, r.alias, r.ticket, r.attempt, r.state, r.trigger, r.flow, r.flow_snapshot,
       r.branch, r.worktree, r.claimed_at_ms, r.started_at_ms, r.finished_at_ms,
       r.agent_exit_code, r.halt, r.reason, r.classification, r.resolution,
       u.reported, u.input_tokens, u.output_tokens, u.cached_tokens, u.cost
FROM recent r LEFT JOIN (
    SELECT run, count(json_extract(data, '$.usage')) AS reported,
           coalesce(sum(json_extract(data, '$.usage.input_tokens')), 0) AS input_tokens,
           coalesce(sum(json_extract(data, '$.usage.output_tokens')), 0) AS output_tokens,
           coalesce(sum(json_extract(data, '$.usage.cached_tokens')), 0) AS cached_tokens,
           sum(json_extract(data, '$.usage.cost_usd')) AS cost
    FROM stage_log
    WHERE kind = 'stage_finished' AND run IN (SELECT id FROM recent)
    GROUP BY run
) u ON u.run = r.id
ORDER BY r.finished_at_ms DESC, r.ordinal DESC

-- name: runs_recent_count
SELECT count(*) FROM runs WHERE state IN ('merged', 'failed', 'needs_review', 'aborted')

-- name: runs_settled_page
-- The runs verb (0.8.0): a page of the settled runs (runs_recent's order and usage
-- sums) of one state, or of every settled state when ?1 is NULL; ?2 rows from ?3 on.
WITH page AS (
    SELECT id, alias, ticket, attempt, state, trigger, flow, NULL AS flow_snapshot, branch,
           worktree, claimed_at_ms, started_at_ms, finished_at_ms, agent_exit_code, halt,
           reason, classification, resolution, ordinal
    FROM runs
    WHERE state IN ('merged', 'failed', 'needs_review', 'aborted') AND (?1 IS NULL OR state = ?1)
    ORDER BY finished_at_ms DESC, ordinal DESC LIMIT ?2 OFFSET ?3
)
SELECT r.id, r.alias, r.ticket, r.attempt, r.state, r.trigger, r.flow, r.flow_snapshot,
       r.branch, r.worktree, r.claimed_at_ms, r.started_at_ms, r.finished_at_ms,
       r.agent_exit_code, r.halt, r.reason, r.classification, r.resolution,
       u.reported, u.input_tokens, u.output_tokens, u.cached_tokens, u.cost
FROM page r LEFT JOIN (
    SELECT run, count(json_extract(data, '$.usage')) AS reported,
           coalesce(sum(json_extract(data, '$.usage.input_tokens')), 0) AS input_tokens,
           coalesce(sum(json_extract(data, '$.usage.output_tokens')), 0) AS output_tokens,
           coalesce(sum(json_extract(data, '$.usage.cached_tokens')), 0) AS cached_tokens,
           sum(json_extract(data, '$.usage.cost_usd')) AS cost
    FROM stage_log
    WHERE kind = 'stage_finished' AND run IN (SELECT id FROM page)
    GROUP BY run
) u ON u.run = r.id
ORDER BY r.finished_at_ms DESC, r.ordinal DESC

-- name: runs_settled_page_count
SELECT count(*) FROM runs
WHERE state IN ('merged', 'failed', 'needs_review', 'aborted') AND (?1 IS NULL OR state = ?1)

-- name: runs_needing_attention
-- The dashboard's attention (0.8.0): the run that left each ticket failed or
-- needs_review (its latest), however long ago, most recently finished first. A
-- ticket leaves the list when it runs again (its state moves), never by age.
WITH page AS (
    SELECT r.id, r.alias, r.ticket, r.attempt, r.state, r.trigger, r.flow,
           NULL AS flow_snapshot, r.branch, r.worktree, r.claimed_at_ms, r.started_at_ms,
           r.finished_at_ms, r.agent_exit_code, r.halt, r.reason, r.classification, r.resolution,
           r.ordinal
    FROM tickets t JOIN runs r ON r.ticket = t.id AND r.state = t.state
    WHERE t.state IN ('failed', 'needs_review') AND r.resolution IS NULL
      AND r.attempt = (SELECT max(attempt) FROM runs WHERE ticket = t.id)
    ORDER BY r.finished_at_ms DESC, r.ordinal DESC LIMIT ?
)
SELECT r.id, r.alias, r.ticket, r.attempt, r.state, r.trigger, r.flow, r.flow_snapshot,
       r.branch, r.worktree, r.claimed_at_ms, r.started_at_ms, r.finished_at_ms,
       r.agent_exit_code, r.halt, r.reason, r.classification, r.resolution,
       u.reported, u.input_tokens, u.output_tokens, u.cached_tokens, u.cost
FROM page r LEFT JOIN (
    SELECT run, count(json_extract(data, '$.usage')) AS reported,
           coalesce(sum(json_extract(data, '$.usage.input_tokens')), 0) AS input_tokens,
           coalesce(sum(json_extract(data, '$.usage.output_tokens')), 0) AS output_tokens,
           coalesce(sum(json_extract(data, '$.usage.cached_tokens')), 0) AS cached_tokens,
           sum(json_extract(data, '$.usage.cost_usd')) AS cost
    FROM stage_log
    WHERE kind = 'stage_finished' AND run IN (SELECT id FROM page)
    GROUP BY run
) u ON u.run = r.id
ORDER BY r.finished_at_ms DESC, r.ordinal DESC

-- name: runs_needing_attention_count
-- runs_needing_attention's rows, counted: a ticket whose latest run was resolved
-- (0.9.0) waits for no one any more.
SELECT count(*)
FROM tickets t JOIN runs r ON r.ticket = t.id AND r.state = t.state
WHERE t.state IN ('failed', 'needs_review') AND r.resolution IS NULL
  AND r.attempt = (SELECT max(attempt) FROM runs WHERE ticket = t.id)

-- name: run_resolve
-- (0.9.0) Only a needs_review run no one resolved yet: a second resolve changes nothing.
UPDATE runs SET resolution = :resolution
WHERE id = :id AND state = 'needs_review' AND resolution IS NULL
RETURNING id

-- name: runs_unresolved_needing_review
-- (0.9.0) The needs_review runs no one resolved: the daemon looks for their branches
-- on main (merged by hand).  Bounded by the caller's limit, the newest first.
SELECT id, ticket, branch FROM runs
WHERE state = 'needs_review' AND resolution IS NULL
ORDER BY ordinal DESC LIMIT ?

-- name: run_id_by_id
SELECT id FROM runs WHERE id = ?

-- name: run_id_by_alias
SELECT id FROM runs WHERE alias = ?

-- name: run_ids_for_ticket
SELECT id FROM runs WHERE ticket = ? ORDER BY attempt DESC

-- name: run_by_id
SELECT id, alias, ticket, attempt, state, trigger, flow, flow_snapshot, branch, worktree,
       claimed_at_ms, started_at_ms, finished_at_ms, agent_exit_code, halt, reason,
       classification, resolution
FROM runs WHERE id = ?

-- name: event_insert
INSERT INTO events (kind, at_ms, ticket, run, data, project)
VALUES (:kind, :at, :ticket, :run, :data, (SELECT project FROM tickets WHERE id = :ticket))

-- name: log_insert
INSERT INTO log_records (run, position, stage, attempt, stage_position, execution_position,
                         stream, ts_ms, body)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)

-- name: log_max_position
SELECT max(position) FROM log_records WHERE run = ?

-- name: log_max_stage_position
SELECT max(stage_position) FROM log_records WHERE run = ? AND stage IS ?

-- name: log_max_execution_position
SELECT max(execution_position) FROM log_records WHERE run = ? AND stage IS ? AND attempt IS ?

-- name: stage_log_append
INSERT INTO stage_log (run, seq, kind, stage, attempt, seat, at_ms, data)
VALUES (:run, (SELECT coalesce(max(seq), 0) + 1 FROM stage_log WHERE run = :run),
        :kind, :stage, :attempt, :seat, :at, :data)

-- name: stage_log_for_run
SELECT seq, kind, stage, attempt, seat, at_ms, data FROM stage_log WHERE run = ? ORDER BY seq

-- name: claimable_triggers
SELECT tr.id, tr.ticket, tr.due_at_ms
FROM triggers tr JOIN tickets t ON t.id = tr.ticket
WHERE tr.state = 'queued' AND tr.due_at_ms <= ? AND t.state = 'ready'
ORDER BY t.priority DESC, tr.due_at_ms, tr.ordinal
LIMIT ?

-- name: ticket_claim_facts
SELECT name, flow,
       (SELECT coalesce(max(attempt), 0) FROM runs WHERE ticket = tickets.id) AS last_attempt
FROM tickets WHERE id = ?

-- name: run_insert
INSERT INTO runs (id, alias, ticket, attempt, state, trigger, flow, flow_snapshot, branch,
                  worktree, claimed_at_ms)
VALUES ('', :alias, :ticket, :attempt, 'claimed', :trigger, :flow, :snapshot, :branch, '', :now);
UPDATE runs SET id = 'R' || ordinal WHERE ordinal = last_insert_rowid()
RETURNING id

-- name: runs_ordinal_next
-- The ordinal the next run gets: AUTOINCREMENT's, past both the sequence and the rows.
SELECT max(coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'runs'), 0),
           coalesce((SELECT max(ordinal) FROM runs), 0)) + 1

-- name: runs_ordinal_at_least
-- Run ids seen outside the store (a restored older backup) are never handed out again.
INSERT INTO sqlite_sequence (name, seq)
SELECT 'runs', 0 WHERE NOT EXISTS (SELECT 1 FROM sqlite_sequence WHERE name = 'runs');
UPDATE sqlite_sequence SET seq = max(seq, :floor) WHERE name = 'runs'

-- name: run_set_worktree
UPDATE runs SET worktree = ? WHERE id = ?

-- name: trigger_claim
UPDATE triggers SET state = 'claimed', run = :run WHERE id = :id

-- name: run_started
UPDATE runs SET state = 'running', started_at_ms = :now WHERE id = :id

-- name: run_settle
UPDATE runs SET state = :state, finished_at_ms = :now, halt = :halt, reason = :reason,
                agent_exit_code = :agent_exit_code, classification = :classification
WHERE id = :id

-- name: runs_active_ids
SELECT id FROM runs WHERE state IN ('claimed', 'running') ORDER BY ordinal

-- name: run_worktrees_of_ticket
SELECT id, worktree FROM runs
WHERE ticket = ? AND state NOT IN ('claimed', 'running') AND worktree != ''

-- name: run_worktrees_terminal
SELECT id, worktree FROM runs
WHERE state IN ('merged', 'failed', 'needs_review', 'aborted') AND worktree != ''

-- name: run_clear_worktree
UPDATE runs SET worktree = '' WHERE id = ?

-- Logs: one query per selector form, each served by its own index in
-- position order (see schema.sql; INDEXED BY pins it, since without
-- statistics the planner may pick the primary key and filter row by row), so
-- a page costs what the page costs.  A page comes back as one value: the
-- records' stored JSON joined by SQLite in index order (each query reads one
-- index range, in order), never a Python object per record.  A tail first
-- finds where it starts (the N-th matching record from the end, walking the
-- index backwards) and then reads forward, so no query ever sorts.

-- name: logs_range
-- Without a selector: positions are gapless per run, so a page is the range
-- (?2, ?3] of the primary key.  The count proves the range was whole.  What
-- goes around the records is joined in Python: each `||` here would copy the
-- whole page once more (two copies of 18.5 kB against one).
SELECT CAST(group_concat(body, ',') AS BLOB), count(*)
FROM log_records WHERE run = ?1 AND position > ?2 AND position <= ?3

-- name: logs_range_bodies
-- The same range as one row per record, for the log cache to hold (core.logcache).
SELECT body FROM log_records WHERE run = ?1 AND position > ?2 AND position <= ?3
ORDER BY position

-- name: logs_page
SELECT CAST(group_concat(body, ',') AS BLOB), count(*), max(position)
FROM (SELECT body, position FROM log_records WHERE run = ? AND position > ?
      ORDER BY position LIMIT ?)

-- name: logs_more
SELECT 1 FROM log_records WHERE run = ? AND position > ? LIMIT 1

-- name: logs_tail_start
SELECT position, position FROM log_records WHERE run = ? AND position > ?
ORDER BY position DESC LIMIT 1 OFFSET ?

-- name: logs_max_position
SELECT max(position) FROM log_records WHERE run = ?

-- name: logs_stage_page
SELECT CAST(group_concat(body, ',') AS BLOB), count(*), max(position)
FROM (SELECT body, position FROM log_records INDEXED BY log_records_stage
      WHERE run = ? AND stage = ? AND position > ? ORDER BY position LIMIT ?)

-- name: logs_stage_more
SELECT 1 FROM log_records INDEXED BY log_records_stage
WHERE run = ? AND stage = ? AND position > ? LIMIT 1

-- name: logs_stage_tail_start
SELECT position, stage_position FROM log_records INDEXED BY log_records_stage
WHERE run = ? AND stage = ? AND position > ?
ORDER BY position DESC LIMIT 1 OFFSET ?

-- name: logs_stage_ordinal_at
SELECT stage_position FROM log_records INDEXED BY log_records_stage
WHERE run = ? AND stage = ? AND position <= ?
ORDER BY position DESC LIMIT 1

-- name: logs_execution_page
SELECT CAST(group_concat(body, ',') AS BLOB), count(*), max(position)
FROM (SELECT body, position FROM log_records INDEXED BY log_records_execution
      WHERE run = ? AND stage = ? AND attempt = ? AND position > ?
      ORDER BY position LIMIT ?)

-- name: logs_execution_more
SELECT 1 FROM log_records INDEXED BY log_records_execution
WHERE run = ? AND stage = ? AND attempt = ? AND position > ? LIMIT 1

-- name: logs_execution_tail_start
SELECT position, execution_position FROM log_records INDEXED BY log_records_execution
WHERE run = ? AND stage = ? AND attempt = ? AND position > ?
ORDER BY position DESC LIMIT 1 OFFSET ?

-- name: logs_execution_ordinal_at
SELECT execution_position FROM log_records INDEXED BY log_records_execution
WHERE run = ? AND stage = ? AND attempt = ? AND position <= ?
ORDER BY position DESC LIMIT 1

-- The last lines a failed execution printed, newest first: the feedback a stage sent
-- back gets (sloopd.views.feedback).
-- name: logs_execution_last
SELECT stream, body FROM log_records INDEXED BY log_records_execution
WHERE run = ? AND stage = ? AND attempt = ? AND stream IN ('stdout', 'stderr')
ORDER BY position DESC LIMIT ?

-- What an execution a daemon's stop cut short printed on stdout, in order: the usage
-- its agent's stream reported is read back from it (sloopd.resume.spent).
-- name: logs_execution_stdout
SELECT body FROM log_records INDEXED BY log_records_execution
WHERE run = ? AND stage = ? AND attempt = ? AND stream = 'stdout'
ORDER BY position

-- name: logs_rows_after
SELECT position, body FROM log_records WHERE run = ? AND position > ? ORDER BY position

-- name: logs_has_unstaged
SELECT 1 FROM log_records WHERE run = ? AND stage IS NULL LIMIT 1

-- Events come back as (position, the event's wire JSON built by SQLite).

-- name: events_page
SELECT position, json_object('cursor', CAST(position AS TEXT), 'kind', kind, 'at_ms', at_ms, 'ticket', ticket, 'run', run, 'data', json(data))
FROM events WHERE position > ? ORDER BY position LIMIT ?

-- name: events_tail
SELECT position, json_object('cursor', CAST(position AS TEXT), 'kind', kind, 'at_ms', at_ms, 'ticket', ticket, 'run', run, 'data', json(data))
FROM events ORDER BY position DESC LIMIT ?

-- name: events_max_position
SELECT max(position) FROM events

-- name: events_ticket_page
SELECT position, json_object('cursor', CAST(position AS TEXT), 'kind', kind, 'at_ms', at_ms, 'ticket', ticket, 'run', run, 'data', json(data))
FROM events INDEXED BY events_ticket WHERE ticket = ? AND position > ?
ORDER BY position LIMIT ?

-- name: events_ticket_tail
SELECT position, json_object('cursor', CAST(position AS TEXT), 'kind', kind, 'at_ms', at_ms, 'ticket', ticket, 'run', run, 'data', json(data))
FROM events INDEXED BY events_ticket WHERE ticket = ?
ORDER BY position DESC LIMIT ?

-- name: events_run_page
SELECT position, json_object('cursor', CAST(position AS TEXT), 'kind', kind, 'at_ms', at_ms, 'ticket', ticket, 'run', run, 'data', json(data))
FROM events INDEXED BY events_run WHERE run = ? AND position > ?
ORDER BY position LIMIT ?

-- name: events_run_tail
SELECT position, json_object('cursor', CAST(position AS TEXT), 'kind', kind, 'at_ms', at_ms, 'ticket', ticket, 'run', run, 'data', json(data))
FROM events INDEXED BY events_run WHERE run = ?
ORDER BY position DESC LIMIT ?

-- name: gate_read
SELECT state, until_ms, reason FROM gate WHERE id = 1

-- name: gate_write
INSERT INTO gate (id, state, until_ms, reason, changed_at_ms)
VALUES (1, :state, :until, :reason, :now)
ON CONFLICT (id) DO UPDATE SET state = excluded.state, until_ms = excluded.until_ms,
                               reason = excluded.reason, changed_at_ms = excluded.changed_at_ms

-- name: triggers_due_now
UPDATE triggers SET due_at_ms = :now WHERE state = 'queued' AND due_at_ms = :due

-- name: events_project_page
SELECT position, json_object('cursor', CAST(position AS TEXT), 'kind', kind, 'at_ms', at_ms, 'ticket', ticket, 'run', run, 'data', json(data))
FROM events INDEXED BY events_project WHERE project = ? AND position > ?
ORDER BY position LIMIT ?

-- name: events_project_tail
SELECT position, json_object('cursor', CAST(position AS TEXT), 'kind', kind, 'at_ms', at_ms, 'ticket', ticket, 'run', run, 'data', json(data))
FROM events INDEXED BY events_project WHERE project = ?
ORDER BY position DESC LIMIT ?

-- A pattern scope merges its tickets' ranges of the covering (ticket, position)
-- index lazily: each ticket's first ?3 positions after the cursor (its last,
-- for a tail) in one query, then more of a ticket only when the merge has used
-- them; then only the page's events are read.

-- name: events_ticket_heads
SELECT t.value, (SELECT group_concat(position) FROM (
    SELECT position FROM events INDEXED BY events_ticket
    WHERE ticket = t.value AND position > ?2 ORDER BY position LIMIT ?3))
FROM json_each(?1) AS t

-- name: events_ticket_heads_desc
SELECT t.value, (SELECT group_concat(position) FROM (
    SELECT position FROM events INDEXED BY events_ticket
    WHERE ticket = t.value AND position > ?2 ORDER BY position DESC LIMIT ?3))
FROM json_each(?1) AS t

-- name: events_ticket_positions
SELECT position FROM events INDEXED BY events_ticket WHERE ticket = ? AND position > ?
ORDER BY position LIMIT ?

-- name: events_ticket_positions_before
SELECT position FROM events INDEXED BY events_ticket
WHERE ticket = ? AND position > ? AND position < ?
ORDER BY position DESC LIMIT ?

-- name: events_at_positions
SELECT position, json_object('cursor', CAST(position AS TEXT), 'kind', kind, 'at_ms', at_ms, 'ticket', ticket, 'run', run, 'data', json(data))
FROM events WHERE position IN (SELECT value FROM json_each(?)) ORDER BY position

-- name: tickets_since
SELECT ordinal, id, name FROM tickets WHERE ordinal > ? ORDER BY ordinal

-- name: run_outcomes_for_ticket
SELECT id, state, classification FROM runs WHERE ticket = ? ORDER BY attempt DESC

-- name: usage_for_run
SELECT count(json_extract(data, '$.usage')) AS reported,
       coalesce(sum(json_extract(data, '$.usage.input_tokens')), 0) AS input_tokens,
       coalesce(sum(json_extract(data, '$.usage.output_tokens')), 0) AS output_tokens,
       coalesce(sum(json_extract(data, '$.usage.cached_tokens')), 0) AS cached_tokens,
       sum(json_extract(data, '$.usage.cost_usd')) AS cost
FROM stage_log WHERE run = ? AND kind = 'stage_finished'

-- The read model (sloopd/core/model.py) re-reads one row by id after a commit;
-- a trigger no longer queued answers no row (the model holds queued ones only).

-- name: trigger_queued_by_id
SELECT id, ticket, due_at_ms, created_at_ms FROM triggers WHERE id = ? AND state = 'queued'

-- name: usage_by_settled_run
-- Each settled run's summed usage, as usage_for_run gives it; the read model sums
-- them once at startup and then adds each run as it settles.
SELECT run, count(json_extract(data, '$.usage')) AS reported,
       coalesce(sum(json_extract(data, '$.usage.input_tokens')), 0) AS input_tokens,
       coalesce(sum(json_extract(data, '$.usage.output_tokens')), 0) AS output_tokens,
       coalesce(sum(json_extract(data, '$.usage.cached_tokens')), 0) AS cached_tokens,
       sum(json_extract(data, '$.usage.cost_usd')) AS cost
FROM stage_log
WHERE kind = 'stage_finished'
  AND run NOT IN (SELECT id FROM runs WHERE state IN ('claimed', 'running'))
GROUP BY run
