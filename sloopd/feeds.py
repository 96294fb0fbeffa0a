"""``logs`` and ``events``: keyset pages of the append-only feeds.

Every page is one indexed range read in position order; a record's wire JSON
was stored once at ingest and is spliced into the reply as raw bytes
(``orjson.Fragment``), so no per-record Python object is built.  Tails and
``elided`` counts come from stored ordinals, never from a COUNT over the feed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from sloopd import refs
from sloopd.api import ErrorCode, ProtocolError, invalid_arguments
from sloopd.daemon import Daemon
from sloopd.flow import Flow
from sloopd.logsink import LogSink
from sloopd.store import Store

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


def _record(position: int, body: bytes) -> orjson.Fragment:
    return orjson.Fragment(b'{"cursor":"%d",' % position + body[1:])


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
        run_id = _run_id(self.daemon, args["run"])
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
        rows = store.all(f"{kind}_page", (*key, after, LOGS_PAGE_RECORDS + 1))
        complete = len(rows) <= LOGS_PAGE_RECORDS
        rows = rows[:LOGS_PAGE_RECORDS]
        return _logs_reply(store, run, rows, after, complete, 0)
    rows = store.all(f"{kind}_tail", (*key, after, tail))
    rows.reverse()
    elided = 0
    if rows:
        first = rows[0]
        if ordinal_query is None:
            # Positions count every record of the run, so they are the ordinal.
            elided = first[0] - after - 1
        else:
            before = store.one(ordinal_query, (*key, after)) if after else None
            elided = first[2] - (before[0] if before else 0) - 1
    return _logs_reply(store, run, [(r[0], r[1]) for r in rows], after, True, elided)


def _logs_reply(
    store: Store, run: str, rows: Sequence[tuple[Any, ...]], after: int, complete: bool, elided: int
) -> dict[str, Any]:
    if rows and not complete:
        next_position = rows[-1][0]
    else:
        # Nothing more matches: advance over everything the filter skipped.
        last = store.one("logs_max_position", (run,))
        next_position = max(
            after, rows[-1][0] if rows else 0, int(last[0]) if last and last[0] is not None else 0
        )
    return {
        "records": [_record(p, b) for p, b in rows],
        "next_cursor": _cursor(next_position),
        "complete": complete,
        "elided": elided,
    }


def _legacy_page(
    store: Store, run: str, selector: Selector, after: int, tail: int | None
) -> dict[str, Any]:
    """The slow, rare path: a run holding records without stage fields."""
    everything = store.all("logs_page", (run, after, 1 << 62))
    matching = [(p, b) for p, b in everything if _legacy_match(b, selector)]
    if tail is None:
        page = matching[:LOGS_PAGE_RECORDS]
        return _logs_reply(store, run, page, after, len(matching) <= LOGS_PAGE_RECORDS, 0)
    kept = matching[-tail:]
    return _logs_reply(store, run, kept, after, True, len(matching) - len(kept))


def _legacy_match(body: bytes, selector: Selector) -> bool:
    record = orjson.loads(body)
    if "stage" not in record:
        return True
    if record["stage"] != selector.stage:
        return False
    return selector.attempt is None or record.get("attempt") == selector.attempt


def _run_id(daemon: Daemon, ref: str) -> str:
    exact = refs.resolve_exact(daemon.require_store(), daemon.layout.repo, ref)
    if exact is None or exact.kind != "run":
        raise ProtocolError(ErrorCode.NOT_FOUND, f"no run matches '{ref}'", {"ref": ref})
    return exact.key


# --- events -------------------------------------------------------------------

EventRow = tuple[int, str, int, str | None, str | None, str]


def _event(row: EventRow) -> dict[str, Any]:
    position, kind, at_ms, ticket, run, data = row
    return {
        "cursor": _cursor(position),
        "kind": kind,
        "at_ms": at_ms,
        "ticket": ticket,
        "run": run,
        "data": orjson.Fragment(data),
    }


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
        rows: list[EventRow] = []
        if tail is not None:
            for name, key in sources:
                found = store.all(f"{name}_tail", (*key, tail))
                rows.extend(r for r in found if r[0] > after)
            rows = sorted(set(rows))[-tail:]
            full = False
        else:
            for name, key in sources:
                rows.extend(store.all(f"{name}_page", (*key, after, EVENTS_PAGE_EVENTS + 1)))
            rows = sorted(set(rows))
            full = len(rows) > EVENTS_PAGE_EVENTS
            rows = rows[:EVENTS_PAGE_EVENTS]
        if full:
            next_position = rows[-1][0]
        else:
            # The scope matched everything up to the feed's end: advance past
            # the rows it filtered out, so a poller never rescans them.
            last = store.one("events_max_position")
            next_position = max(after, int(last[0]) if last and last[0] is not None else 0)
        return {"events": [_event(r) for r in rows], "next_cursor": _cursor(next_position)}

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
