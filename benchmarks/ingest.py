"""1. Log ingest: lines per second from a child's pipe to committed rows.

The child is ``cat`` of a prepared file of N short lines, spawned through
``sloopd.children.ProcessGroups`` (the daemon's own capture: non-blocking pipe reads of
``CHUNK_BYTES``, the line splitter, UTF-8 decoding) with the runner's ``on_lines`` (one
call per read, its lines as a batch) feeding ``LogSink.append_many`` on a real ``Store``
in a temporary state directory.  The clock
runs from the spawn until the sink's last batch is committed.

Floors measured in the same run:
- the pipe: the same child's output read by a bare loop that only counts newlines;
- capture only: the same ``ProcessGroups`` spawn with an ``on_lines`` that only counts;
- the store: a bare apsw ``executemany`` of the very rows the sink inserts, pre-built, in
  batches of ``FLUSH_RECORDS`` per transaction (the goal's floor); and, for reference, the
  same rows through the sink's own insert (``Transaction.insert_many``: many rows per
  statement), which says what the sink's Python costs on top of its inserts;
- the sink alone: ``LogSink.append_many`` called in a loop with the lines in batches of
  what one read of the pipe holds, no child.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import uvloop

from benchmarks.common import Row, Sandbox, Table, count, rate, ratio, sandbox, verdict
from benchmarks.fixtures import log_body
from sloopd.core.logsink import FLUSH_RECORDS, LogSink
from sloopd.proc.children import CHUNK_BYTES, ProcessGroups
from sloopd.store import Store
from sloopd.util.clock import now_ms

GOAL_LINES_PER_S = 200_000  # issue 6
GOAL_FLOOR_RATIO = 0.9  # issue 15: against the bare executemany of the same rows
RUN = "R1"
STAGE = "implement"


def short_line(i: int) -> bytes:
    return b"%d ok test_case_%d passed in 0.%02ds" % (i, i % 1000, i % 100)


def write_input(path: Path, lines: int) -> int:
    with path.open("wb") as out:
        chunk: list[bytes] = []
        for i in range(lines):
            chunk.append(short_line(i))
            if len(chunk) == 10_000:
                out.write(b"\n".join(chunk) + b"\n")
                chunk = []
        if chunk:
            out.write(b"\n".join(chunk) + b"\n")
    return path.stat().st_size


def pipe_floor(argv: list[str]) -> tuple[float, int]:
    """Seconds for a bare loop to read the child's whole output, and the lines counted."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL)
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    lines = 0
    while True:
        data = os.read(fd, 64 * 1024)
        if not data:
            break
        lines += data.count(b"\n")
    proc.wait()
    proc.stdout.close()
    return time.perf_counter() - start, lines


async def _capture(
    argv: list[str], registry: Path, on_lines: Callable[[str, list[str], bool], None]
) -> float:
    groups = ProcessGroups(registry)
    start = time.perf_counter()
    child = await groups.spawn(
        argv, cwd=registry, env=dict(os.environ), owner="bench", on_lines=on_lines
    )
    await child.wait()
    elapsed = time.perf_counter() - start
    await groups.reap_leftovers(child)
    return elapsed


def capture_only(argv: list[str], registry: Path) -> tuple[float, int]:
    counted = [0]

    def on_lines(stream: str, texts: list[str], split: bool) -> None:
        counted[0] += len(texts)

    elapsed = uvloop.run(_capture(argv, registry, on_lines))
    return elapsed, counted[0]


def sink_ingest(argv: list[str], registry: Path, state_dir: Path) -> tuple[float, int, float]:
    """Seconds from spawn to the last committed batch, the rows committed, and the CPU
    seconds this process used meanwhile."""
    store = Store.open(state_dir)
    try:
        sink = LogSink(store)

        def on_lines(stream: str, texts: list[str], split: bool) -> None:
            # What ChildStarter.run hands the child, past its tail and budget.
            sink.append_many(RUN, STAGE, 1, stream, texts, split)

        async def main() -> tuple[float, float]:
            start, cpu = time.perf_counter(), time.process_time()
            await _capture(argv, registry, on_lines)
            sink.flush()
            return time.perf_counter() - start, time.process_time() - cpu

        elapsed, used = uvloop.run(main())
        row = store.one("log_max_position", (RUN,))
        committed = int(row[0]) if row and row[0] is not None else 0
    finally:
        store.close()
    return elapsed, committed, used


def read_batches(texts: list[str]) -> list[list[str]]:
    """The lines as the capture hands them over: what one read of the pipe holds."""
    batches: list[list[str]] = [[]]
    size = 0
    for text in texts:
        size += len(text) + 1
        if size > CHUNK_BYTES:
            batches.append([])
            size = len(text) + 1
        batches[-1].append(text)
    return batches


def sink_alone(texts: list[str], state_dir: Path) -> float:
    """LogSink.append_many for every read's worth of lines, then the last flush, inside an
    event loop.

    (Outside a running loop the sink commits every record on its own.)
    """
    store = Store.open(state_dir)
    try:
        sink = LogSink(store)

        batches = read_batches(texts)

        async def main() -> float:
            append_many = sink.append_many
            start = time.perf_counter()
            for batch in batches:
                append_many(RUN, STAGE, 1, "stdout", batch)
            sink.flush()
            return time.perf_counter() - start

        return uvloop.run(main())
    finally:
        store.close()


