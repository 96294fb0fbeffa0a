"""Named-query access inside one write transaction (``db.Writer.transaction``).

Every write query notes what it changed (``changes.NOTES``); the writer hands the
notes of a transaction to its observer once it committed.
"""

from __future__ import annotations

import functools
import itertools
from typing import Any

import apsw

from sloopd.store.changes import NOTES, Change
from sloopd.store.queries import QUERIES
from sloopd.store.rowtypes import NamedReads, Params, Row

# Rows per statement of ``Transaction.insert_many``: one statement of 250 rows
# (2,250 parameters, far below SQLite's 32,766) costs much less per row than
# 250 steps of ``executemany`` (the log sink's batches, measured: ~40%).
ROWS_PER_INSERT = 250


class Transaction(NamedReads):
    """Named-query access inside one write transaction; notes what each write changed."""

    def __init__(self, conn: apsw.Connection, notes: list[Change]) -> None:
        self._conn = conn
        self._notes = notes

    def run(self, query: str, params: Params = ()) -> None:
        cursor = self._conn.execute(QUERIES[query], params)
        noter = NOTES.get(query)
        if noter is not None:
            # An insert names its new row by the id it returns, even when unread here.
            self._notes.append(noter(params, cursor.fetchone()))

    def run_many(self, query: str, rows: list[tuple[Any, ...]]) -> None:
        self._conn.executemany(QUERIES[query], rows)
        noter = NOTES.get(query)
        if noter is not None:
            self._notes.extend(noter(params, None) for params in rows)

    def insert_many(self, query: str, rows: list[tuple[Any, ...]]) -> None:
        """``run_many`` of an ``INSERT … VALUES (…)`` query, many rows per statement."""
        whole = len(rows) - len(rows) % ROWS_PER_INSERT
        if whole:
            statement = _multi_row(query)
            for first in range(0, whole, ROWS_PER_INSERT):
                chunk = rows[first : first + ROWS_PER_INSERT]
                self._conn.execute(statement, list(itertools.chain.from_iterable(chunk)))
        if whole < len(rows):
            self._conn.executemany(QUERIES[query], rows[whole:])

    def all(self, query: str, params: Params = ()) -> list[Row]:
        return list(self._conn.execute(QUERIES[query], params))

    def one(self, query: str, params: Params = ()) -> Row | None:
        row: Row | None = self._conn.execute(QUERIES[query], params).fetchone()
        self._note(query, params, row)
        return row

    def _note(self, query: str, params: Params, row: Row | None) -> None:
        noter = NOTES.get(query)
        if noter is not None:
            self._notes.append(noter(params, row))


@functools.cache
def _multi_row(query: str) -> str:
    head, values, group = QUERIES[query].rpartition("VALUES")
    assert values and group.strip().startswith("("), f"{query} is no INSERT … VALUES (…)"
    return head + values + " " + ",".join([group.strip()] * ROWS_PER_INSERT)
