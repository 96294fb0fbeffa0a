"""A panel seat's records carry its index as ``reviewer``, on every path of the sink.

An execution's first line, a split piece and records held while the store refuses
go through ``_buffer``; the lines after them through ``_buffer_lines``: both must
write the same wire JSON, with ``reviewer`` in the same place, and a stage
worker's records none.
"""

from __future__ import annotations

from pathlib import Path

import orjson

from sloopd.core.logsink import LogSink
from sloopd.store import Store


def _records(state_dir: Path) -> list[dict[str, object]]:
    store = Store.open(state_dir)
    try:
        sink = LogSink(store)
        sink.append("R1", "review", 1, "system", "stage 'review' execution 1 started")
        sink.append_many("R1", "review", 1, "stdout", ["seat 0 first", "seat 0 second"], seat=0)
        sink.append("R1", "review", 1, "note", "a note from seat 1", ts_ms=5, seat=1)
        sink.append("R1", "review", 1, "stdout", "x" * 10, split=True, seat=1)
        sink.append_many("R1", "review", 1, "stdout", ["seat 1 line"], seat=1)
        sink.append_many("R2", "review", 1, "stdout", ["a seat's first line"], seat=1)
        sink.flush()
        bodies = [row[1] for row in store.all("logs_rows_after", ("R1", 0))]
        bodies += [row[1] for row in store.all("logs_rows_after", ("R2", 0))]
    finally:
        store.close()
    return [orjson.loads(body if isinstance(body, bytes) else body.encode()) for body in bodies]


def test_seat_records_name_the_seat_where_every_path_puts_it(tmp_path: Path) -> None:
    records = _records(tmp_path)
    assert [r.get("reviewer") for r in records] == [None, 0, 0, 1, 1, 1, 1]
    assert "reviewer" not in records[0]  # the stage's own line has no seat
    for record in records[1:]:
        keys = list(record)
        # cursor, ts_ms, stage, attempt, reviewer, stream, text: one order on every path.
        assert keys[:7] == ["cursor", "ts_ms", "stage", "attempt", "reviewer", "stream", "text"]
    assert records[3]["stream"] == "note"
    assert records[3]["ts_ms"] == 5
    assert records[4]["split"] is True