def executemany_floor(texts: list[str], state_dir: Path, many_rows: bool = False) -> float:
    """A bare executemany of the rows the sink would insert, built before the clock starts
    (with ``many_rows``: the sink's own multi-row insert of the same rows)."""
    rows: list[tuple[Any, ...]] = []
    ts = now_ms()
    for i, text in enumerate(texts, 1):
        body = log_body(i, ts, STAGE, 1, "stdout", text)
        rows.append((RUN, i, STAGE, 1, i, i, "stdout", ts, body))
    store = Store.open(state_dir)
    try:
        start = time.perf_counter()
        for first in range(0, len(rows), FLUSH_RECORDS):
            with store.writer.transaction() as tx:
                batch = rows[first : first + FLUSH_RECORDS]
                if many_rows:
                    tx.insert_many("log_insert", batch)
                else:
                    tx.run_many("log_insert", batch)
        return time.perf_counter() - start
    finally:
        store.close()


def best(runs: list[tuple[float, int]]) -> tuple[float, int]:
    return min(runs, key=lambda r: r[0])


def run(quick: bool) -> Table:
    lines = 100_000 if quick else 1_000_000
    repeats = 1 if quick else 2
    table = Table(f"1. log ingest: {count(lines)} lines from a child's pipe to committed rows")
    with sandbox() as box:
        return _run(box, table, lines, repeats)


def _run(box: Sandbox, table: Table, lines: int, repeats: int) -> Table:
    root = box.tmpdir("ing")
    source = root / "lines.txt"
    size = write_input(source, lines)
    argv = ["cat", str(source)]
    texts = [short_line(i).decode() for i in range(lines)]

    # Rounds: every figure once per round, so machine noise hits them alike.
    pipes, captures, ingests, alones, manys, multis = [], [], [], [], [], []
    for i in range(repeats):
        pipes.append(pipe_floor(argv))
        captures.append(capture_only(argv, root / f"groups-c{i}"))
        ingests.append(sink_ingest(argv, root / f"groups-s{i}", root / f"state-s{i}"))
        alones.append(sink_alone(texts, root / f"state-a{i}"))
        manys.append(executemany_floor(texts, root / f"state-m{i}"))
        multis.append(executemany_floor(texts, root / f"state-r{i}", many_rows=True))
    pipe, capture = best(pipes), best(captures)
    fastest = min(ingests, key=lambda r: r[0])
    ingest = fastest[:2]
    alone, many, multi = min(alones), min(manys), min(multis)

    for what, (_, seen) in (("pipe floor", pipe), ("capture", capture), ("ingest", ingest)):
        if seen != lines:
            table.alarms.append(f"{what} saw {seen} lines, expected {lines}")
    ingest_rate = lines / ingest[0]
    pipe_rate = lines / pipe[0]
    capture_rate = lines / capture[0]
    alone_rate = lines / alone
    many_rate = lines / many
    goal = f">= {rate(GOAL_LINES_PER_S)}"
    met = verdict(ingest_rate >= GOAL_LINES_PER_S)
    figure = "child pipe -> LogSink -> committed rows"
    table.add(
        Row(
            figure,
            rate(ingest_rate),
            "bare read loop, count only",
            rate(pipe_rate),
            ratio(ingest_rate, pipe_rate),
            goal,
            met,
        )
    )
    table.add(
        Row(
            figure,
            rate(ingest_rate),
            "apsw executemany, rows pre-built",
            rate(many_rate),
            ratio(ingest_rate, many_rate),
            f">= {GOAL_FLOOR_RATIO}x",
            verdict(ingest_rate >= GOAL_FLOOR_RATIO * many_rate),
            issue="ingest",
        )
    )
    table.add(
        Row(
            "  capture only (ProcessGroups, count lines)",
            rate(capture_rate),
            "bare read loop, count only",
            rate(pipe_rate),
            ratio(capture_rate, pipe_rate),
        )
    )
    table.add(
        Row(
            "  LogSink.append_many + flush, no child",
            rate(alone_rate),
            "apsw executemany, rows pre-built",
            rate(many_rate),
            ratio(alone_rate, many_rate),
        )
    )
    multi_rate = lines / multi
    table.add(
        Row(
            "  LogSink.append_many + flush, no child",
            rate(alone_rate),
            "the sink's multi-row insert, rows pre-built",
            rate(multi_rate),
            ratio(alone_rate, multi_rate),
        )
    )
    per_line = 1e6 / ingest_rate
    table.notes += [
        f"input: {lines} lines, {size / lines:.0f} bytes each on average, via `cat`;"
        f" best of {repeats} rounds; ingest in each round: "
        + ", ".join(rate(lines / t) for t, _, _ in ingests)
        + "; executemany in each round: "
        + ", ".join(rate(lines / t) for t in manys),
        f"the best ingest run had the CPU {fastest[2] / fastest[0]:.0%} of its wall time"
        " (the rest: preempted by other processes, or waiting on the disk)",
        f"per line: ingest {per_line:.2f} µs = capture {1e6 / capture_rate:.2f} µs"
        f" + sink append/flush {1e6 / alone_rate:.2f} µs (a bare executemany of the rows:"
        f" {1e6 / many_rate:.2f} µs, the sink's multi-row insert of them:"
        f" {1e6 / multi_rate:.2f} µs); the pipe itself costs {1e6 / pipe_rate:.2f} µs",
    ]
    return table
