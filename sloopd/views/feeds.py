"""``logs`` and ``events``: keyset pages of the append-only feeds.

Every page is one indexed range read in position order; a record's wire JSON
was stored once at ingest and is spliced into the reply as raw bytes
(``orjson.Fragment``), so no per-record Python object is built.  Tails and
``elided`` counts come from stored ordinals, never from a COUNT over the feed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from sloopd.core.logsink import LogSink
from sloopd.core.state import Daemon
from sloopd.flows.flow import Flow
from sloopd.queue import refs
from sloopd.store import Store
from sloopd.wire.api import invalid_arguments

LOGS_PAGE_RECORDS = 100
EVENTS_PAGE_EVENTS = 100


def parse_cursor(field: str, value: str | None) -> int:
    if value is None:
        return 0
    if not (value.isascii() and value.isdigit()) or len(value) > 18:
        raise invalid_arguments(f"'{field}' is not a cursor this daemon issued", field=field)
    return int(value)


def _cursor(position: int) -> str:
    return str(position)


@dataclass(frozen=True, slots=True)
class Selector:
    stage: str | None = None
    attempt: int | None = None


def parse_selector(flow: Flow, text: str | None) -> Selector:
    """``name`` = every execution, ``name#N`` = one; both checked against the flow."""
    if text is None:
        return Selector()
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


class Logs:
    def __init__(self, daemon: Daemon, sink: LogSink) -> None:
        self.daemon = daemon
        self.sink = sink

    def page(self, args: dict[str, Any]) -> dict[str, Any]:
        store = self.daemon.require_store()
        run_id = refs.run_id(store, self.daemon.layout.repo, args["run"])
        record = store.one("run_by_id", (run_id,))
        assert record is not None
        selector = Selector()
        legacy = False
        if args.get("stage") is not None:
            # Only a stage selector needs the flow snapshot: the hot unfiltered
            # page never parses it.
            flow = Flow.from_json(orjson.loads(record[7]))
            selector = parse_selector(flow, args["stage"])
            legacy = _claims_unstaged(flow, selector) and bool(
                store.one("logs_has_unstaged", (run_id,))
            )
        after = parse_cursor("after", args.get("after"))
        terminal = record[4] in ("merged", "failed", "needs_review", "aborted")
        if terminal:
            # The settling record may still sit in the batch; a follower must
            # never see terminal+complete while a record is missing.
            self.sink.flush()
        if legacy:
            page = _legacy_page(store, run_id, selector, after, args.get("tail"))
        else:
            page = _page(store, run_id, selector, after, args.get("tail"))
        page["terminal"] = terminal
        return page


def _page(
    store: Store, run: str, selector: Selector, after: int, tail: int | None
) -> dict[str, Any]:
    if selector.stage is None:
        key: tuple[Any, ...] = (run,)
        kind, ordinal_query = "logs", None
    elif selector.attempt is None:
        key, kind, ordinal_query = (run, selector.stage), "logs_stage", "logs_stage_ordinal_at"
    else:
        key = (run, selector.stage, selector.attempt)
        kind, ordinal_query = "logs_execution", "logs_execution_ordinal_at"
    if tail is None:
        row = store.one(f"{kind}_page", (*key, after, LOGS_PAGE_RECORDS))
        joined, count, last = row if row else (None, 0, None)
        complete = count < LOGS_PAGE_RECORDS or store.one(f"{kind}_more", (*key, last)) is None
        return _logs_reply(store, run, joined, last, after, complete, 0)
    start = store.one(f"{kind}_tail_start", (*key, after, tail - 1))
    elided = 0
    if start is not None:
        # The tail begins at the N-th matching record from the end.
        first_position, first_ordinal = start
        if ordinal_query is None:
            # Positions count every record of the run, so they are the ordinal.
            elided = first_ordinal - after - 1
        else:
            before = store.one(ordinal_query, (*key, after)) if after else None
            elided = first_ordinal - (before[0] if before else 0) - 1
        after_tail = first_position - 1
    else:
        after_tail = after  # fewer than N match: the tail is all of them
    # A tail is one page at most: a longer one answers its first page, with
    # complete false and next_cursor where the client reads on (with after).
    size = min(tail, LOGS_PAGE_RECORDS)
    row = store.one(f"{kind}_page", (*key, after_tail, size))
    joined, count, last = row if row else (None, 0, None)
    complete = tail <= LOGS_PAGE_RECORDS or count < size
    if not complete:
        complete = store.one(f"{kind}_more", (*key, last)) is None
    return _logs_reply(store, run, joined, last, after, complete, elided)


def _logs_reply(
    store: Store,
    run: str,
    joined: str | None,
    last: int | None,
    after: int,
    complete: bool,
    elided: int,
) -> dict[str, Any]:
    if last is not None and not complete:
        next_position = last
    else:
        # Nothing more matches: advance over everything the filter skipped.
        end = store.one("logs_max_position", (run,))
        next_position = max(after, last or 0, int(end[0]) if end and end[0] is not None else 0)
    records = orjson.Fragment("[" + joined + "]") if joined else []
    return {
        "records": records,
        "next_cursor": _cursor(next_position),
        "complete": complete,
        "elided": elided,
    }


