-- Version 3 (0.7.0): feeds whose every page is one indexed range.
--
-- Log records stored by 0.4.0 hold their wire JSON without the cursor (as a
-- BLOB); every page is now the stored bodies joined as they are, so each such
-- body gets its cursor in front, exactly as the log sink writes it today.
UPDATE log_records
SET body = '{"cursor":"' || position || '",' || substr(CAST(body AS TEXT), 2)
WHERE substr(CAST(body AS TEXT), 1, 10) <> '{"cursor":';

-- Events carry their ticket's project, so a project scope is one range of an
-- index instead of a merge over the project's tickets; a re-post that moves the
-- ticket moves them.
ALTER TABLE events ADD COLUMN project TEXT;
UPDATE events SET project = (SELECT project FROM tickets WHERE tickets.id = events.ticket)
WHERE ticket IS NOT NULL;
CREATE INDEX events_project ON events (project, position);
-- A ticket that moves to another project (a re-post) takes its events along,
-- so events_project keeps serving project scopes; only when the project changed.
CREATE TRIGGER tickets_project_moves AFTER UPDATE OF project ON tickets
WHEN old.project IS NOT new.project
BEGIN
    UPDATE events SET project = new.project WHERE ticket = new.id;
END;

-- A project reference seeks instead of scanning the tickets.
CREATE INDEX tickets_project ON tickets (project);
