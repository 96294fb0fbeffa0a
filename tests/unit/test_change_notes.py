"""Every write notes what it changed, and only a committed write is told.

The read model is revised from these notes alone (sloopd/core/model.py), so a
write query that noted nothing would leave the dashboard stale, and a note
told for a rolled-back transaction would show what the store never kept.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import apsw
import pytest

from sloopd.store import Store, StoreUnavailable
from sloopd.store.changes import NOTES, STORE_FAULT, TICKET, TRIGGER, UNSEEN, Change
from sloopd.store.queries import QUERIES

WRITING = re.compile(r"^\s*(INSERT|UPDATE|DELETE|REPLACE)\b", re.IGNORECASE | re.MULTILINE)


def ticket_fields(name: str) -> dict[str, Any]:
    return {
        "name": name,
        "path": f"tickets/{name}.md",
        "title": name,
        "body": "",
        "project": "",
        "flow": "default",
        "priority": 0,
        "state": "ready",
        "manual": 0,
        "now": 1,
    }


@pytest.fixture
def store(tmp_path: Path) -> Iterator[tuple[Store, list[list[Change]]]]:
    opened = Store.open(tmp_path / "state")
    told: list[list[Change]] = []
    opened.writer.observer = told.append
    yield opened, told
    opened.close()


def test_every_writing_query_notes_what_it_changes_or_is_declared_unseen() -> None:
    writing = {name for name, sql in QUERIES.items() if WRITING.search(sql)}
    assert writing, "no writing query found: the pattern is wrong"
    assert writing - set(NOTES) - UNSEEN == set()
    # Nothing noted that does not exist or does not write.
    assert set(NOTES) | UNSEEN <= writing
    assert not set(NOTES) & UNSEEN


def test_a_committed_transaction_tells_its_notes_once_after_commit(
    store: tuple[Store, list[list[Change]]],
) -> None:
    db, told = store
    with db.writer.transaction() as tx:
        row = tx.one("ticket_insert", ticket_fields("a"))
        assert row is not None
        # An insert run without reading its RETURNING row still names the new row.
        tx.run("trigger_insert", {"ticket": row[0], "due": 5, "now": 1})
        with db.writer.transaction() as nested:
            nested.run("ticket_set_state", {"id": row[0], "state": "held", "now": 2})
        assert told == [], "told before the commit"
    assert told == [[Change(TICKET, "T1"), Change(TRIGGER, "TR1"), Change(TICKET, "T1")]]
    with db.writer.transaction() as tx:
        tx.run("event_insert", {"kind": "k", "at": 1, "ticket": None, "run": None, "data": "{}"})
    assert len(told) == 1, "a write no show reply reflects noted something"


def test_a_rolled_back_transaction_tells_nothing(
    store: tuple[Store, list[list[Change]]],
) -> None:
    db, told = store
    # The raise is the point: a verb that refuses half-way through its transaction.
    with pytest.raises(RuntimeError), db.writer.transaction() as tx:  # noqa: PT012
        tx.one("ticket_insert", ticket_fields("b"))
        raise RuntimeError("the verb refused half-way")
    assert told == []
    assert db.one("ticket_by_name", ("b",)) is None


def test_a_refused_write_tells_only_the_fault_and_the_next_success_clears_it(
    store: tuple[Store, list[list[Change]]], tmp_path: Path
) -> None:
    db, told = store
    other = apsw.Connection(str(tmp_path / "state" / "store.sqlite3"))
    other.execute("BEGIN IMMEDIATE")  # another process holds the write lock
    try:
        with pytest.raises(StoreUnavailable), db.writer.transaction() as tx:
            tx.one("ticket_insert", ticket_fields("c"))
    finally:
        other.execute("ROLLBACK")
        other.close()
    assert told == [[Change(STORE_FAULT)]]
    assert db.fault is not None
    with db.writer.transaction() as tx:
        tx.one("ticket_insert", ticket_fields("c"))
    assert told[-1] == [Change(TICKET, "T1"), Change(STORE_FAULT)]
    assert db.fault is None


def test_an_observer_that_fails_does_not_turn_a_commit_into_an_error(
    store: tuple[Store, list[list[Change]]],
) -> None:
    db, _ = store

    def broken(changes: list[Change]) -> None:
        raise ValueError("a reader of the notes is broken")

    db.writer.observer = broken
    with db.writer.transaction() as tx:
        tx.one("ticket_insert", ticket_fields("d"))
    assert db.one("ticket_by_name", ("d",)) is not None
