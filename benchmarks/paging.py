"""Shared by the page benchmarks (2 and 3): cases, checks, interleaved timing, rows, plans.

A request is timed in-process through the daemon's own path: its line into
``OperatorDispatcher.handle_line`` (envelope, argument checks, the verb on a ``Daemon``
over the store, the reply encoded to bytes).  The small and the large store are timed in
alternating passes, so both see the same machine noise.  Each request is timed on its
own and the figure is the median request, which preemption by other processes (this
machine is shared) does not move.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

import apsw
import orjson

from benchmarks.common import (
    Row,
    Table,
    count,
    median,
    micros,
    ratio,
    request_line,
    verdict,
)
from sloopd.core.config import Config
from sloopd.core.paths import Layout
from sloopd.core.state import Daemon
from sloopd.store import Store
from sloopd.store.queries import QUERIES
from sloopd.wire.dispatch import Reply

S = TypeVar("S")
GOAL_RATIO = 1.5
CURSORS = 64


@dataclass(frozen=True)
class Case(Generic[S]):
    name: str
    args: Callable[[S, int], dict[str, Any]]  # (store facts, cursor) -> verb arguments
    check: Callable[[S, int, dict[str, Any]], str | None]  # a problem, or None
    varies: bool = True  # the cursor changes between requests


@dataclass
class Prepared:
    """One store's handler and, per case, the request lines of one pass."""

    label: str
    handle: Callable[[bytes], Reply]
    lines: dict[str, list[bytes]]
    sizes: dict[str, int]
    cost: dict[str, float]  # seconds per request seen while checking (a first estimate)


def daemon_on(root: Path, store: Store) -> Daemon:
    layout = Layout(repo=root, state_dir=root, socket_dir=root / "s")
    return Daemon(layout=layout, config=Config(), store=store)


def prepare(
    label: str,
    verb: str,
    handle: Callable[[bytes], Reply],
    facts: S,
    cursors: Sequence[int],
    cases: Sequence[Case[S]],
    table: Table,
    budget: float,
) -> Prepared:
    """Build each case's request lines and check the replies before timing.

    Every request is checked, unless a case is so slow that checking them all would
    take more than ``budget`` seconds; then only those answered within it.
    """
    lines: dict[str, list[bytes]] = {}
    sizes: dict[str, int] = {}
    cost: dict[str, float] = {}
    for case in cases:
        used = list(cursors) if case.varies else [cursors[0]] * len(cursors)
        lines[case.name] = [request_line(verb, case.args(facts, c)) for c in used]
        began, checked = time.perf_counter(), 0
        for cursor, line in zip(used, lines[case.name], strict=True):
            reply = handle(line)
            checked += 1
            assert isinstance(reply, bytes), "page verbs answer synchronously"
            sizes[case.name] = len(reply)
            decoded = orjson.loads(reply)
            if decoded.get("ok"):
                problem = case.check(facts, cursor, decoded["data"])
            else:
                problem = f"error reply {decoded.get('error')}"
            if problem is not None:
                table.alarms.append(
                    f"WRONG REPLY: {case.name} @ {label}, cursor {cursor}: {problem}"
                )
                break
            if time.perf_counter() - began > budget:
                break
        cost[case.name] = (time.perf_counter() - began) / checked
    return Prepared(label, handle, lines, sizes, cost)


def time_cases(
    small: Prepared, large: Prepared, names: Sequence[str], repeats: int, budget: float
) -> dict[str, tuple[float, float]]:
    """Per case: the median seconds per request (small, large), passes alternating.

    Each request is timed on its own and the figure is the median over every request of
    every pass: a request another process preempted lands in the tail, not the median.
    At least three passes; at most ``repeats``, fewer once a case has used ``budget``
    seconds, and slow cases pass over fewer cursors (they would dominate the run).
    """
    result: dict[str, tuple[float, float]] = {}
    for name in names:
        estimate = max(small.cost[name], large.cost[name])
        take = max(4, min(len(small.lines[name]), int(budget / 4 / estimate)))
        small_lines, large_lines = small.lines[name][:take], large.lines[name][:take]
        a: list[float] = []
        b: list[float] = []
        began, passes = time.perf_counter(), 0
        while passes < repeats and (passes < 3 or time.perf_counter() - began < budget):
            a += time_each(small.handle, small_lines)
            b += time_each(large.handle, large_lines)
            passes += 1
        result[name] = (median(a), median(b))
    return result


def add_rows(
    table: Table,
    timings: dict[str, tuple[float, float]],
    sizes: dict[str, int],
    small_n: int,
    large_n: int,
    issues: dict[str, str] | None = None,
) -> None:
    """One row per case; ``issues`` tags the cases issue 15's table names."""
    for name, (t_small, t_large) in timings.items():
        table.add(
            Row(
                f"{name} @ {count(large_n)}",
                micros(t_large),
                f"same @ {count(small_n)}",
                micros(t_small),
                ratio(t_large, t_small),
                f"<= {GOAL_RATIO}x",
                verdict(t_large / t_small <= GOAL_RATIO),
                issue=(issues or {}).get(name, ""),
            )
        )
    table.notes.append(
        "reply bytes: " + ", ".join(f"{name}: {size}" for name, size in sizes.items())
    )


# --- in-process timing and query plans -----------------------------------------------


def time_each(call: Callable[[bytes], object], lines: Sequence[bytes]) -> list[float]:
    """Seconds taken by each call, one per line (a clock read costs ~0.1 µs)."""
    clock = time.perf_counter
    samples = []
    for line in lines:
        start = clock()
        call(line)
        samples.append(clock() - start)
    return samples


TEMP_BTREE = "USE TEMP B-TREE"


def query_plans(
    db_path: Path, queries: Sequence[tuple[str, tuple[Any, ...]]], table: Table
) -> None:
    """EXPLAIN QUERY PLAN of each named query into the table's notes.

    Alarms: a temporary B-tree (the query sorts), and a filter column the plan does not
    seek on (the query walks rows in position order and drops them one by one, so its
    cost grows with the rows it skips).
    """
    conn = apsw.Connection(str(db_path), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        table.notes.append("query plans (EXPLAIN QUERY PLAN on the large store):")
        for name, params in queries:
            sql = QUERIES[name]
            rows = conn.execute("EXPLAIN QUERY PLAN " + sql, params).fetchall()
            plan = " / ".join(str(r[3]) for r in rows)
            flags = []
            if TEMP_BTREE in plan:
                flags.append(TEMP_BTREE)
                table.alarms.append(f"{TEMP_BTREE} in {name}: {plan}")
            where = sql.split("WHERE", 1)[1].split("ORDER BY")[0] if "WHERE" in sql else ""
            for column in ("stage", "attempt", "ticket"):
                if f"{column} = ?" in where and f"{column}=?" not in plan:
                    flags.append(f"FILTERED SCAN on {column}")
                    table.alarms.append(
                        f"FILTERED SCAN in {name}: '{column}' is filtered row by row,"
                        f" not sought in an index ({plan})"
                    )
            mark = f"  <== !!! {', '.join(flags)}" if flags else ""
            table.notes.append(f"  {name}: {plan}{mark}")
    finally:
        conn.close()
