"""The one long-poll negotiation and the one feed walk, without any transport.

The commands (blocking) and the web gateway (asyncio) drive these same two pieces,
so what is pinned here holds for both; tests/unit/test_sloopctl_follow.py and
tests/web/test_web_feeds.py check each driver against a scripted daemon.
"""

from __future__ import annotations

from typing import Any

import pytest

from sloopctl.client import Reply
from sloopctl.feedwalk import EVENTS, LOGS, FeedWalk
from sloopctl.longpoll import LongPoll


def refusal(field: str, code: str = "invalid_arguments") -> Reply:
    error = {"code": code, "message": "unknown argument", "details": {"field": field}}
    return Reply({"id": "1", "ok": False, "error": error}, b"")


OK = Reply({"id": "1", "ok": True, "data": {}}, b"")


def test_a_refusal_of_a_long_poll_argument_sent_is_learned_once_per_verb() -> None:
    polls = LongPoll()
    sent = {"run": "R1", "after": "3", "wait_ms": 10}
    assert polls.held("logs", 10) == {"wait_ms": 10}
    assert polls.retry("logs", sent, refusal("wait_ms")) == {"run": "R1", "after": "3"}
    assert not polls.supported("logs")
    assert polls.held("logs", 10) == {}
    assert polls.supported("events")
    assert polls.held("events", 10) == {"wait_ms": 10}
    polls.forget()
    assert polls.supported("logs")


@pytest.mark.parametrize(
    ("sent", "reply"),
    [
        ({"run": "R1", "wait_ms": 10}, OK),
        ({"run": "R1", "wait_ms": 10}, refusal("stage")),  # another argument's fault
        ({"run": "R1", "wait_ms": 10}, refusal("wait_ms", "not_found")),
        ({"run": "R1"}, refusal("wait_ms")),  # nothing of long-poll was sent
    ],
)
def test_any_other_answer_is_the_callers(sent: dict[str, Any], reply: Reply) -> None:
    polls = LongPoll()
    assert polls.retry("logs", sent, reply) is None
    assert polls.supported("logs")


def test_show_is_held_only_past_an_epoch() -> None:
    polls = LongPoll()
    assert polls.held("show", 10) == {}
    assert polls.held("show", 10, 4) == {"since": 4, "wait_ms": 10}
    polls.refuse("show")
    assert polls.held("show", 10, 4) == {}


def logs_page(n: int, cursor: str, complete: bool, terminal: bool = False) -> dict[str, Any]:
    records = [{"cursor": str(i)} for i in range(n)]
    return {"records": records, "next_cursor": cursor, "complete": complete, "terminal": terminal}


def test_a_log_walk_reads_on_until_complete_then_holds_until_terminal() -> None:
    walk = FeedWalk(LOGS, {"run": "R1"}, LongPoll(), 10, tail=5)
    assert walk.request() == {"run": "R1", "tail": 5}
    step = walk.take(logs_page(2, "2", complete=False))
    assert (step.first, step.caught_up, step.done, len(step.items)) == (True, False, False, 2)
    assert walk.request() == {"run": "R1", "after": "2"}
    step = walk.take(logs_page(1, "3", complete=True))
    assert (step.caught_up, step.done) == (True, False)
    assert walk.request() == {"run": "R1", "after": "3", "wait_ms": 10}
    assert walk.take(logs_page(0, "3", complete=True, terminal=True)).done


def test_a_log_walk_without_follow_ends_at_complete() -> None:
    walk = FeedWalk(LOGS, {"run": "R1"}, LongPoll(), 10, follow=False)
    assert walk.take(logs_page(1, "1", complete=True)).done


def test_an_event_walk_is_caught_up_on_an_empty_or_tail_page_and_then_always_held() -> None:
    polls = LongPoll()
    walk = FeedWalk(EVENTS, {"scope": "T1"}, polls, 10, tail=1)
    step = walk.take({"events": [{"cursor": "5"}], "next_cursor": "5"})
    assert (step.caught_up, step.done) == (True, False)
    assert walk.request() == {"scope": "T1", "after": "5", "wait_ms": 10}
    step = walk.take({"events": [{"cursor": "6"}], "next_cursor": "6"})
    assert not step.caught_up
    assert walk.request() == {"scope": "T1", "after": "6", "wait_ms": 10}
    polls.refuse("events")
    assert walk.request() == {"scope": "T1", "after": "6"}
    assert walk.take({"events": [], "next_cursor": "6"}).caught_up

    once = FeedWalk(EVENTS, {}, LongPoll(), 10, follow=False)
    assert not once.take({"events": [{"cursor": "1"}], "next_cursor": "1"}).done
    assert once.request() == {"after": "1"}
    assert once.take({"events": [], "next_cursor": "1"}).done
