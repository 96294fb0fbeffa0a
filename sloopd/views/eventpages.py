"""One page of the events feed for a scope, at the cost of the page.

Unscoped, run, ticket and project scopes are each one range of an index in
position order (a project's events carry its name: ``events_project``).  A
pattern scope matches tickets (the matches are cached per pattern and topped
up with the tickets posted since) and merges their ranges of the
``(ticket, position)`` index lazily: a few positions per ticket (about two
pages in all, at least one per ticket), then more of a ticket only when the
merge has used what it read, so a page reads about a page plus a row or two
per matched ticket, not a page per ticket.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal

import orjson

from sloopd.core import longpoll
from sloopd.core.longpoll import EventKey
from sloopd.queue import refs
from sloopd.store import Store

EVENTS_PAGE_EVENTS: Final = 100
CACHED_PATTERNS: Final = 256

EventRow = tuple[int, str]  # (position, the event's wire JSON)

Source = Literal["all", "run", "ticket", "project"]

# Each one-range scope's two queries, written out whole so that grepping a query's
# name finds this line: a page forward from the cursor, and the feed's tail.
EVENT_QUERIES: Final[Mapping[tuple[Source, Literal["page", "tail"]], str]] = {
    ("all", "page"): "events_page",
    ("all", "tail"): "events_tail",
    ("run", "page"): "events_run_page",
    ("run", "tail"): "events_run_tail",
    ("ticket", "page"): "events_ticket_page",
    ("ticket", "tail"): "events_ticket_tail",
    ("project", "page"): "events_project_page",
    ("project", "tail"): "events_project_tail",
}


@dataclass(frozen=True, slots=True)
class Scope:
    """Where a page's events come from: one index range, or a merge of tickets' ranges."""

    source: Source | None  # one index range (EVENT_QUERIES); None: the tickets' merge
    key: tuple[Any, ...] = ()
    tickets: tuple[str, ...] = ()
    follows: tuple[EventKey, ...] = (longpoll.EVERYTHING,)  # what wakes a waiter

    def page(self, store: Store, after: int, tail: int | None) -> tuple[list[EventRow], bool]:
        """The page's rows, and whether more match after them."""
        if self.source is None:
            return _merged_page(store, self.tickets, after, tail)
        if tail is not None:
            found = store.all(EVENT_QUERIES[self.source, "tail"], (*self.key, tail))
            # Positional on purpose: the feed's hot path keeps the store's tuples, so
            # a page builds no object per event (EventRow: position, then JSON).
            return [r for r in reversed(found) if r[0] > after], False
        rows = store.all(
            EVENT_QUERIES[self.source, "page"], (*self.key, after, EVENTS_PAGE_EVENTS + 1)
        )
        return rows[:EVENTS_PAGE_EVENTS], len(rows) > EVENTS_PAGE_EVENTS


UNSCOPED: Final = Scope("all")


class PatternTickets:
    """The tickets a pattern matches, kept per pattern and topped up with new tickets.

    Tickets are never deleted and their ids and names never change, so a
    pattern's matches only grow, by the tickets posted since it was last asked.
    """

    def __init__(self) -> None:
        self._matched: dict[str, tuple[int, list[str]]] = {}

    def matching(self, store: Store, pattern: str) -> tuple[str, ...]:
        cached = self._matched.get(pattern)
        # A pattern not seen before is compiled (and refused when invalid) at once.
        expression = refs.pattern(pattern, field="scope") if cached is None else None
        seen, matched = cached if cached is not None else (0, [])
        rows = store.all("tickets_since", (seen,))
        if rows:
            expression = expression or refs.pattern(pattern, field="scope")
            matched = matched + [t for _, t, name in rows if refs.matches(expression, t, name)]
            seen = int(rows[-1][0])
        if cached is None or rows:
            if cached is None and len(self._matched) >= CACHED_PATTERNS:
                self._matched.clear()
            self._matched[pattern] = (seen, matched)
        return tuple(matched)


def scope_of(store: Store, repo: Path, patterns: PatternTickets, scope: str | None) -> Scope:
    """The same ladder as ``show``: tickets cover their runs, runs themselves."""
    if scope is None:
        return UNSCOPED
    exact = refs.resolve_exact(store, repo, scope)
    if exact is not None and exact.kind == "run":
        return Scope("run", (exact.key,), follows=(("run", exact.key),))
    if exact is not None and exact.kind == "ticket":
        return Scope("ticket", (exact.key,), follows=(("ticket", exact.key),))
    if exact is not None:
        return Scope("project", (exact.key,), follows=(longpoll.ANY_TICKET,))
    return Scope(None, tickets=patterns.matching(store, scope), follows=(longpoll.ANY_TICKET,))


def _merged_page(
    store: Store, tickets: tuple[str, ...], after: int, tail: int | None
) -> tuple[list[EventRow], bool]:
    if not tickets:
        return [], False
    if tail is not None:
        chosen = _merge(store, tickets, after, tail, descending=True)
        chosen.reverse()
        full = False
    else:
        chosen = _merge(store, tickets, after, EVENTS_PAGE_EVENTS + 1, descending=False)
        full = len(chosen) > EVENTS_PAGE_EVENTS
        chosen = chosen[:EVENTS_PAGE_EVENTS]
    if not chosen:
        return [], False
    rows = store.all("events_at_positions", (orjson.dumps(chosen).decode(),))
    return [(int(position), str(event)) for position, event in rows], full


def _merge(
    store: Store, tickets: tuple[str, ...], after: int, want: int, *, descending: bool
) -> list[int]:
    """The first (last) ``want`` positions after ``after`` over the tickets' ranges.

    One query reads each ticket's first few positions (about two pages in all);
    a heap merges them, and a ticket is read further only when the merge has
    taken all it read of it, in batches that grow.
    """
    ahead = min(want, max(2, -(-2 * want // len(tickets))))  # per ticket, rounded up
    heads_query = "events_ticket_heads_desc" if descending else "events_ticket_heads"
    heads = store.all(heads_query, (orjson.dumps(list(tickets)).decode(), after, ahead))
    sign = -1 if descending else 1
    buffered: dict[str, deque[int]] = {}
    more: dict[str, int] = {}  # ticket -> how many to read next time (absent: it has no more)
    heap: list[tuple[int, str]] = []
    for ticket, joined in heads:
        if joined is None:
            continue
        found = deque(int(p) for p in str(joined).split(","))
        if len(found) == ahead:
            more[ticket] = ahead * 4
        heap.append((sign * found.popleft(), ticket))
        buffered[ticket] = found
    heapq.heapify(heap)
    chosen: list[int] = []
    while heap and len(chosen) < want:
        signed, ticket = heapq.heappop(heap)
        position = sign * signed
        chosen.append(position)
        queue = buffered[ticket]
        if not queue and ticket in more and len(chosen) < want:
            size = min(more.pop(ticket), want - len(chosen))
            if descending:
                rows = store.all("events_ticket_positions_before", (ticket, after, position, size))
            else:
                rows = store.all("events_ticket_positions", (ticket, position, size))
            queue.extend(int(position) for (position,) in rows)
            if len(rows) == size:
                more[ticket] = size * 4
        if queue:
            heapq.heappush(heap, (sign * queue.popleft(), ticket))
    return chosen
