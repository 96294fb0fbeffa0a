"""Schema migrations: a version-1 (0.3.x) store walked forward to the current schema.

Both roads -- a fresh store from schema.sql and a version-1 store migrated --
must end at the same structure; the activation -> trigger rename rewrites ids
in place and never reuses an ordinal.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import apsw
import pytest

from sloopd.store import SCHEMA_VERSION, Store, db, migrations
from tests.support.daemon import new_daemon, query, sloopd, store_writable

FAR_FUTURE_MS = 4_102_444_800_000  # 2100-01-01: never due while a test runs
V1_SQL = resources.files("sloopd.store").joinpath("migrations/0001_initial.sql").read_text()


def make_v1_store(state_dir: Path) -> None:
    """A 0.3.x store: ticket T1 (held), activations A1 (queued), A2 (claimed by
    R1), A3 (deleted, so its ordinal must not come back), run R1 on A2."""
    state_dir.mkdir(parents=True)
    with store_writable(state_dir / db.STORE_FILE) as conn:
        conn.execute("PRAGMA journal_mode = WAL")
        with conn:
            conn.execute(V1_SQL)
            conn.execute("INSERT INTO schema_migrations VALUES (1, 'initial', 1000)")
            conn.execute(
                "INSERT INTO tickets (id, name, path, title, body, project, flow, priority,"
                " state, created_at_ms, updated_at_ms) VALUES ('T1', 'fix-login',"
                " 'tickets/fix-login.md', 'Fix login', 'body', 'default', 'default', 0,"
                " 'held', 1000, 1000)"
            )
            for ordinal, state, due, run in [
                (1, "queued", FAR_FUTURE_MS, None),
                (2, "claimed", 1000, "R1"),
                (3, "cancelled", 1000, None),
            ]:
                conn.execute(
                    "INSERT INTO activations (ordinal, id, ticket, due_at_ms, created_at_ms,"
                    " state, run) VALUES (?, ?, 'T1', ?, 1000, ?, ?)",
                    (ordinal, f"A{ordinal}", due, state, run),
                )
            conn.execute("DELETE FROM activations WHERE id = 'A3'")
            conn.execute(
                "INSERT INTO runs (id, alias, ticket, attempt, state, activation, flow,"
                " flow_snapshot, branch, worktree, claimed_at_ms, started_at_ms, finished_at_ms,"
                " agent_exit_code, halt, reason) VALUES ('R1', 'fix-login#1', 'T1', 1, 'failed',"
                " 'A2', 'default', '{\"name\": \"default\", \"stages\": []}',"
                " 'sloop/fix-login/1', '', 1000, 1001, 1002, 1, 'fail_action', 'tests failed')"
            )
            conn.execute(
                "INSERT INTO events (kind, at_ms, ticket, run) "
                "VALUES ('run_finished', 1002, 'T1', 'R1')"
            )
        conn.execute("PRAGMA user_version = 1")


def assert_migrated(state_dir: Path) -> None:
    assert db.peek_version(state_dir) == SCHEMA_VERSION == 5
    assert query(state_dir, "SELECT version FROM schema_migrations ORDER BY version") == [
        (1,),
        (2,),
        (3,),
        (4,),
        (5,),
    ]
    # Version 5: no run of an older store is resolved (resolve, 0.9.0).
    assert query(state_dir, "SELECT id, resolution FROM runs") == [("R1", None)]
    assert query(state_dir, "SELECT ordinal, id, state, run FROM triggers ORDER BY ordinal") == [
        (1, "TR1", "queued", None),
        (2, "TR2", "claimed", "R1"),
    ]
    assert query(state_dir, "SELECT id, trigger, reason FROM runs") == [
        ("R1", "TR2", "tests failed")
    ]
    assert query(state_dir, "SELECT id, state, manual FROM tickets") == [("T1", "held", 0)]
    assert query(
        state_dir, "SELECT kind, run, project FROM events WHERE kind = 'run_finished'"
    ) == [("run_finished", "R1", "default")]
    tables = {r[0] for r in query(state_dir, "SELECT name FROM sqlite_master WHERE type='table'")}
    assert "activations" not in tables
    assert "runs_new" not in tables
    # The pre-migration store was backed up, as it was.
    saved = sorted((state_dir / "backups").glob("store-v1-*.sqlite3"))
    assert len(saved) == 1
    with store_writable(saved[0]) as conn:
        assert [tuple(r) for r in conn.execute("SELECT id FROM activations ORDER BY id")] == [
            ("A1",),
            ("A2",),
        ]
        assert conn.execute("PRAGMA user_version").fetchone() == (1,)


def insert_trigger(state_dir: Path) -> str:
    store = Store.open(state_dir, migrate=False)
    try:
        with store.writer.transaction() as tx:
            row = tx.one("trigger_insert", {"ticket": "T1", "due": FAR_FUTURE_MS, "now": 5000})
    finally:
        store.close()
    assert row is not None
    return str(row[0])


def test_starting_the_daemon_migrates_a_version_1_store(sandbox: Path, repo: Path) -> None:
    daemon = new_daemon(sandbox, repo)
    make_v1_store(daemon.state_dir)
    daemon.start()
    try:
        data = daemon.client().ok("show")
        assert data["daemon"]["store"] == "ok"
        assert data["daemon"]["schema_version"] == SCHEMA_VERSION
        assert [t["id"] for t in data["queued_triggers"]] == ["TR1"]
        assert "queued_activations" not in data
        assert [(r["id"], r["trigger"]) for r in data["recent"]] == [("R1", "TR2")]
        assert [(t["id"], t["state"]) for t in data["tickets"]] == [("T1", "held")]
    finally:
        assert daemon.stop() == 0, daemon.log()
    assert_migrated(daemon.state_dir)
    # Ordinals are never reused: A3 was deleted, so the next trigger is TR4.
    assert insert_trigger(daemon.state_dir) == "TR4"
    done = sloopd("store", "check", "--state-dir", str(daemon.state_dir))
    assert done.returncode == 0, done.stderr


def test_sloopd_store_migrate_migrates_a_version_1_store(tmp_path: Path) -> None:
    state = tmp_path / "state"
    make_v1_store(state)
    done = sloopd("store", "migrate", "--state-dir", str(state))
    assert done.returncode == 0, done.stderr
    assert f"from schema version 1 to {SCHEMA_VERSION}" in done.stdout
    assert_migrated(state)
    assert insert_trigger(state) == "TR4"
    again = sloopd("store", "migrate", "--state-dir", str(state))
    assert again.returncode == 0
    assert "nothing to do" in again.stdout
    assert len(list((state / "backups").iterdir())) == 1  # no backup when nothing to do


def test_an_older_store_is_not_opened_without_migrating(tmp_path: Path) -> None:
    make_v1_store(tmp_path / "state")
    with pytest.raises(db.NeedsMigration):
        Store.open(tmp_path / "state", migrate=False)
    assert db.peek_version(tmp_path / "state") == 1
    assert not (tmp_path / "state" / "backups").exists()


# --- one schema, two roads ------------------------------------------------------------


@dataclass(frozen=True)
class Shape:
    user_version: int
    tables: dict[str, Any]


def shape(path: Path) -> Shape:
    """Tables, columns, indexes, foreign keys and rowid-ness -- not the SQL text."""
    with store_writable(path) as conn:

        def rows(sql: str) -> list[tuple[Any, ...]]:
            return [tuple(r) for r in conn.execute(sql)]

        names = [r[0] for r in rows("SELECT name FROM sqlite_master WHERE type = 'table'")]
        listing = {r[1]: r for r in rows("PRAGMA table_list") if r[0] == "main"}
        tables: dict[str, Any] = {}
        for name in sorted(names):
            indexes = {}
            for index in rows(f"PRAGMA index_list('{name}')"):
                _, index_name, unique, origin, partial = index
                indexes[index_name] = (
                    unique,
                    origin,
                    partial,
                    rows(f"PRAGMA index_xinfo('{index_name}')"),
                )
            tables[name] = {
                "columns": rows(f"PRAGMA table_xinfo('{name}')"),
                "indexes": indexes,
                "foreign_keys": rows(f"PRAGMA foreign_key_list('{name}')"),
                "without_rowid_strict": listing[name][4:6],
            }
        version = int(rows("PRAGMA user_version")[0][0])
    return Shape(version, tables)


def test_a_fresh_store_and_a_migrated_store_have_the_same_structure(tmp_path: Path) -> None:
    Store.open(tmp_path / "fresh").close()
    make_v1_store(tmp_path / "old")
    Store.open(tmp_path / "old", migrate=True).close()
    fresh = shape(tmp_path / "fresh" / db.STORE_FILE)
    migrated = shape(tmp_path / "old" / db.STORE_FILE)
    assert fresh.user_version == migrated.user_version == SCHEMA_VERSION
    assert sorted(fresh.tables) == sorted(migrated.tables)
    for name in fresh.tables:
        assert fresh.tables[name] == migrated.tables[name], name
    assert {"tickets", "triggers", "runs", "events", "schema_migrations"} <= set(fresh.tables)
    # Schema triggers too (the tables named "triggers" are queue triggers, not these).
    sql = "SELECT name, tbl_name FROM sqlite_master WHERE type = 'trigger' ORDER BY name"
    assert query(tmp_path / "fresh", sql) == query(tmp_path / "old", sql)
    assert query(tmp_path / "fresh", sql) == [("tickets_project_moves", "tickets")]


def test_a_fresh_store_records_every_migration(tmp_path: Path) -> None:
    Store.open(tmp_path / "fresh").close()
    versions = query(tmp_path / "fresh", "SELECT version, name FROM schema_migrations")
    assert versions == [(m.version, m.name) for m in migrations.MIGRATIONS]
    assert not (tmp_path / "fresh" / "backups").exists()  # nothing to back up


def test_the_migration_list_is_ordered_and_ends_at_schema_version() -> None:
    versions = [m.version for m in migrations.MIGRATIONS]
    assert versions == list(range(1, len(versions) + 1))
    assert versions[-1] == SCHEMA_VERSION
    for migration in migrations.MIGRATIONS:
        assert migration.script().strip(), migration


# --- a failing step leaves the store as it was --------------------------------------------


class BrokenMigration(migrations.Migration):
    """The real version-2 script with a statement that fails at its very end."""

    def script(self) -> str:
        real = migrations.Migration(self.version, self.name).script()
        return real + "\nINSERT INTO no_such_table VALUES (1);\n"


def test_a_failing_migration_step_rolls_back_completely(tmp_path: Path) -> None:
    make_v1_store(tmp_path / "state")
    path = tmp_path / "state" / db.STORE_FILE
    before = shape(path)
    with store_writable(path) as conn, pytest.raises(apsw.SQLError):
        migrations.apply(conn, BrokenMigration(2, "activation_to_trigger"))
    assert shape(path) == before
    state = tmp_path / "state"
    assert db.peek_version(state) == 1
    assert query(state, "SELECT version FROM schema_migrations") == [(1,)]
    assert query(state, "SELECT id FROM activations ORDER BY id") == [("A1",), ("A2",)]
    # ... and the real step still applies afterwards.
    Store.open(state, migrate=True).close()
    assert_migrated(state)
