"""The reader's transaction outlives a read, never a write of this store (issue 36).

A read begins it and it stays open for the reads after, so the hot ``logs`` page does
not begin and end one per request; the store's writer ends it before each of its
transactions, before the commit and once the transaction ended.  What must hold: every
read sees the last committed state, a read inside a write transaction sees the state
before it, and the WAL is checkpointed and restarted as before, so it stays bounded
however reads and writes mix.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sloopd.store import Store
from sloopd.store.db import STORE_FILE


def record(position: int, text: str = "x") -> tuple[Any, ...]:
    body = f'{{"cursor":"{position}","text":"{text}"}}'
    return ("R1", position, None, None, None, None, "stdout", 1, body)


def last(store: Store) -> Any:
    return store.scalar("log_max_position", ("R1",))


def test_a_read_after_a_commit_sees_it_and_one_inside_sees_the_state_before(
    store: Store,
) -> None:
    assert last(store) is None  # the reader's transaction begins here, and stays
    for position in (1, 2, 3):
        with store.writer.transaction() as tx:
            tx.run("log_insert", record(position))
            assert last(store) == (position - 1 or None)  # nothing uncommitted is seen
        assert last(store) == position
        assert last(store) == position


def test_a_rolled_back_write_leaves_the_reads_as_they_were(store: Store) -> None:
    with store.writer.transaction() as tx:
        tx.run("log_insert", record(1))
    assert last(store) == 1

    def failing_write() -> None:
        with store.writer.transaction() as tx:
            tx.run("log_insert", record(2))
            raise RuntimeError("the write fails")

    with pytest.raises(RuntimeError):
        failing_write()
    assert last(store) == 1
    with store.writer.transaction() as tx:
        tx.run("log_insert", record(2))
    assert last(store) == 2


def test_a_snapshot_sees_the_last_commit(store: Store) -> None:
    assert last(store) is None
    with store.writer.transaction() as tx:
        tx.run("log_insert", record(1))
    with store.snapshot():
        assert last(store) == 1
    with store.writer.transaction() as tx:
        tx.run("log_insert", record(2))
    with store.snapshot():
        assert last(store) == 2


def test_the_wal_stays_bounded_however_reads_and_writes_mix(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "state")
    wal = tmp_path / "state" / f"{STORE_FILE}-wal"
    text = "y" * 3000
    biggest = 0
    try:
        # About 12 MB through the WAL, three times the 1,000 pages past which every
        # commit checkpoints: a reader that held a checkpoint back would grow it so far.
        for position in range(1, 1501):
            with store.writer.transaction() as tx:
                tx.run("log_insert", record(position, text))
                last(store)  # a read inside the write
            assert last(store) == position
            biggest = max(biggest, wal.stat().st_size)
    finally:
        store.close()
    assert biggest < 6 << 20, f"the WAL grew to {biggest} bytes"
