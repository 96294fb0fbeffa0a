"""One page of a run's log, as the bytes of the reply's ``data``.

Every page is one indexed range read in position order; a record's wire JSON
was stored once at ingest (cursor included) and SQLite joins the page's bodies
into one value, so no per-record Python object is built and nothing is
re-encoded: the reply is written around the stored bytes.  Tails and
``elided`` counts come from stored ordinals, never from a COUNT over the feed.

The page without a selector (the hot one) knows where the run's log ends
without asking the store (``LogSink.stored_through``, or the last answer
while the sink has written nothing since) and, positions being gapless, reads
exactly the range it answers: a join of the bodies the log cache holds
(``core.logcache``: what readers read before, and what the sink committed
since to the end of a run someone follows), else one query (whose rows the
cache holds when the page reaches the log's end or was just read).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final, NamedTuple

import orjson

from sloopd.core.logsink import LogSink
from sloopd.flows.flow import Flow
from sloopd.store import Store
from sloopd.views.runfacts import RunFacts
from sloopd.wire.api import invalid_arguments

LOGS_PAGE_RECORDS: Final = 100
MAX_CURSOR_DIGITS: Final = 18  # a cursor is a position: it fits SQLite's 64-bit integers
JSON_BOOL: Final = (b"false", b"true")
PAGE_RECORDS: Final = b'{"records":['

# What a page's bytes carry around its data: nothing (the data alone), or on the hot
# path the reply line's envelope, so the line is made in the one join of the page.
Wrap = tuple[bytes, bytes]
DATA_ONLY: Final[Wrap] = (b"", b"")


def parse_cursor(field: str, value: str | None) -> int:
    if value is None:
        return 0
    if not (value.isascii() and value.isdigit()) or len(value) > MAX_CURSOR_DIGITS:
        raise invalid_arguments(f"'{field}' is not a cursor this daemon issued", field=field)
    return int(value)


@dataclass(frozen=True, slots=True)
class Selector:
    stage: str | None = None
    attempt: int | None = None


EVERY_RECORD: Final = Selector()


def parse_selector(flow: Flow, text: str | None) -> Selector:
    """``name`` = every execution, ``name#N`` = one; both checked against the flow."""
    if text is None:
        return EVERY_RECORD
    name, hash_mark, attempt_text = text.partition("#")
    if flow.stage(name) is None:
        raise invalid_arguments(f"the run's flow has no stage '{name}'", field="stage")
    if not hash_mark:
        return Selector(name)
    if (
        not (attempt_text.isascii() and attempt_text.isdigit())
        or attempt_text.startswith("0")
        or len(attempt_text) > 9
    ):
        raise invalid_arguments(
            f"'{text}' is not '<stage>#<attempt>' with an attempt of 1 or more", field="stage"
        )
    return Selector(name, int(attempt_text))


def _claims_unstaged(flow: Flow, selector: Selector) -> bool:
    """Records captured before stages were recorded belong to the first agent stage, #1."""
    first_agent = next((s.name for s in flow.stages if s.action == "agent"), None)
    return selector.stage == first_agent and selector.attempt in (None, 1)


@dataclass(frozen=True, slots=True)
class SelectorQueries:
    """One selector form's queries (its own index each), each name written out whole
    so that grepping a query's name finds where it is read."""

    page: str
    more: str
    tail_start: str
    ordinal_at: str | None  # None: positions count every record, so they are the ordinal


LOG_QUERIES: Final = {
    "run": SelectorQueries("logs_page", "logs_more", "logs_tail_start", None),
    "stage": SelectorQueries(
        "logs_stage_page", "logs_stage_more", "logs_stage_tail_start", "logs_stage_ordinal_at"
    ),
    "execution": SelectorQueries(
        "logs_execution_page",
        "logs_execution_more",
        "logs_execution_tail_start",
        "logs_execution_ordinal_at",
    ),
}


class LogPage(NamedTuple):
    data: bytes  # the reply's data, whole (inside the page's ``Wrap``)
    records: int


