"""``logs`` and ``events``: keyset pages of the append-only feeds, and long-poll.

The pages themselves are built by ``logpages`` and ``eventpages``.  Here the
arguments are read and, with ``wait_ms``, an empty page is held: a ``logs``
request whose page holds no record while the run is not terminal, an
``events`` request whose page holds no event, waits on ``FeedNotices`` until
the feed has news for it (its run's log stored, the run settled, an event of
its scope appended), the wait ends, or the daemon stops; then it answers its
page as things are then.  A non-empty page, or a terminal run, answers at once.
"""

from __future__ import annotations

from typing import Any

import orjson

from sloopd.core.logsink import LogSink
from sloopd.core.longpoll import Waiter
from sloopd.core.state import Daemon
from sloopd.store import Store
from sloopd.views.eventpages import EVENTS_PAGE_EVENTS as EVENTS_PAGE_EVENTS
from sloopd.views.eventpages import PatternTickets, Scope, scope_of
from sloopd.views.logpages import (
    EVERY_RECORD,
    JSON_BOOL,
    LOGS_PAGE_RECORDS,
    MAX_CURSOR_DIGITS,
    PAGE_RECORDS,
    PAGE_REST,
    LogPages,
    Selector,
    Wrap,
    parse_selector,
)
from sloopd.views.logpages import parse_cursor as parse_cursor
from sloopd.views.runfacts import RunFacts, RunLookup
from sloopd.wire.dispatch import Hold

_FAST_ARGS = frozenset({"run", "after"})


class Logs:
    def __init__(self, daemon: Daemon, sink: LogSink) -> None:
        self.daemon = daemon
        self.runs = RunLookup(daemon)
        self.sink = sink
        self.pages = LogPages(sink)

    def fast(self, args: dict[str, Any], wrap: Wrap) -> bytes | None:
        """The hot request: ``{run, after?}`` naming a run already looked up.

        Its page inside ``wrap`` (the reply line around the data), with the checks
        ``page`` would make of exactly these arguments (a cached reference passed
        them when it was first resolved); None for anything else, which ``page``
        then answers (wire.dispatch's fast path).
        """
        store = self.daemon.store
        if store is None or not args.keys() <= _FAST_ARGS:
            return None
        ref, after = args.get("run"), args.get("after")
        facts = self.runs.cached(ref) if type(ref) is str else None
        if facts is None:
            return None
        cursor = 0
        if after is not None:
            if type(after) is not str or not after.isascii() or not after.isdigit():
                return None
            if len(after) > MAX_CURSOR_DIGITS:
                return None
            cursor = int(after)
        # ``LogPages.range`` without a tail, written out (one Python call fewer on the
        # hot page); anything but a page of records read whole goes through it.
        terminal = facts.terminal
        sink = self.sink
        end = sink.stored_through(facts.run_id)
        if end is None and facts.end_at == sink.generation:
            end = facts.end  # the store's answer, still true: the sink wrote nothing since
        if end is None or (terminal and not sink.idle):
            found = self.pages.range(store, facts, cursor, None, wrap)
            return None if found is None else found[0]
        upto = cursor + LOGS_PAGE_RECORDS
        if upto > end:
            upto = end
            if upto <= cursor:
                found = self.pages.range(store, facts, cursor, None, wrap)
                return None if found is None else found[0]
        joined = sink.cache.join(facts.run_id, cursor, upto)
        if joined is None:
            joined = self.pages.joined(store, facts.run_id, cursor, upto, upto >= end)
            if joined is None:
                return None  # a position is missing: the general way reads by the index
        rest = PAGE_REST % (upto, JSON_BOOL[upto >= end], 0, JSON_BOOL[terminal])
        return b"".join((wrap[0], PAGE_RECORDS, joined, rest, wrap[1]))

    def page(self, args: dict[str, Any]) -> orjson.Fragment | Hold:
        store = self.daemon.require_store()
        facts = self.runs.facts(store, args["run"])
        stage = args.get("stage")
        # Only a stage selector needs the flow snapshot: the hot page never parses it.
        selector = EVERY_RECORD if stage is None else parse_selector(facts.flow(), stage)
        after = parse_cursor("after", args.get("after"))
        tail = args.get("tail")
        page = self.pages.page(store, facts, selector, after, tail)
        wait_ms = args.get("wait_ms")
        if not wait_ms or page.records or facts.terminal:
            return orjson.Fragment(page.data)
        waiter = self.daemon.feed_notices.hold_logs(facts.run_id, wait_ms / 1000)
        if waiter is None:  # as many held as the daemon allows: answer as things are
            return orjson.Fragment(page.data)
        return Hold(self._held(waiter, store, facts, selector, after, tail), waiter)

    async def _held(
        self,
        waiter: Waiter,
        store: Store,
        facts: RunFacts,
        selector: Selector,
        after: int,
        tail: int | None,
    ) -> orjson.Fragment:
        try:
            while True:
                news = await waiter.news()
                page = self.pages.page(store, facts, selector, after, tail)
                # Records of another stage, say, are no news for this page: wait on.
                if not news or page.records or facts.terminal:
                    return orjson.Fragment(page.data)
        finally:
            waiter.release()


class Events:
    def __init__(self, daemon: Daemon) -> None:
        self.daemon = daemon
        self.patterns = PatternTickets()

    def page(self, args: dict[str, Any]) -> dict[str, Any] | Hold:
        store = self.daemon.require_store()
        after = parse_cursor("after", args.get("after"))
        tail = args.get("tail")
        scope = scope_of(store, self.daemon.layout.repo, self.patterns, args.get("scope"))
        rows, full = scope.page(store, after, tail)
        wait_ms = args.get("wait_ms")
        if not wait_ms or rows:
            return _events_reply(store, rows, full, after)
        waiter = self.daemon.feed_notices.hold_events(scope.follows, wait_ms / 1000)
        if waiter is None:
            return _events_reply(store, rows, full, after)
        return Hold(self._held(waiter, store, scope, args.get("scope"), after, tail), waiter)

    async def _held(
        self,
        waiter: Waiter,
        store: Store,
        scope: Scope,
        scope_ref: str | None,
        after: int,
        tail: int | None,
    ) -> dict[str, Any]:
        try:
            while True:
                news = await waiter.news()
                if scope.source is None:
                    # A pattern: tickets posted during the wait may match it too.
                    scope = scope_of(store, self.daemon.layout.repo, self.patterns, scope_ref)
                rows, full = scope.page(store, after, tail)
                if not news or rows:
                    return _events_reply(store, rows, full, after)
        finally:
            waiter.release()


def _events_reply(
    store: Store, rows: list[tuple[int, str]], full: bool, after: int
) -> dict[str, Any]:
    if full:
        next_position, _ = rows[-1]
    else:
        # The scope matched everything up to the feed's end: advance past
        # the rows it filtered out, so a poller never rescans them.
        last = store.scalar("events_max_position")
        next_position = max(after, int(last or 0))
    return {
        "events": [orjson.Fragment(event) for _, event in rows],
        "next_cursor": str(next_position),
    }
