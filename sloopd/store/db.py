"""The store: one writer connection, one read-only connection, named queries.

Only this package opens database connections (tests/unit/test_architecture.py
enforces it).  The daemon is single-threaded, so one reader suffices: reads
run on the event loop between writes and see the last committed state.

The reader's read transaction outlives a read: begun by the first read, it is
ended only when this store's writer begins a transaction and again when that
one has ended (or the store closes).  Nothing else writes while the daemon holds
the store's lock, so every read still sees the last committed state, without a
transaction begun and ended per read (two ``fcntl`` calls on the WAL index and
its header checks: about 4 µs of a 28 µs ``logs`` page, issue 36).  Ended
before each write, it never holds a checkpoint back nor keeps the WAL from
restarting.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import apsw

from sloopd.store import migrations
from sloopd.store.changes import STORE_FAULT, Change
from sloopd.store.fault import StoreFault, one_more
from sloopd.store.queries import QUERIES
from sloopd.store.rowtypes import NamedReads, Params, Row
from sloopd.store.transaction import Transaction

__all__ = ["Transaction"]  # re-exported: sloopd.store's callers name it from here

log = logging.getLogger(__name__)

STORE_FILE = "store.sqlite3"
BACKUP_DIR = "backups"

# A busy or full store answers within this; the caller retries later, off the hot path.
# (Only another process holding the write lock makes SQLite wait: a backup, a restore,
# an operator's sqlite3 shell.  Waiting 5 s for it on the event loop stalled every client.)
BUSY_TIMEOUT_MS = 50

# apsw errors that say the store cannot take a write *now* (full disk, a lock held
# elsewhere, an I/O failure) rather than that the write is wrong.
_UNAVAILABLE: tuple[type[BaseException], ...] = (
    apsw.FullError,
    apsw.BusyError,
    apsw.LockedError,
    apsw.IOError,
    apsw.CantOpenError,
    apsw.ReadOnlyError,
)


class StoreUnavailable(Exception):
    """The store cannot be written (or read) right now; nothing of the attempt was kept.

    ``reason`` is one word for clients and doctor: ``full``, ``busy`` or ``io``.
    """

    def __init__(self, path: Path, reason: str, detail: str) -> None:
        super().__init__(f"the store {path} cannot be written: {detail}")
        self.path = path
        self.reason = reason
        self.detail = detail

    @property
    def wire_error(self) -> tuple[str, str, dict[str, Any]]:
        """How a client is told (sloopd.wire.dispatch maps it): retry later, not a bug."""
        return (
            "daemon_unavailable",
            f"{self}; nothing of this request was stored, retry later",
            {"store": str(self.path), "reason": self.reason},
        )


# What SQLite raises: sloopd.cli's maintenance catches it without importing the driver.
DatabaseError = apsw.Error


def disk_full_error(exc: BaseException) -> str | None:
    """ "full" when SQLite said the disk is full; "maybe" for an I/O failure or a file it
    could not make, which a full disk causes too; None for anything else."""
    if isinstance(exc, apsw.FullError) or getattr(exc, "reason", None) == "full":
        return "full"
    maybe = apsw.IOError | apsw.CantOpenError | StoreUnavailable
    return "maybe" if isinstance(exc, maybe) else None


def _unavailable(path: Path, exc: BaseException) -> StoreUnavailable:
    if isinstance(exc, apsw.FullError):
        reason, detail = "full", "the disk (or the store's filesystem) is full"
    elif isinstance(exc, apsw.BusyError | apsw.LockedError):
        reason, detail = "busy", "another process holds the store's write lock"
    else:
        reason, detail = "io", f"{exc.__class__.__name__}: {exc}"
    return StoreUnavailable(path, reason, detail)


def _tune(conn: apsw.Connection) -> None:
    conn.setbusytimeout(BUSY_TIMEOUT_MS)
    conn.execute("PRAGMA foreign_keys = ON")
    # Reuse of prepared statements across calls (DESIGN rule 4).
    conn.config(apsw.SQLITE_DBCONFIG_ENABLE_QPSG, 1)


# Told what each committed transaction changed (``changes.NOTES``), after COMMIT:
# the read model revises itself from these notes (sloopd/core/model.py).
CommitObserver = Callable[[list[Change]], None]


class Writer:
    """The one way to change the store; every write is a short transaction.

    A transaction the store cannot take (full, busy, I/O) is rolled back whole and
    raised as ``StoreUnavailable``: callers retry (the run driver, the log sink) or
    answer ``daemon_unavailable`` (verbs); none of it is half-written.

    Each write query notes what it changed; the notes of a transaction reach
    ``observer`` only after its COMMIT succeeded, so a rolled-back transaction is
    never seen by a reader of the notes.  A refused write notes the fault alone.
    """

    def __init__(
        self, conn: apsw.Connection, path: Path, fresh_reads: Callable[[], None] = lambda: None
    ) -> None:
        self._conn = conn
        self._path = path
        # Ends the reader's transaction: before a write begins and after it ended.
        self._fresh_reads = fresh_reads
        self.fault: StoreFault | None = None
        self.observer: CommitObserver | None = None
        self._notes: list[Change] = []

    @property
    def in_transaction(self) -> bool:
        """A ``transaction`` now would be part of an enclosing one (its commit is not
        this one's)."""
        return not self._conn.getautocommit()

    @contextmanager
    def transaction(self) -> Iterator[Transaction]:
        conn = self._conn
        if not conn.getautocommit():
            # Nested: part of the enclosing transaction, noted with it.
            yield Transaction(conn, self._notes)
            return
        notes: list[Change] = []
        self._notes = notes
        self._fresh_reads()
        try:
            # Not apsw's savepoint context: when SQLite rolls a full transaction back
            # itself, the savepoint's own rollback fails and hides SQLITE_FULL.
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield Transaction(conn, notes)
                self._fresh_reads()  # a read inside holds no checkpoint back at the commit
                conn.execute("COMMIT")
            except BaseException:
                if not conn.getautocommit():
                    conn.execute("ROLLBACK")
                raise
        except _UNAVAILABLE as exc:
            failed = _unavailable(self._path, exc)
            self.refused(failed.reason, failed.detail)
            raise failed from exc
        finally:
            self._notes = []
            self._fresh_reads()  # no read after this sees the state before it
        if self.fault is not None:
            self.fault = None
            notes.append(Change(STORE_FAULT))
        if notes:
            self._tell(notes)

    def refused(self, reason: str, detail: str) -> None:
        """A write refused (or found no room for before it was tried): the fault."""
        self.fault = one_more(self.fault, reason, detail)
        self._tell([Change(STORE_FAULT)])

    def _tell(self, notes: list[Change]) -> None:
        if self.observer is None:
            return
        try:
            self.observer(notes)
        except Exception:
            # The write is committed whatever a reader of the notes makes of them: a
            # caller that saw this raise would retry it and store it twice.
            log.exception("the change observer failed on %d notes", len(notes))


class Store(NamedReads):
    """An open store: ``writer`` for changes, ``all``/``one`` and the named reads for reads."""

    def __init__(self, path: Path, writer_conn: apsw.Connection, reader: apsw.Connection) -> None:
        self.path = path
        self._writer_conn = writer_conn
        self._reader = reader
        # The hot page's query keeps one cursor (no cursor made and freed per page).
        self._aggregates = reader.cursor()
        self.writer = Writer(writer_conn, path, self.fresh_reads)
        # Fixed while the store is open (migrations run before), so read once.
        self.schema_version = migrations.stored_version(reader)

    @classmethod
    def open(cls, state_dir: Path, *, migrate: bool = True) -> Store:
        """Open (creating or migrating as needed) the store in ``state_dir``.

        Raises StoreTooNew for a store written by a newer binary, NeedsMigration
        when ``migrate`` is false and the store is older, StoreUnavailable when it
        cannot be written now (a full disk: start-up refuses, naming it).
        """
        path = state_dir / STORE_FILE
        # Owner only: the store holds every ticket, log line and verdict.
        state_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(state_dir, 0o700)
        conn = apsw.Connection(str(path))
        try:
            conn.execute("PRAGMA journal_mode = WAL")
            for name in (STORE_FILE, f"{STORE_FILE}-wal", f"{STORE_FILE}-shm"):
                if (state_dir / name).exists():
                    os.chmod(state_dir / name, 0o600)
            conn.execute("PRAGMA synchronous = NORMAL")
            _tune(conn)
            if migrations.is_empty(conn):
                migrations.create_fresh(conn)
            else:
                todo = migrations.pending(conn)
                if todo and not migrate:
                    raise NeedsMigration(migrations.stored_version(conn))
                if todo:
                    backup(conn, state_dir, migrations.stored_version(conn))
                    for step in todo:
                        migrations.apply(conn, step)
            reader = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
            _tune(reader)
        except BaseException as exc:
            conn.close()
            if isinstance(exc, _UNAVAILABLE):
                raise _unavailable(path, exc) from exc
            raise
        return cls(path, conn, reader)

    def all(self, query: str, params: Params = ()) -> list[Row]:
        reader = self._reader
        try:
            if reader.getautocommit():
                reader.execute("BEGIN")
            return list(reader.execute(QUERIES[query], params))
        except _UNAVAILABLE as exc:
            raise _unavailable(self.path, exc) from exc

    def one(self, query: str, params: Params = ()) -> Row | None:
        reader = self._reader
        try:
            if reader.getautocommit():
                reader.execute("BEGIN")
            return reader.execute(QUERIES[query], params).fetchone()
        except _UNAVAILABLE as exc:
            raise _unavailable(self.path, exc) from exc

    def aggregate(self, query: str, params: Params = ()) -> Row:
        """The one row of an aggregate ``query`` (a row whatever it matched).

        Read to its end on a cursor kept for it: a statement left stepped short would
        keep the reader's snapshot after ``fresh_reads`` ended its transaction.
        """
        reader = self._reader
        try:
            if reader.getautocommit():
                reader.execute("BEGIN")
            rows: list[Row] = self._aggregates.execute(QUERIES[query], params).fetchall()
            return rows[0]
        except _UNAVAILABLE as exc:
            raise _unavailable(self.path, exc) from exc

    def fresh_reads(self) -> None:
        """End the reader's transaction: the next read sees what was committed since."""
        if not self._reader.getautocommit():
            self._reader.execute("COMMIT")

    @contextmanager
    def snapshot(self) -> Iterator[None]:
        """Every read inside sees one committed state (the reader's transaction, which
        only a write of this store ends: none is made inside)."""
        try:
            if self._reader.getautocommit():
                self._reader.execute("BEGIN")
        except _UNAVAILABLE as exc:
            raise _unavailable(self.path, exc) from exc
        yield

    @property
    def fault(self) -> StoreFault | None:
        return self.writer.fault

    def version(self) -> int:
        return migrations.stored_version(self._reader)

    def size_bytes(self) -> int:
        total = 0
        for suffix in ("", "-wal"):
            candidate = Path(str(self.path) + suffix)
            if candidate.exists():
                total += candidate.stat().st_size
        return total

    def close(self) -> None:
        self.fresh_reads()
        self._reader.close()
        # A checkpoint on close folds the WAL back so a copied store is whole.  On a
        # full disk it may fail: the WAL stays beside the store and is folded later.
        with contextlib.suppress(*_UNAVAILABLE):
            self._writer_conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        self._writer_conn.close()


class NeedsMigration(Exception):
    def __init__(self, found: int) -> None:
        super().__init__(
            f"the store has schema version {found}; this sloopd needs "
            f"{migrations.SCHEMA_VERSION}: run 'sloopd store migrate'"
        )
        self.found = found


def backup(conn: apsw.Connection, state_dir: Path, version: int) -> Path:
    """Copy the store, consistently, into ``<state dir>/backups``."""
    directory = state_dir / BACKUP_DIR
    directory.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    target = directory / f"store-v{version}-{stamp}-{time.time_ns() % 1_000_000:06d}.sqlite3"
    destination = apsw.Connection(str(target))
    whole = False
    try:
        with destination.backup("main", conn, "main") as job:
            job.step(-1)
        # One self-contained file: no -wal/-shm sidecars when it is read later.
        destination.execute("PRAGMA journal_mode = DELETE")
        whole = True
    finally:
        destination.close()
        if not whole:  # a full disk: a half-written copy is no backup, and holds room
            for leftover in (target, Path(f"{target}-journal")):
                leftover.unlink(missing_ok=True)
    return target


def peek_version(state_dir: Path) -> int | None:
    """The stored schema version, read-only; None when there is no store."""
    path = state_dir / STORE_FILE
    if not path.exists():
        return None
    conn = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        return migrations.stored_version(conn)
    finally:
        conn.close()


def check(state_dir: Path) -> list[str]:
    """Problems found by a read-only integrity check; empty when healthy."""
    path = state_dir / STORE_FILE
    if not path.exists():
        return [f"no store at {path}"]
    conn = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        problems = [str(p) for (p,) in conn.execute("PRAGMA integrity_check") if p != "ok"]
        problems += [
            f"foreign key violation in {table} row {rowid}"
            for table, rowid, _parent, _key in conn.execute("PRAGMA foreign_key_check")
        ]
        version = migrations.stored_version(conn)
        if version > migrations.SCHEMA_VERSION:
            problems.append(str(migrations.StoreTooNew(version)))
        return problems
    finally:
        conn.close()


def backup_store(state_dir: Path) -> Path:
    path = state_dir / STORE_FILE
    conn = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        return backup(conn, state_dir, migrations.stored_version(conn))
    finally:
        conn.close()


def restore(state_dir: Path, source: Path) -> None:
    """Replace the store with a backup; the caller holds the lock."""
    try:
        probe = apsw.Connection(str(source), flags=apsw.SQLITE_OPEN_READONLY)
        try:
            problems = [str(p) for (p,) in probe.execute("PRAGMA integrity_check") if p != "ok"]
        finally:
            probe.close()
    except apsw.Error as exc:
        raise ValueError(f"{source} is not a store: {exc}") from exc
    if problems:
        raise ValueError(f"{source} is not a healthy store: {problems[0]}")
    path = state_dir / STORE_FILE
    tmp = path.with_suffix(".restore-tmp")
    # Copied whole before the store's WAL goes: a copy the disk has no room for leaves
    # the store as it was, and no half copy behind.
    try:
        shutil.copyfile(source, tmp)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    for suffix in ("-wal", "-shm"):
        Path(str(path) + suffix).unlink(missing_ok=True)
    tmp.replace(path)
