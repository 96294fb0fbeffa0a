"""``LogSink.append_many``: a read's worth of lines, the same records as one by one.

The runner hands the sink each read of a child's pipe as one batch; the cursors,
the per-stage and per-execution ordinals and the stored wire JSON must be what
``append`` of each line writes, across executions and past FLUSH_RECORDS.
"""

from __future__ import annotations

import re
import shutil
import tempfile
from pathlib import Path

import apsw
import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from sloopd.core.logsink import FLUSH_RECORDS, LogSink
from sloopd.store import Store, db

# (execution, stream, lines): executions of two runs, one with two stages.
_EXECUTIONS = [
    ("R1", "implement", 1),
    ("R1", "review", 1),
    ("R1", "implement", 2),
    ("R2", None, None),
]
_BATCHES = st.lists(
    st.tuples(
        st.sampled_from(_EXECUTIONS),
        st.sampled_from(["stdout", "stderr"]),
        st.one_of(
            st.lists(st.text(max_size=12), min_size=1, max_size=8),
            st.integers(1, 2 * FLUSH_RECORDS).map(lambda n: [f"line {i}" for i in range(n)]),
        ),
    ),
    min_size=1,
    max_size=6,
)


def _stored(state_dir: Path) -> list[tuple[object, ...]]:
    """Every row, its time stamps masked (batches are stamped when they are read)."""
    conn = apsw.Connection(str(state_dir / db.STORE_FILE))
    try:
        rows = conn.execute(
            "SELECT run, position, stage, attempt, stage_position, execution_position, stream,"
            " body FROM log_records ORDER BY run, position"
        ).fetchall()
    finally:
        conn.close()
    return [(*row[:-1], re.sub(r'"ts_ms":\d+', '"ts_ms":0', str(row[-1]))) for row in rows]


def _ingest(
    state_dir: Path,
    batches: list[tuple[tuple[str, str | None, int | None], str, list[str]]],
    batched: bool,
) -> None:
    store = Store.open(state_dir)
    try:
        sink = LogSink(store)
        for (run, stage, attempt), stream, texts in batches:
            if batched:
                sink.append_many(run, stage, attempt, stream, texts)
            else:
                for text in texts:
                    sink.append(run, stage, attempt, stream, text)
        sink.flush()
    finally:
        store.close()


@settings(max_examples=25, deadline=None)
@given(_BATCHES)
def test_batches_store_what_lines_one_by_one_store(
    batches: list[tuple[tuple[str, str | None, int | None], str, list[str]]],
) -> None:
    root = Path(tempfile.mkdtemp(prefix="sloop-sink-"))
    try:
        _ingest(root / "each", batches, batched=False)
        _ingest(root / "batched", batches, batched=True)
        each, batched = _stored(root / "each"), _stored(root / "batched")
        assert batched == each
        assert len(each) == sum(len(texts) for _, _, texts in batches)
        for row in each:  # the stored body is the wire record orjson writes, cursor first
            record = orjson.loads(str(row[-1]))
            assert record.pop("cursor") == str(row[1])
            assert str(row[-1]) == f'{{"cursor":"{row[1]}",' + orjson.dumps(record).decode()[1:]
            assert (record["stage"], record["attempt"], record["stream"]) == row[2:4] + row[6:7]
    finally:
        shutil.rmtree(root, ignore_errors=True)
