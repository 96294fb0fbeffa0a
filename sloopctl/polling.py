"""What the commands that follow the daemon share: how long they ask it to hold a
request, the pace of their polls when it holds nothing, the pages they read.

Used by ``sloopctl.feeds_cli`` (``logs``, ``events``) and ``sloopctl.follow``
(``show``).  Whether the daemon holds a request at all is negotiated in
``sloopctl.longpoll``, for these commands and the web gateway alike; the walk over
a feed's pages is ``sloopctl.feedwalk``'s.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

import click

from sloopctl.client import Reply
from sloopctl.feedwalk import rows as rows
from sloopctl.invoke import EXIT_PROTOCOL, Options, fail

# How long a follower waits before asking again once it has caught up: the
# shortest wait right after news, growing while nothing happens.  Only against
# a daemon without long-poll: one that knows ``wait_ms`` holds the request.
POLL_MIN_S: Final = 0.2
POLL_MAX_S: Final = 0.5
POLL_GROWTH: Final = 1.5
# A caught-up follower asks the daemon to hold its next request this long
# until there is news (``wait_ms``, protocol 0.7.0).
FOLLOW_WAIT_MS: Final = 30_000
# How long a ``show --follow`` asks the daemon to hold one ``show`` for news: long
# when it prints only changes, a second for the live view (its clock moves each
# second), which also holds its ``logs`` of the running stage that long.
SHOW_WAIT_MS: Final = 30_000
LIVE_WAIT_MS: Final = 1_000

Sleep = Callable[[float], None]


def json_wanted() -> bool:
    """Whether the command was given --json (before or after its name)."""
    return click.get_current_context().ensure_object(Options).json


def present(**args: Any) -> dict[str, Any]:
    """Optional arguments are left out rather than sent as null."""
    return {k: v for k, v in args.items() if v is not None}


def page_data(reply: Reply, *fields: str) -> dict[str, Any]:
    """A page's data; a page without the fields the loop relies on is unreadable."""
    data = reply.data
    if not isinstance(data, dict) or any(f not in data for f in fields):
        fail(f"unreadable reply: the page lacks one of {', '.join(fields)}", EXIT_PROTOCOL)
    return data


class Pace:
    """The wait between polls once caught up: short after news, longer while idle."""

    def __init__(self) -> None:
        self.delay = POLL_MIN_S

    def after(self, news: bool) -> float:
        if news:
            self.delay = POLL_MIN_S
            return self.delay
        current = self.delay
        self.delay = min(POLL_MAX_S, self.delay * POLL_GROWTH)
        return current
