"""The whole of a run's log for the web: the records after a cursor, and the download.

The live feed (``feeds.LogFeed``) holds a selection's newest ``BUFFER`` records; what
lies before them is read here when a reader asks, never kept. ``/api/logs`` answers
the records after a cursor, or from the log's first line, up to a limit (the run
page's "show earlier records", which reads on towards the feed's first record), and
``/api/log`` streams the whole selection as text, one ``sloopctl logs --all`` line per
record (what the page shows; ``--raw``'s lines with ``raw=1``), written page by page as
the daemon answers: a 20,000-line log is never held whole by the gateway, and the file
is exactly what the command prints.

Both read forward with the protocol's cursor (``after`` = the last ``next_cursor``),
the only direction the ``logs`` verb pages in: a reader who wants the line before the
buffer reads from the first one on, as far as it likes.
"""

from __future__ import annotations

import re
from typing import Any, Final

from aiohttp import web

from sloopctl import streams
from sloopctl.client import ClientError
from sloopctl.feeds_cli import record_line
from sloopctl.feedwalk import LOGS, FeedWalk
from sloopctl.layout import painter
from sloopctl.longpoll import LongPoll
from sloopctl.web.link import Connection, Link
from sloopd.wire import api

PAGE_LIMIT: Final = 500  # records /api/logs answers by default
MAX_LIMIT: Final = 2000  # and at most: five to twenty daemon pages per request
_UNSAFE_NAME: Final = re.compile(r"[^A-Za-z0-9._-]+")
_PLAIN: Final = painter(False)


def with_rendered(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each record gains ``rendered`` where ``sloopctl logs`` would not print it raw."""
    for record in records:
        shown = streams.rendered(record)
        if shown is not None:
            record["rendered"] = shown
    return records


def selection(query: Any) -> dict[str, Any] | None:
    """The ``logs`` arguments a request names (run, stage), or None without a run."""
    run = query.get("run")
    if not run:
        return None
    base: dict[str, Any] = {"run": run}
    if query.get("stage"):
        base["stage"] = query["stage"]
    return base


async def records_after(link: Link, base: dict[str, Any], after: str | None, limit: int) -> Any:
    """Up to ``limit`` records after ``after`` (from the first without it), as an envelope.

    ``{"ok": true, "data": {"records", "next_cursor", "complete"}}``, ``complete``
    when nothing matched after the last record returned; the daemon's own envelope
    when it refused the first page (an unknown run, a bad selector or cursor).
    """
    start = dict(base) if after is None else {**base, "after": after}
    walk = FeedWalk(LOGS, start, LongPoll(), 0, follow=False)
    records: list[dict[str, Any]] = []
    connection = Connection(link.socket_path, verbatim=link.verbatim)
    try:
        while True:
            reply = await connection.call(walk.kind.verb, walk.request())
            if not reply.ok:
                return reply.envelope
            page = reply.data if isinstance(reply.data, dict) else {}
            step = walk.take(page)
            records.extend(step.items)
            if step.done or len(records) >= limit:
                break
    finally:
        await connection.close()
    complete, next_cursor = bool(step.done), page.get("next_cursor")
    if len(records) > limit:
        # A record's own cursor reads on after it (protocol section 9).
        records, complete = records[:limit], False
        next_cursor = records[-1].get("cursor")
    data = {"records": with_rendered(records), "next_cursor": next_cursor, "complete": complete}
    return {"ok": True, "data": data}


def file_name(base: dict[str, Any], raw: bool = False) -> str:
    """``R7.log``, ``R7-review-1.log`` (``R7.raw.log`` raw): only characters no header or
    shell reads twice."""
    parts = [str(base["run"])] + ([str(base["stage"])] if "stage" in base else [])
    name = _UNSAFE_NAME.sub("-", "-".join(parts)).strip("-.")
    return name + (".raw.log" if raw else ".log")


async def download(
    request: web.Request, link: Link, base: dict[str, Any], *, raw: bool = False
) -> web.StreamResponse:
    """The selection's every record, streamed as text lines (an attachment): rendered as
    ``sloopctl logs`` prints them (an agent CLI's JSON as a person reads it, several
    lines for a turn), or as stored with ``raw``.

    The first page is read before anything is sent, so a refusal (an unknown run)
    is a plain error answer; a daemon that stops answering later ends the file with
    a line that says it is incomplete, since the status was sent already.
    """
    walk = FeedWalk(LOGS, dict(base), LongPoll(), 0, follow=False)
    connection = Connection(link.socket_path, verbatim=link.verbatim)
    try:
        try:
            reply = await connection.call(walk.kind.verb, walk.request())
        except ClientError as exc:
            return web.json_response(exc.envelope(), status=502)
        if not reply.ok:
            return web.json_response(reply.envelope, status=404 if _not_found(reply) else 400)
        response = web.StreamResponse(
            headers={
                "Content-Type": "text/plain; charset=utf-8",
                "Content-Disposition": f'attachment; filename="{file_name(base, raw)}"',
            }
        )
        await response.prepare(request)
        while True:
            page = reply.data if isinstance(reply.data, dict) else {}
            step = walk.take(page)
            lines = [record_line(r, _PLAIN, events=not raw) + "\n" for r in step.items]
            await response.write("".join(lines).encode())
            if step.done:
                break
            try:
                reply = await connection.call(walk.kind.verb, walk.request())
            except ClientError as exc:
                await response.write(f"… the log is incomplete: {exc.message}\n".encode())
                break
            if not reply.ok:
                message = reply.error.get("message", "refused")
                await response.write(f"… the log is incomplete: {message}\n".encode())
                break
        await response.write_eof()
        return response
    finally:
        await connection.close()


def _not_found(reply: Any) -> bool:
    return bool(reply.error.get("code") == api.ErrorCode.NOT_FOUND)