def _legacy_page(
    store: Store, run: str, selector: Selector, after: int, tail: int | None
) -> dict[str, Any]:
    """The slow, rare path: a run holding records without stage fields."""
    everything = store.all("logs_rows_after", (run, after))
    matching = [(p, b) for p, b in everything if _legacy_match(b, selector)]
    if tail is None:
        page = matching[:LOGS_PAGE_RECORDS]
        complete = len(matching) <= LOGS_PAGE_RECORDS
        elided = 0
    else:
        start = max(0, len(matching) - tail)
        page = matching[start : start + LOGS_PAGE_RECORDS]
        complete, elided = start + len(page) == len(matching), start
    joined = ",".join(_with_cursor(p, b) for p, b in page)
    last = page[-1][0] if page else None
    return _logs_reply(store, run, joined or None, last, after, complete, elided)


def _with_cursor(position: int, body: str | bytes) -> str:
    text = body.decode() if isinstance(body, bytes) else body
    if text.startswith('{"cursor"'):
        return text
    return f'{{"cursor":"{position}",' + text[1:]


def _legacy_match(body: str | bytes, selector: Selector) -> bool:
    record = orjson.loads(body)
    if "stage" not in record:
        return True
    if record["stage"] != selector.stage:
        return False
    return selector.attempt is None or record.get("attempt") == selector.attempt


# --- events -------------------------------------------------------------------

EventRow = tuple[int, str]  # (position, the event's wire JSON)


class Events:
    def __init__(self, daemon: Daemon) -> None:
        self.daemon = daemon

    def page(self, args: dict[str, Any]) -> dict[str, Any]:
        store = self.daemon.require_store()
        after = parse_cursor("after", args.get("after"))
        tail = args.get("tail")
        scope = args.get("scope")
        if scope is None:
            sources: list[tuple[str, tuple[Any, ...]]] = [("events", ())]
        else:
            sources = self._scoped_sources(store, scope)
        if len(sources) == 1 or scope is None:
            rows, full = self._single_source(store, sources, after, tail)
        else:
            rows, full = self._many_tickets(store, [key[0] for _, key in sources], after, tail)
        if full:
            next_position = rows[-1][0]
        else:
            # The scope matched everything up to the feed's end: advance past
            # the rows it filtered out, so a poller never rescans them.
            last = store.one("events_max_position")
            next_position = max(after, int(last[0]) if last and last[0] is not None else 0)
        return {
            "events": [orjson.Fragment(r[1]) for r in rows],
            "next_cursor": _cursor(next_position),
        }

    def _single_source(
        self,
        store: Store,
        sources: list[tuple[str, tuple[Any, ...]]],
        after: int,
        tail: int | None,
    ) -> tuple[list[EventRow], bool]:
        rows: list[EventRow] = []
        for name, key in sources:
            if tail is not None:
                found = store.all(f"{name}_tail", (*key, tail))
                rows.extend(r for r in reversed(found) if r[0] > after)
            else:
                rows.extend(store.all(f"{name}_page", (*key, after, EVENTS_PAGE_EVENTS + 1)))
        if tail is not None:
            return rows, False
        return rows[:EVENTS_PAGE_EVENTS], len(rows) > EVENTS_PAGE_EVENTS

    def _many_tickets(
        self, store: Store, tickets: list[str], after: int, tail: int | None
    ) -> tuple[list[EventRow], bool]:
        """A project or pattern: positions from each ticket's covering index,
        merged, then only the page's events read (cost: tickets x page, never
        the feed)."""
        want = tail if tail is not None else EVENTS_PAGE_EVENTS + 1
        query = "events_ticket_positions_desc" if tail is not None else "events_ticket_positions"
        positions: set[int] = set()
        for ticket in tickets:
            positions.update(p for (p,) in store.all(query, (ticket, after, want)))
        chosen = sorted(positions)
        if tail is not None:
            chosen, full = chosen[-tail:], False
        else:
            full = len(chosen) > EVENTS_PAGE_EVENTS
            chosen = chosen[:EVENTS_PAGE_EVENTS]
        if not chosen:
            return [], False
        rows = store.all("events_at_positions", (orjson.dumps(chosen).decode(),))
        return [(int(r[0]), str(r[1])) for r in rows], full

    def _scoped_sources(self, store: Store, scope: str) -> list[tuple[str, tuple[Any, ...]]]:
        """The same ladder as ``show``: tickets cover their runs, runs themselves."""
        exact = refs.resolve_exact(store, self.daemon.layout.repo, scope)
        if exact is not None and exact.kind == "run":
            return [("events_run", (exact.key,))]
        if exact is not None and exact.kind == "ticket":
            return [("events_ticket", (exact.key,))]
        if exact is not None:
            tickets = [t[0] for t in store.all("tickets_in_project", (exact.key,))]
        else:
            expression = refs.pattern(scope, field="scope")
            tickets = [
                tid
                for tid, name in store.all("ticket_ids_all")
                if refs.matches(expression, tid, name)
            ]
        return [("events_ticket", (ticket,)) for ticket in tickets]
