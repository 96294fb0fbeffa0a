"""What the log sink holds, gives up and counts, on a real store with a room it is told.

The integration tests fill a tmpfs (tests/integration/test_full_disk_refill.py); here
the sink's decisions are driven one flush at a time, without a loop: the free space
it reads is set by the test, and the store's writer refuses on the test's schedule.
What must hold whatever happens in between: cursors (and the per-stage and
per-execution ordinals) have no gap, every line is stored or counted in a
``dropped`` record, and the daemon's own records are stored.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import apsw
import orjson
import pytest

from sloopd.core import logwrite
from sloopd.core.logroom import Reading
from sloopd.core.logsink import LogSink
from sloopd.store import Store, StoreUnavailable

MiB = 1 << 20
RESERVE = 8 * MiB
ROOMY, SHORT, FULL = 1 << 40, 4 * MiB, 0  # above, below, and far below the reserve


class ToldRoom:
    """The free space the test says there is."""

    def __init__(self) -> None:
        self.free = ROOMY

    def read(self) -> Reading:
        return Reading(self.free, RESERVE)


def rows(store: Store) -> list[dict[str, Any]]:
    """Every stored record, its columns beside its wire JSON."""
    conn = apsw.Connection(str(store.path), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        found = conn.execute(
            "SELECT run, position, stage, attempt, stage_position, execution_position, body"
            " FROM log_records ORDER BY run, position"
        ).fetchall()
    finally:
        conn.close()
    return [
        {
            "run": run,
            "position": position,
            "stage_position": stage_position,
            "execution_position": execution_position,
            **orjson.loads(str(body)),
        }
        for run, position, _stage, _attempt, stage_position, execution_position, body in found
    ]


def assert_gapless(records: list[dict[str, Any]]) -> None:
    """Cursors per run, and the ordinals per stage and per execution, count 1, 2, 3, …"""
    seen: dict[tuple[Any, ...], int] = {}
    for record in records:
        run, stage, attempt = record["run"], record["stage"], record["attempt"]
        for key, value in (
            ((run,), record["position"]),
            ((run, stage), record["stage_position"]),
            ((run, stage, attempt), record["execution_position"]),
        ):
            assert value == seen.get(key, 0) + 1, (key, value, record)
            seen[key] = value
        assert record["cursor"] == str(record["position"])


def accounted(records: list[dict[str, Any]], run: str, stream: str = "stdout") -> int:
    """Lines of ``run`` on ``stream`` stored, plus those counted as dropped."""
    stored = sum(1 for r in records if r["run"] == run and r["stream"] == stream)
    dropped: int = sum(
        r["dropped"]["streams"].get(stream, 0)
        for r in records
        if r["run"] == run and "dropped" in r
    )
    return stored + dropped


def lines(first: int, count: int) -> list[str]:
    return [f"line {n}" for n in range(first, first + count)]


def test_output_that_would_eat_into_the_reserve_is_given_up_without_a_gap(store: Store) -> None:
    room = ToldRoom()
    sink = LogSink(store, room=room)
    sink.append("R1", "implement", 1, "system", "stage 'implement' execution 1 started")
    sink.append_many("R2", None, None, "stdout", lines(0, 3))
    assert sink.flush()

    # The disk is full: output is held, not written, and the store shows the fault.
    room.free = FULL
    sink.append_many("R1", "implement", 1, "stdout", lines(0, 2500))
    sink.append_many("R1", "implement", 1, "stderr", ["warning"])
    sink.append_many("R2", None, None, "stdout", lines(3, 4))
    assert not sink.flush()
    assert len(rows(store)) == 4
    assert store.fault is not None
    assert store.fault.reason == "full"

    # Some room, still less than the reserve: held on, until the daemon's own record waits.
    room.free = SHORT
    assert not sink.flush()
    sink.append("R1", "implement", 1, "system", "stage 'implement' execution 1 passed")
    assert sink.flush()
    records = rows(store)
    assert_gapless(records)
    r1 = [r for r in records if r["run"] == "R1"]
    assert [r["text"].split(" ", 1)[0] for r in r1] == ["stage", "2501", "stage"]
    loss = r1[1]["dropped"]
    assert loss["streams"] == {"stdout": 2500, "stderr": 1}
    assert loss["lines"] == 2501
    assert loss["cause"] == "store"
    assert loss["bytes"] == sum(len(t) for t in lines(0, 2500)) + len("warning")
    # The numbers compared when the output was given up: what was free, and what it
    # needed (more than was free), the reserve included.
    assert "had 4.0 MiB free, less than the " in r1[1]["text"]
    assert "keep 8.0 MiB free for runs (repo.disk_reserve)" in r1[1]["text"]
    assert accounted(records, "R2") == 7
    assert store.fault is None

    # Room again: what follows continues the cursors.
    room.free = ROOMY
    sink.append_many("R1", "implement", 1, "stdout", lines(2500, 10))
    assert sink.flush()
    records = rows(store)
    assert_gapless(records)
    assert accounted(records, "R1") == 2510


def test_the_daemons_records_ahead_of_held_output_are_stored_at_once(store: Store) -> None:
    """Short of the reserve, a stage's first record is stored while its output waits:
    the output held is not yet given up (nothing of the daemon's waits behind it)."""
    room = ToldRoom()
    room.free = SHORT
    sink = LogSink(store, room=room)
    sink.append("R1", "implement", 1, "system", "stage 'implement' execution 1 started")
    sink.append_many("R1", "implement", 1, "stdout", lines(0, 20))
    assert not sink.flush()
    assert [r["stream"] for r in rows(store)] == ["system"]
    room.free = ROOMY
    assert sink.flush()
    records = rows(store)
    assert_gapless(records)
    assert [r["text"] for r in records[1:]] == lines(0, 20)


def test_held_output_is_written_a_transaction_at_a_time_while_it_fits(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Space returns, but not enough for everything held: what fits above the reserve
    is stored (in order), the rest is counted, and the reserve is never spent."""
    room = ToldRoom()
    sink = LogSink(store, room=room)
    room.free = FULL
    sink.append_many("R1", "implement", 1, "stdout", lines(0, 3500))
    assert not sink.flush()
    written: list[int] = []
    real = store.writer.transaction

    @contextmanager
    def transaction() -> Iterator[Any]:
        with real() as tx:
            yield tx
        written.append(1)
        room.free -= 2 * MiB  # each stored chunk takes room

    monkeypatch.setattr(store.writer, "transaction", transaction)
    room.free = RESERVE + 5 * MiB
    sink.append("R1", "implement", 1, "system", "stage 'implement' execution 1 passed")
    assert sink.flush()
    records = rows(store)
    assert_gapless(records)
    stored = [r for r in records if r["stream"] == "stdout"]
    assert 0 < len(stored) < 3500
    assert [r["text"] for r in stored] == lines(0, len(stored))
    assert accounted(records, "R1") == 3500
    assert records[-1]["text"] == "stage 'implement' execution 1 passed"
    assert room.free >= 0


def test_every_dropped_line_is_counted_however_often_the_store_refuses(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The store refuses every other write (a lock held elsewhere, a disk filling and
    emptying) while lines keep coming past the memory bound."""
    monkeypatch.setattr(logwrite, "MAX_HELD_RECORDS", 40)
    sink = LogSink(store)
    real = store.writer.transaction
    attempts = 0

    @contextmanager
    def flaky() -> Iterator[Any]:
        nonlocal attempts
        attempts += 1
        if attempts % 2:
            raise StoreUnavailable(store.path, "busy", "another process holds the lock")
        with real() as tx:
            yield tx

    monkeypatch.setattr(store.writer, "transaction", flaky)

    async def print_and_flush() -> int:
        # On a loop, as in the daemon; nothing here awaits, so no timer of the sink's
        # fires: each flush is the test's.
        sent = 0
        for _ in range(12):
            sink.append_many("R1", "implement", 1, "stdout", lines(sent, 25))
            sent += 25
            sink.flush()
        for _ in range(6):
            sink.flush()
        return sent

    sent = asyncio.run(print_and_flush())
    assert sink.flush()
    assert sink.held is None
    assert not sink.losses
    records = rows(store)
    assert_gapless(records)
    assert accounted(records, "R1") == sent
    assert any("dropped" in r for r in records), "the bound was passed, yet nothing counted"


def test_what_a_stopping_daemon_cannot_store_is_named_in_its_log(
    store: Store, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    @contextmanager
    def refusing() -> Iterator[Any]:
        raise StoreUnavailable(store.path, "full", "the disk is full")
        yield

    monkeypatch.setattr(store.writer, "transaction", refusing)
    sink = LogSink(store)
    sink.append("R1", "implement", 1, "system", "stage 'implement' execution 1 started")
    sink.append_many("R1", "implement", 1, "stdout", lines(0, 5))
    with caplog.at_level(logging.ERROR, logger="sloopd.core.logwrite"):
        sink.close()
    said = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert len(said) == 1, said
    assert "could not be stored before the daemon stopped" in said[0]
    assert "2 log records and a count of 5 dropped lines" in said[0], said
