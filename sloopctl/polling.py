"""What the commands that poll the daemon share: the pace of their polls, the pages.

Used by ``sloopctl.feeds_cli`` (``logs``, ``events``) and ``sloopctl.follow``
(``show --follow``, ``pause``, ``resume``).  Like them it imports
``sloopctl.cli``, which imports them at its end: import ``sloopctl.cli`` first.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

import click

from sloopctl.client import Reply
from sloopctl.invoke import EXIT_PROTOCOL, Options, fail

# How long a follower waits before asking again once it has caught up: the
# shortest wait right after news, growing while nothing happens.
POLL_MIN_S: Final = 0.2
POLL_MAX_S: Final = 0.5
POLL_GROWTH: Final = 1.5

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


def rows(value: Any) -> list[dict[str, Any]]:
    """The objects of a JSON array in a page; nothing when it is no array."""
    return [r for r in value if isinstance(r, dict)] if isinstance(value, list) else []


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
