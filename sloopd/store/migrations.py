"""Schema versions and the ordered migrations between them.

A fresh store is created from ``schema.sql``; an older one is walked forward
one version at a time, each step and its ``schema_migrations`` row in one
transaction, after a backup.  ``tests/migration`` proves both roads end at the
same schema.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from importlib import resources
from typing import Final

import apsw


@dataclass(frozen=True, slots=True)
class Migration:
    version: int
    name: str

    def script(self) -> str:
        return _read_sql(f"migrations/{self.version:04d}_{self.name}.sql")


# Ordered; version N's script turns a version N-1 store into version N.
# Version 1 is the oldest supported store: its script creates it from nothing.
MIGRATIONS: Final = (
    Migration(1, "initial"),
    Migration(2, "activation_to_trigger"),
    Migration(3, "feed_pages"),
    Migration(4, "stage_log_rebuilt"),
    Migration(5, "run_resolution"),
)
SCHEMA_VERSION: Final = MIGRATIONS[-1].version


class StoreTooNew(Exception):
    """The store was written by a newer sloopd; this binary must not touch it."""

    def __init__(self, found: int) -> None:
        super().__init__(
            f"the store has schema version {found}, newer than this sloopd supports "
            f"({SCHEMA_VERSION}); upgrade sloopd or restore a backup "
            "with 'sloopd store restore'"
        )
        self.found = found


def _read_sql(name: str) -> str:
    return resources.files("sloopd.store").joinpath(name).read_text(encoding="utf-8")


def schema_script() -> str:
    return _read_sql("schema.sql")


def stored_version(conn: apsw.Connection) -> int:
    return int(conn.execute("PRAGMA user_version").get or 0)


def is_empty(conn: apsw.Connection) -> bool:
    return not conn.execute("SELECT count(*) FROM sqlite_master WHERE type = 'table'").get


def create_fresh(conn: apsw.Connection) -> None:
    """Create the current schema in an empty store, recording every version."""
    now = _now_ms()
    with conn:
        conn.execute(schema_script())
        for migration in MIGRATIONS:
            conn.execute(
                "INSERT INTO schema_migrations (version, name, applied_at_ms) VALUES (?, ?, ?)",
                (migration.version, migration.name, now),
            )
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")


def pending(conn: apsw.Connection, target: int = SCHEMA_VERSION) -> list[Migration]:
    current = stored_version(conn)
    if current > SCHEMA_VERSION:
        raise StoreTooNew(current)
    return [m for m in MIGRATIONS if current < m.version <= target]


def apply(conn: apsw.Connection, migration: Migration) -> None:
    """One step forward: the script, its record row and the version, atomically."""
    with conn:
        conn.execute(migration.script())
        conn.execute(
            "INSERT INTO schema_migrations (version, name, applied_at_ms) VALUES (?, ?, ?)",
            (migration.version, migration.name, _now_ms()),
        )
        conn.execute(f"PRAGMA user_version = {migration.version}")


def _now_ms() -> int:
    return time.time_ns() // 1_000_000
