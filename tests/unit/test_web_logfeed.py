"""The gateway's log feed without a daemon: what a viewer who joins late is told.

A viewer is sent the feed's buffer (the newest ``BUFFER`` records) and how many
matching records come before it; that count must include the records the buffer
let go while the feed followed a long stage, or the page would claim to hold a
log it lacks. Records that carry an agent CLI's event gain ``rendered``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from sloopctl.feedwalk import Step
from sloopctl.longpoll import LongPoll
from sloopctl.web.feeds import BUFFER, EventFeed, LogFeed
from sloopctl.web.link import Link


def _records(first: int, count: int) -> list[dict[str, Any]]:
    return [
        {"cursor": str(i), "stream": "stdout", "text": f"line {i}"}
        for i in range(first, first + count)
    ]


def _backlog(feed: LogFeed) -> dict[str, Any]:
    first = feed.backlog()[0]
    data: dict[str, Any] = orjson.loads(first.split(b"\ndata: ", 1)[1])
    return data


def test_a_late_viewer_is_told_what_the_buffer_let_go() -> None:
    feed = LogFeed("logs:R1:", Link(Path("/nonexistent")), LongPoll(), "R1", None)
    # The first page: a tail that skipped 30 records.
    feed.take(Step(_records(31, 100), True, False, False), {"elided": 30})
    assert _backlog(feed)["elided"] == 30
    cursor = 131
    while cursor <= 1130:  # 1000 more, page by page, while following
        feed.take(Step(_records(cursor, 100), False, True, False), {"elided": 0})
        cursor += 100
    data = _backlog(feed)
    assert len(data["records"]) == BUFFER
    assert data["records"][0]["cursor"] == str(1131 - BUFFER)
    # Every record before the buffer's first is counted: 30 skipped, the rest let go.
    assert data["elided"] == 1131 - BUFFER - 1


def test_an_agent_event_gains_its_rendering_and_other_lines_none() -> None:
    feed = LogFeed("logs:R1:", Link(Path("/nonexistent")), LongPoll(), "R1", None)
    event = '{"type":"assistant","message":{"content":[{"type":"text","text":"hi"}]}}'
    records = [
        {"cursor": "1", "stream": "stdout", "text": event},
        {"cursor": "2", "stream": "stderr", "text": event},
        {"cursor": "3", "stream": "stdout", "text": "plain"},
    ]
    feed.take(Step(records, True, True, False), {"elided": 0})
    shown = _backlog(feed)["records"]
    assert shown[0]["rendered"] == "hi"
    assert "rendered" not in shown[1]  # only stdout carries a CLI's events
    assert "rendered" not in shown[2]


def test_the_activity_feed_reads_on_from_its_cursor_after_a_reconnect() -> None:
    """A daemon restart ends the feed's connection; the next ``follow`` must ask for the
    events after the last one read, not the tail again (which the buffer would hold
    twice)."""
    feed = EventFeed("events:", Link(Path("/nonexistent")), LongPoll(), None)
    first = feed.walk()
    assert "tail" in first.request()
    first.take({"events": [{"cursor": "7", "kind": "x"}], "next_cursor": "7"})
    again = feed.walk()  # what the follow after a reconnect starts from
    assert again.request().get("after") == "7"
    assert "tail" not in again.request()
