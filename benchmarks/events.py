"""3. Scoped ``events`` pages at 10k and 1M events across 1k tickets.

The store holds 1,000 tickets in 10 projects, two settled runs each, and N events
(``fixtures.build_event_store``): 1% repository-wide, a tenth on one "hot" ticket (so a
ticket's and a run's pages are full pages at both sizes), the rest spread at random.
Scopes: one ticket, one run, a project (100 tickets), a pattern (a regular expression
matching 50 ticket names), and no scope; pages by cursor from the middle of the feed, and
tails.  Timed in-process like benchmark 2 (``benchmarks.paging``).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import orjson

from benchmarks.common import Table, count, sandbox
from benchmarks.fixtures import EventStore, build_event_store
from benchmarks.paging import (
    CURSORS,
    Case,
    add_rows,
    daemon_on,
    prepare,
    query_plans,
    time_cases,
)
from sloopd.store import Store
from sloopd.store.db import STORE_FILE
from sloopd.views.feeds import Events
from sloopd.wire.dispatch import OperatorDispatcher

PAGE = 100
PROJECT = "proj-03"
PATTERN = "task-01[0-4]"

Scope = Callable[[EventStore], str | None]
Member = Callable[[EventStore, dict[str, Any]], bool]


def hot_ticket(s: EventStore) -> str:
    return s.tickets[0][0]


def hot_run(s: EventStore) -> str:
    return s.runs[hot_ticket(s)][0]


def pattern_tickets(s: EventStore) -> list[str]:
    expression = re.compile(PATTERN, re.IGNORECASE)
    return [t for t, n, _ in s.tickets if expression.search(n)]


def in_project(s: EventStore, event: dict[str, Any]) -> bool:
    return any(t == event["ticket"] and p == PROJECT for t, _, p in s.tickets)


def matches_pattern(s: EventStore, event: dict[str, Any]) -> bool:
    expression = re.compile(PATTERN, re.IGNORECASE)
    return any(t == event["ticket"] and expression.search(n) for t, n, _ in s.tickets)


def check(member: Member, tail: bool) -> Callable[[EventStore, int, dict[str, Any]], str | None]:
    def verify(s: EventStore, cursor: int, data: dict[str, Any]) -> str | None:
        events: list[dict[str, Any]] = data["events"]
        if len(events) != PAGE:
            return f"expected a full page of {PAGE}, got {len(events)}"
        positions = [int(e["cursor"]) for e in events]
        if positions != sorted(positions) or (not tail and positions[0] <= cursor):
            return "events out of order or not after the cursor"
        if not all(member(s, e) for e in events):
            return "an event outside the scope"
        return None

    return verify


def case(name: str, scope: Scope, member: Member, tail: bool = False) -> Case[EventStore]:
    def args(s: EventStore, cursor: int) -> dict[str, Any]:
        chosen: dict[str, Any] = {"tail": PAGE} if tail else {"after": str(cursor)}
        ref = scope(s)
        if ref is not None:
            chosen["scope"] = ref
        return chosen

    return Case(name, args, check(member, tail), varies=not tail)


PROJECT_PAGE = "scope = project (100 tickets), page"
PATTERN_PAGE = f"scope = pattern '{PATTERN}' (50 tickets), page"
PROJECT_TAIL = "scope = project (100 tickets), tail 100"
# The rows issue 15's table names (benchmarks.summary).
ISSUES = {
    PROJECT_PAGE: "events-project",
    PATTERN_PAGE: "events-pattern",
    PROJECT_TAIL: "events-tail",
}

CASES: tuple[Case[EventStore], ...] = (
    case("no scope, page after a cursor mid-feed", lambda s: None, lambda s, e: True),
    case(
        "scope = one ticket, page after a cursor",
        hot_ticket,
        lambda s, e: e["ticket"] == hot_ticket(s),
    ),
    case("scope = one run, page after a cursor", hot_run, lambda s, e: e["run"] == hot_run(s)),
    case(PROJECT_PAGE, lambda s: f"project:{PROJECT}", in_project),
    case(PATTERN_PAGE, lambda s: PATTERN, matches_pattern),
    case("no scope, tail 100", lambda s: None, lambda s, e: True, tail=True),
    case(
        "scope = one ticket, tail 100",
        hot_ticket,
        lambda s, e: e["ticket"] == hot_ticket(s),
        tail=True,
    ),
    case(PROJECT_TAIL, lambda s: f"project:{PROJECT}", in_project, tail=True),
)


def middle_cursors(s: EventStore, cursors: int) -> list[int]:
    low, high = int(s.events * 0.45), int(s.events * 0.55)
    step = max(1, (high - low) // cursors)
    return [low + i * step for i in range(cursors)]


def plan_queries(s: EventStore) -> list[tuple[str, tuple[Any, ...]]]:
    mid = s.events // 2
    return [
        ("events_page", (mid, PAGE + 1)),
        ("events_tail", (PAGE,)),
        ("events_max_position", ()),
        ("events_ticket_page", (hot_ticket(s), mid, PAGE + 1)),
        ("events_ticket_tail", (hot_ticket(s), PAGE)),
        ("events_run_page", (hot_run(s), mid, PAGE + 1)),
        ("events_run_tail", (hot_run(s), PAGE)),
        ("project_exists", (PROJECT,)),
        ("events_project_page", (PROJECT, mid, PAGE + 1)),
        ("events_project_tail", (PROJECT, PAGE)),
        ("tickets_since", (0,)),
        ("events_ticket_heads", (orjson.dumps(pattern_tickets(s)).decode(), mid, 5)),
        ("events_ticket_heads_desc", (orjson.dumps(pattern_tickets(s)).decode(), mid, 5)),
        ("events_ticket_positions", (hot_ticket(s), mid, PAGE)),
        ("events_ticket_positions_before", (hot_ticket(s), mid, mid + 1000, PAGE)),
        ("events_at_positions", (orjson.dumps(list(range(mid, mid + PAGE))).decode(),)),
    ]


def run(quick: bool) -> Table:
    small, large = 10_000, (100_000 if quick else 1_000_000)
    repeats, budget = (5, 0.5) if quick else (15, 4.0)
    table = Table(
        f"3. scoped events pages: µs per request in-process (dispatch + feeds.Events.page +"
        f" encode), {count(large)} vs {count(small)} events over 1k tickets"
    )
    with sandbox() as box:
        root = box.tmpdir("ev")
        facts = {n: build_event_store(root / f"state-{n}", n) for n in (small, large)}
        stores = {n: Store.open(facts[n].state_dir) for n in (small, large)}
        try:
            prepared = {}
            for n in (small, large):
                daemon = daemon_on(facts[n].state_dir, stores[n])
                dispatcher = OperatorDispatcher({"events": Events(daemon).page})
                prepared[n] = prepare(
                    count(n),
                    "events",
                    dispatcher.handle_line,
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
        add_rows(table, timings, prepared[large].sizes, small, large, ISSUES)
        table.notes.insert(
            0,
            f"median request over 3 to {repeats} passes of up to"
            f" {16 if quick else CURSORS} requests"
            " (fewer for slow cases), small and large alternating;"
            " cursors spread over the middle tenth of the feed; warm caches",
        )
        query_plans(facts[large].state_dir / STORE_FILE, plan_queries(facts[large]), table)
    return table
