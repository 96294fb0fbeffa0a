"""Each named row's fields are its queries' columns, by name and in order.

The store builds a row type from the tuple SQLite answers (``_make``), so a
query whose column list drifted from its type would name every value wrong
without an error.  SQLite says what each query returns (its columns' names,
prepared on the real schema, never run); every query mapped to a type must say
exactly that type's fields.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import apsw
import apsw.ext
import pytest

from sloopd.store import RunRow, Store, TicketRow, TriggerRow
from sloopd.store import rowtypes as module
from sloopd.store.queries import QUERIES
from sloopd.store.rowtypes import ROW_TYPES, RecentRunRow, RunUsageRow, UsageRow


@pytest.fixture(scope="module")
def schema(tmp_path_factory: pytest.TempPathFactory) -> Iterator[apsw.Connection]:
    state = tmp_path_factory.mktemp("rowtypes") / "state"
    Store.open(state).close()
    conn = apsw.Connection(str(state / "store.sqlite3"), flags=apsw.SQLITE_OPEN_READONLY)
    yield conn
    conn.close()


def columns(conn: apsw.Connection, sql: str) -> tuple[str, ...]:
    """The names of the columns the statement of ``sql`` that answers rows returns."""
    remaining: str | None = sql
    while remaining:
        info = apsw.ext.query_info(conn, remaining)
        if info.description:
            return tuple(name for name, _declared in info.description)
        remaining = info.query_remaining
    return ()


@pytest.mark.parametrize("query", sorted(ROW_TYPES))
def test_a_row_types_fields_are_its_querys_columns(schema: apsw.Connection, query: str) -> None:
    assert query in QUERIES
    assert columns(schema, QUERIES[query]) == ROW_TYPES[query]._fields


def test_the_joined_rows_split_into_their_parts() -> None:
    # runs_recent is a run row followed by usage_for_run's sums; usage_by_settled_run
    # is a run id followed by them: the split methods cut where the parts meet.
    assert RecentRunRow._fields == RunRow._fields + UsageRow._fields
    assert RunUsageRow._fields == ("run", *UsageRow._fields)
    recent = RecentRunRow._make(range(len(RecentRunRow._fields)))
    assert recent.run() == RunRow._make(range(len(RunRow._fields)))
    assert recent.usage() == UsageRow._make(range(len(RunRow._fields), len(recent)))
    unreported = recent._replace(reported=None)
    assert unreported.usage() is None


def test_every_row_type_serves_a_query() -> None:
    defined = {
        value
        for value in vars(module).values()
        if isinstance(value, type) and issubclass(value, tuple) and hasattr(value, "_fields")
    }
    assert defined == set(ROW_TYPES.values())


def open_store(tmp_path: Path) -> Store:
    return Store.open(tmp_path / "state")


def test_named_reads_answer_named_rows_and_refuse_a_mismatched_type(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    try:
        fields: dict[str, Any] = {
            "name": "a",
            "path": "tickets/a.md",
            "title": "A",
            "body": "",
            "project": "",
            "flow": "default",
            "priority": 0,
            "state": "ready",
            "manual": 0,
            "now": 1,
        }
        with store.writer.transaction() as tx:
            ticket_id = tx.scalar("ticket_insert", fields)
            trigger = tx.row(
                TriggerRow, "trigger_insert", {"ticket": ticket_id, "due": 5, "now": 1}
            )
        assert trigger is not None
        assert trigger.ticket == ticket_id
        assert trigger.due_at_ms == 5
        ticket = store.ticket_by_id(ticket_id)
        assert isinstance(ticket, TicketRow)
        assert ticket.name == "a"
        assert ticket.state == "ready"
        assert store.rows(TicketRow, "tickets_all") == [ticket]
        assert store.run_by_id("R1") is None
        assert store.scalar("triggers_queued_count") == 1
        with pytest.raises(AssertionError, match="ticket_by_id answers TicketRow"):
            store.row(_Other, "ticket_by_id", (ticket_id,))
    finally:
        store.close()


class _Other(NamedTuple):
    id: str
