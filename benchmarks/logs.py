"""2. ``logs`` pages at 10k and 1M records: a page must cost what the page costs.

One store per size holds one settled run of the default flow whose log is spread over
three stages and three attempts (nine contiguous execution blocks, ``fixtures.EXECUTIONS``),
written through ``Store.writer`` with ``log_insert`` and bodies built like ``LogSink``.
Each request is timed in-process through the daemon's own path: the request line into
``OperatorDispatcher.handle_line`` (envelope, argument checks, ``feeds.Logs.page`` with a
``Daemon`` on the store, the reply encoded to bytes).  Cursors vary over 64 positions
around the middle of the log, so consecutive pages are different rows.  Every reply is
checked once (record count, first cursor, stage, ``elided``) before it is timed.
The log cache (``core.logcache``, 0.9.0) is off: every page is read from the store.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from benchmarks.common import Table, count, sandbox
from benchmarks.fixtures import LogStore, build_log_store
from benchmarks.paging import (
    CURSORS,
    Case,
    add_rows,
    daemon_on,
    prepare,
    query_plans,
    time_cases,
)
from sloopd.core.logcache import LogCache
from sloopd.core.logsink import LogSink
from sloopd.store import Store
from sloopd.store.db import STORE_FILE
from sloopd.views.feeds import Logs
from sloopd.wire.dispatch import OperatorDispatcher

PAGE = 100


def middle_cursors(store: LogStore, cursors: int) -> list[int]:
    """Cursors spread over the middle tenth of the log (inside 'implement#2')."""
    low, high = int(store.records * 0.45), int(store.records * 0.55)
    step = max(1, (high - low) // cursors)
    return [low + i * step for i in range(cursors)]


def _records(data: dict[str, Any]) -> list[dict[str, Any]]:
    records: list[dict[str, Any]] = data["records"]
    return records


def check_page(stage: str | None, attempt: int | None) -> Callable[..., str | None]:
    def check(store: LogStore, cursor: int, data: dict[str, Any]) -> str | None:
        records = _records(data)
        if len(records) != PAGE or data["complete"]:
            return f"expected a full page, got {len(records)} (complete={data['complete']})"
        if int(records[0]["cursor"]) <= cursor:
            return f"first cursor {records[0]['cursor']} not after {cursor}"
        if stage is not None and any(r["stage"] != stage for r in records):
            return f"a record outside stage {stage}"
        if attempt is not None and any(r["attempt"] != attempt for r in records):
            return f"a record outside attempt {attempt}"
        if stage is None and int(records[0]["cursor"]) != cursor + 1:
            return f"first cursor {records[0]['cursor']}, expected {cursor + 1}"
        return None

    return check


def check_tail(expected_elided: Callable[[LogStore, int], int]) -> Callable[..., str | None]:
    def check(store: LogStore, cursor: int, data: dict[str, Any]) -> str | None:
        records = _records(data)
        elided = expected_elided(store, cursor)
        if len(records) != PAGE or not data["complete"]:
            return f"expected a complete tail of {PAGE}, got {len(records)}"
        if data["elided"] != elided:
            return f"elided {data['elided']}, expected {elided}"
        return None

    return check


def _execution_last(store: LogStore) -> int:
    return store.blocks[("implement", 2)][1]


CASES: tuple[Case[LogStore], ...] = (
    Case(
        "page of 100 after a cursor mid-log",
        lambda s, c: {"run": s.run, "after": str(c)},
        check_page(None, None),
    ),
    Case(
        "tail 100 of the whole run (elided)",
        lambda s, c: {"run": s.run, "tail": PAGE},
        check_tail(lambda s, c: s.records - PAGE),
        varies=False,
    ),
    Case(
        "stage 'implement' page after a cursor",
        lambda s, c: {"run": s.run, "stage": "implement", "after": str(c)},
        check_page("implement", None),
    ),
    Case(
        "stage 'sync' page after a cursor in 'implement'",
        lambda s, c: {"run": s.run, "stage": "sync", "after": str(c)},
        check_page("sync", None),
    ),
    Case(
        "stage 'implement' tail 100 after a cursor",
        lambda s, c: {"run": s.run, "stage": "implement", "tail": PAGE, "after": str(c)},
        check_tail(
            lambda s, c: s.stage_count("implement") - s.stage_ordinal_at("implement", c) - PAGE
        ),
    ),
    Case(
        "execution 'implement#2' page after a cursor",
        lambda s, c: {"run": s.run, "stage": "implement#2", "after": str(c)},
        check_page("implement", 2),
    ),
    Case(
        "execution 'implement#2' tail 100 after a cursor",
        lambda s, c: {"run": s.run, "stage": "implement#2", "tail": PAGE, "after": str(c)},
        check_tail(lambda s, c: _execution_last(s) - c - PAGE),
    ),
)


def plan_queries(store_info: LogStore) -> list[tuple[str, tuple[Any, ...]]]:
    run, mid = store_info.run, store_info.records // 2
    return [
        ("run_id_by_id", (run,)),
        ("run_by_id", (run,)),
        ("logs_has_unstaged", (run,)),
        ("logs_range", (run, mid, mid + PAGE)),
        ("logs_page", (run, mid, PAGE + 1)),
        ("logs_tail_start", (run, 0, PAGE - 1)),
        ("logs_more", (run, mid)),
        ("logs_max_position", (run,)),
        ("logs_stage_page", (run, "implement", mid, PAGE + 1)),
        ("logs_stage_tail_start", (run, "implement", mid, PAGE - 1)),
        ("logs_stage_more", (run, "implement", mid)),
        ("logs_stage_ordinal_at", (run, "implement", mid)),
        ("logs_execution_page", (run, "implement", 2, mid, PAGE + 1)),
        ("logs_execution_tail_start", (run, "implement", 2, mid, PAGE - 1)),
        ("logs_execution_more", (run, "implement", 2, mid)),
        ("logs_execution_ordinal_at", (run, "implement", 2, mid)),
    ]


def run(quick: bool) -> Table:
    small, large = 10_000, (100_000 if quick else 1_000_000)
    repeats, budget = (5, 0.5) if quick else (15, 4.0)
    table = Table(
        f"2. logs pages: µs per request in-process (dispatch + feeds.Logs.page + encode),"
        f" {count(large)} vs {count(small)} records"
    )
    with sandbox() as box:
        root = box.tmpdir("lp")
        facts = {n: build_log_store(root / f"state-{n}", n) for n in (small, large)}
        stores = {n: Store.open(facts[n].state_dir) for n in (small, large)}
        try:
            prepared = {}
            for n in (small, large):
                daemon = daemon_on(facts[n].state_dir, stores[n])
                # The log cache off: the question here is what the store costs for a
                # page at each size (a page held in memory is a join at any size).
                logs = Logs(daemon, LogSink(stores[n], cache=LogCache(0)))
                # As the daemon dispatches: the plainest pages on the fast path.
                handle = OperatorDispatcher({"logs": logs.page}, fast={"logs": logs.fast})
                prepared[n] = prepare(
                    count(n),
                    "logs",
                    handle.handle_line,
                    facts[n],
                    middle_cursors(facts[n], 16 if quick else CURSORS),
                    CASES,
                    table,
                    budget,
                )
            names = [c.name for c in CASES]
            timings = time_cases(prepared[small], prepared[large], names, repeats, budget)
        finally:
            for store in stores.values():
                store.close()
        add_rows(table, timings, prepared[large].sizes, small, large)
        table.notes.insert(
            0,
            f"median request over 3 to {repeats} passes of up to"
            f" {16 if quick else CURSORS} requests"
            " (fewer for slow cases), small and large alternating;"
            " cursors spread over the middle tenth of the log; warm caches;"
            " the log cache off (every page from the store)",
        )
        query_plans(facts[large].state_dir / STORE_FILE, plan_queries(facts[large]), table)
    return table