# What follows a page's records in its data (the order docs/protocol.md shows): the
# next cursor, complete, elided, terminal.
PAGE_REST: Final = b'],"next_cursor":"%d","complete":%s,"elided":%d,"terminal":%s}'


def _rest(next_position: int, complete: bool, elided: int, terminal: bool) -> bytes:
    return PAGE_REST % (next_position, JSON_BOOL[complete], elided, JSON_BOOL[terminal])


def _data(
    joined: bytes | None,
    next_position: int,
    complete: bool,
    elided: int,
    terminal: bool,
    wrap: Wrap,
) -> bytes:
    rest = _rest(next_position, complete, elided, terminal)
    return b"".join((wrap[0], PAGE_RECORDS, joined or b"", rest, wrap[1]))


class LogPages:
    def __init__(self, sink: LogSink) -> None:
        self.sink = sink

    def page(
        self,
        store: Store,
        facts: RunFacts,
        selector: Selector,
        after: int,
        tail: int | None,
        wrap: Wrap = DATA_ONLY,
    ) -> LogPage:
        if selector is EVERY_RECORD:
            found = self.range(store, facts, after, tail, wrap)
            if found is not None:
                return LogPage(*found)
        terminal = facts.terminal
        if terminal and not self.sink.idle:
            self.sink.flush()  # as in ``range``
        unstaged = selector is not EVERY_RECORD and _claims_unstaged(facts.flow(), selector)
        if unstaged and facts.unstaged(store):
            return self._legacy(store, facts, selector, after, tail, terminal, wrap)
        return self._indexed(store, facts, selector, after, tail, terminal, wrap)

    def end(self, store: Store, run: str, facts: RunFacts) -> int:
        """The run's last stored position: from the sink, or the store once per flush."""
        stored = self.sink.stored_through(run)
        if stored is not None:
            return stored
        if facts.end_at != self.sink.generation:
            facts.end = int(store.scalar("logs_max_position", (run,)) or 0)
            facts.end_at = self.sink.generation
        return facts.end

    def range(
        self, store: Store, facts: RunFacts, after: int, tail: int | None, wrap: Wrap
    ) -> tuple[bytes, int] | None:
        """Every record after ``after`` (or its tail): a range of positions read in one
        query, as (the data inside ``wrap``, how many records); None when the range has
        a gap (the index answers then).

        The hot page (``Logs.fast``) is this without a tail, written out there: in a
        served daemon every Python call a page makes costs several times what it does
        in a loop, so ``end`` is written out here too.  A change here is one there.
        """
        terminal = facts.terminal
        sink = self.sink
        if terminal and not sink.idle:
            # The settling record may still sit in the batch; a follower must
            # never see terminal+complete while a record is missing.
            sink.flush()
        run = facts.run_id
        end = sink.stored_through(run)
        if end is None:
            if facts.end_at != sink.generation:
                facts.end = int(store.scalar("logs_max_position", (run,)) or 0)
                facts.end_at = sink.generation
            end = facts.end
        start, size, elided = after, LOGS_PAGE_RECORDS, 0
        if tail is not None:
            # The tail begins N records before the end (positions are the ordinal).
            start = max(after, end - tail)
            size, elided = min(tail, LOGS_PAGE_RECORDS), start - after
        upto = min(start + size, end)
        if upto <= start:
            # Nothing after the cursor: the cursor stays, or moves to the end.
            return _data(None, max(after, end), True, elided, terminal, wrap), 0
        joined = sink.cache.join(run, start, upto)
        if joined is None:
            joined = self.joined(store, run, start, upto, upto >= end)
            if joined is None:
                return None  # a position is missing: read by the index instead
        # ``_data`` written out: one Python call fewer on the hot page.
        rest = PAGE_REST % (upto, JSON_BOOL[upto >= end], elided, JSON_BOOL[terminal])
        return b"".join((wrap[0], PAGE_RECORDS, joined, rest, wrap[1])), upto - start

    def joined(self, store: Store, run: str, after: int, upto: int, at_end: bool) -> bytes | None:
        """The stored bodies of positions (after, upto] joined by commas, read from the
        store (and held in the log cache when it admits them); None when a position is
        missing."""
        cache = self.sink.cache
        if not cache.admits(run, after, upto, at_end):
            joined, count = store.aggregate("logs_range", (run, after, upto))
            return joined if count == upto - after else None
        rows = store.all("logs_range_bodies", (run, after, upto))
        if len(rows) != upto - after:
            return None
        bodies = [_bytes(row[0]) for row in rows]
        cache.hold(run, after, bodies)
        return b",".join(bodies)

    def _indexed(
        self,
        store: Store,
        facts: RunFacts,
        selector: Selector,
        after: int,
        tail: int | None,
        terminal: bool,
        wrap: Wrap,
    ) -> LogPage:
        run = facts.run_id
        if selector.stage is None:
            key: tuple[Any, ...] = (run,)
            queries = LOG_QUERIES["run"]
        elif selector.attempt is None:
            key, queries = (run, selector.stage), LOG_QUERIES["stage"]
        else:
            key, queries = (run, selector.stage, selector.attempt), LOG_QUERIES["execution"]
        ordinal_query = queries.ordinal_at
        elided = 0
        after_tail = after
        if tail is not None:
            start = store.one(queries.tail_start, (*key, after, tail - 1))
            if start is not None:
                # The tail begins at the N-th matching record from the end.
                first_position, first_ordinal = start
                if ordinal_query is None:
                    # Positions count every record of the run, so they are the ordinal.
                    elided = first_ordinal - after - 1
                else:
                    before = store.scalar(ordinal_query, (*key, after)) if after else None
                    elided = first_ordinal - (before or 0) - 1
                after_tail = first_position - 1
        # A tail is one page at most: a longer one answers its first page, with
        # complete false and next_cursor where the client reads on (with after).
        size = LOGS_PAGE_RECORDS if tail is None else min(tail, LOGS_PAGE_RECORDS)
        row = store.one(queries.page, (*key, after_tail, size))
        joined, count, last = row if row else (None, 0, None)
        complete = count < size or (tail is not None and tail <= LOGS_PAGE_RECORDS)
        if not complete:
            complete = store.one(queries.more, (*key, last)) is None
        return self._reply(
            store, facts, joined, count, last, after, complete, elided, terminal, wrap
        )

    def _reply(
        self,
        store: Store,
        facts: RunFacts,
        joined: bytes | None,
        count: int,
        last: int | None,
        after: int,
        complete: bool,
        elided: int,
        terminal: bool,
        wrap: Wrap,
    ) -> LogPage:
        if last is not None and not complete:
            next_position = last
        else:
            # Nothing more matches: advance over everything the filter skipped.
            end = self.end(store, facts.run_id, facts)
            next_position = max(after, last or 0, end)
        return LogPage(_data(joined, next_position, complete, elided, terminal, wrap), count)

    def _legacy(
        self,
        store: Store,
        facts: RunFacts,
        selector: Selector,
        after: int,
        tail: int | None,
        terminal: bool,
        wrap: Wrap,
    ) -> LogPage:
        """The slow, rare path: a run holding records without stage fields."""
        everything = store.all("logs_rows_after", (facts.run_id, after))
        matching = [(p, b) for p, b in everything if _legacy_match(b, selector)]
        if tail is None:
            page = matching[:LOGS_PAGE_RECORDS]
            complete = len(matching) <= LOGS_PAGE_RECORDS
            elided = 0
        else:
            start = max(0, len(matching) - tail)
            page = matching[start : start + LOGS_PAGE_RECORDS]
            complete, elided = start + len(page) == len(matching), start
        joined = b",".join(_bytes(b) for _, b in page)
        last = page[-1][0] if page else None
        return self._reply(
            store, facts, joined or None, len(page), last, after, complete, elided, terminal, wrap
        )


def _bytes(body: str | bytes) -> bytes:
    return body.encode() if isinstance(body, str) else body


def _legacy_match(body: str | bytes, selector: Selector) -> bool:
    record = orjson.loads(body)
    if "stage" not in record:
        return True
    if record["stage"] != selector.stage:
        return False
    return selector.attempt is None or record.get("attempt") == selector.attempt
