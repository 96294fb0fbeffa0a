"""Issue 15's table, gathered from the rows of the benchmarks that ran.

Each benchmark tags the rows that answer a line of the issue's table (``Row.issue``);
this module lists those lines in the issue's order, each with the figure, the floor or
peer measured in the same run, the ratio and the goal, and says which lines no
benchmark of this run measured (and which benchmark would).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from benchmarks.common import Row, Table

# (tag, the line of the issue's table, the benchmark that measures it)
LINES: tuple[tuple[str, str, str], ...] = (
    ("logs-1", "`logs` page of 100, 1 connection", "throughput"),
    ("logs-16", "`logs` page of 100, 16 connections", "throughput"),
    ("logs-cpu", "server CPU per page (16 conn)", "throughput"),
    ("show-16", "dashboard `show`, 16 connections", "dashboard"),
    ("events-project", "events page, project scope (100 tickets), 1M vs 10k", "events"),
    ("events-pattern", "events page, pattern scope (50 tickets), 1M vs 10k", "events"),
    ("events-tail", "events tail, project scope, 1M vs 10k", "events"),
    ("ingest", "ingest, child pipe -> committed rows", "ingest"),
    ("show-flood", "`show` p99 while 8 agents flood", "dashboard"),
    ("longpoll-1-p50", "long-poll: line printed -> received, 1 follower, p50", "longpoll"),
    ("longpoll-1-p99", "long-poll: line printed -> received, 1 follower, p99", "longpoll"),
    ("longpoll-16-p50", "long-poll: line printed -> received, 16 followers, p50", "longpoll"),
    ("longpoll-16-p99", "long-poll: line printed -> received, 16 followers, p99", "longpoll"),
    ("longpoll-idle", "long-poll: daemon CPU with 100 idle followers", "longpoll"),
    ("rss", "daemon RSS, 10k tickets, 50k runs, 1M log records", "rss"),
    ("rss-peak", "daemon peak RSS (VmHWM), the same store", "rss"),
)


def summary(tables: Sequence[Table], quick: bool) -> Table:
    """One row per line of the issue's table, in its order (or why it is missing)."""
    tagged: dict[str, Row] = {}
    for table in tables:
        for row in table.rows:
            if row.issue and row.issue not in tagged:
                tagged[row.issue] = row
    size = " (quick run: smaller sizes than the issue names)" if quick else ""
    result = Table(f"issue 15: every figure of its table, from the tables above{size}")
    for tag, line, benchmark in LINES:
        found = tagged.get(tag)
        if found is None:
            result.add(Row(line, "not measured", f"(benchmark '{benchmark}' did not run)"))
        else:
            result.add(replace(found, figure=line))
    met = sum(1 for r in result.rows if r.verdict == "met")
    missed = sum(1 for r in result.rows if r.verdict == "MISSED")
    result.notes.append(f"goals met: {met}; missed: {missed}; lines: {len(LINES)}")
    if quick:
        result.notes.append(
            "quick run: each figure at its table's size (events 100k vs 10k, ingest 100k"
            " lines, the RSS store a tenth of the issue's); only a full run measures the"
            " issue's sizes"
        )
    return result
