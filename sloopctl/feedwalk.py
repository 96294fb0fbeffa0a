"""The one walk of a paged feed, ``logs`` or ``events``: what to ask for next, when.

Both feeds page the same way: a first request (a ``tail`` of the newest, or from the
start), then one after each page's ``next_cursor``; once the walk has caught up, a
follower asks the daemon to hold the next request until there is news (``wait_ms``,
negotiated by ``sloopctl.longpoll``), or, with a daemon that holds nothing, pauses
before asking again.  They differ in how a page says "caught up": a ``logs`` page
says ``complete`` (and ``terminal`` once the run has settled and nothing is left),
while the activity feed has no end: an empty page, or a tail page, is caught up.

``sloopctl.feeds_cli`` (``logs``, ``events``) and the web gateway's feeds
(``sloopctl.web.feeds``) both follow this walk, one with blocking calls, the other
awaiting its connection, so it does no I/O itself: ``request`` is the next request,
``take`` reads its page and says what it brought and whether to stop or pause.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from sloopctl.longpoll import LongPoll


def rows(value: Any) -> list[dict[str, Any]]:
    """The objects of a JSON array in a page; nothing when it is no array."""
    return [r for r in value if isinstance(r, dict)] if isinstance(value, list) else []


@dataclass(frozen=True, slots=True)
class FeedKind:
    verb: str
    items: str  # the page's array of news
    fields: tuple[str, ...]  # what a page must carry for the walk to read it
    # The field of a page that says it reached the newest (then "terminal" may say the
    # feed ends); None for a feed without one, where only an empty page says so.
    complete: str | None


LOGS: Final = FeedKind("logs", "records", ("records", "next_cursor", "complete"), "complete")
EVENTS: Final = FeedKind("events", "events", ("events", "next_cursor"), None)


@dataclass(frozen=True, slots=True)
class Step:
    """What one page brought, and what the walk does next."""

    items: list[dict[str, Any]]
    first: bool  # the page answered the walk's first request
    caught_up: bool  # nothing newer exists now: a follower that cannot be held pauses
    done: bool  # the walk is over (without follow: at the end of what is there now)


class FeedWalk:
    """A walk over one feed's pages: ``base`` selects the feed (run and stage, scope)."""

    def __init__(
        self,
        kind: FeedKind,
        base: dict[str, Any],
        polls: LongPoll,
        wait_ms: int,
        *,
        tail: int | None = None,
        follow: bool = True,
    ) -> None:
        self.kind = kind
        self.base = base
        self.polls = polls
        self.wait_ms = wait_ms
        self.follow = follow
        self.args = {**base, "tail": tail} if tail is not None else dict(base)
        self.first = True
        self.hold = False  # whether the next request may wait in the daemon for news

    def request(self) -> dict[str, Any]:
        """The next request's arguments, held where this daemon holds them."""
        if not self.hold:
            return dict(self.args)
        return {**self.args, **self.polls.held(self.kind.verb, self.wait_ms)}

    def take(self, page: Mapping[str, Any]) -> Step:
        """Read the answer to ``request``; the walk moves on past it."""
        items = rows(page.get(self.kind.items))
        if self.kind.complete is not None:
            caught_up = page.get(self.kind.complete) is True
            done = caught_up and (page.get("terminal") is True or not self.follow)
            # A page that is not complete says more is there now: read on at once.
            hold = caught_up
        else:
            # No "complete": an empty page says the end was reached, and a tail page
            # ends at the newest by definition.
            caught_up = not items or "tail" in self.args
            done = caught_up and not self.follow
            # A page with news may have been the last one: every later request may
            # wait (with news the daemon answers at once, so it costs no round trip).
            hold = self.follow
        step = Step(items, self.first, caught_up, done)
        self.args = {**self.base, "after": page.get("next_cursor")}
        self.first, self.hold = False, hold
        return step
