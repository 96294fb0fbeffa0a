"""What the commands that poll the daemon share: the pace of their polls, the pages.

Used by ``sloopctl.feeds_cli`` (``logs``, ``events``) and ``sloopctl.follow``
(``show --follow``, ``pause``, ``resume``).  Like them it imports
``sloopctl.cli``, which imports them at its end: import ``sloopctl.cli`` first.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

import click

from sloopctl.client import Client, Reply
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


class FeedWait:
    """Whether a ``logs``/``events`` follower sends ``wait_ms``: until the daemon refuses it.

    (``LongPoll`` below is the same negotiation for ``show --follow``, which also
    carries the ``epoch`` it waits on.)
    """

    def __init__(self) -> None:
        self.supported = True

    def args(self, args: dict[str, Any], caught_up: bool) -> dict[str, Any]:
        """The request: held by the daemon once the follower has caught up."""
        return {**args, "wait_ms": FOLLOW_WAIT_MS} if caught_up and self.supported else args

    def refused(self, reply: Reply) -> bool:
        """Whether ``reply`` is a daemon older than 0.7.0 refusing ``wait_ms`` itself
        (then the follower asks again without it, and polls from now on)."""
        if not self.supported or reply.ok or reply.error.get("code") != "invalid_arguments":
            return False
        details = reply.error.get("details")
        if not isinstance(details, dict) or details.get("field") != "wait_ms":
            return False
        self.supported = False
        return True


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


# --- long-poll ---------------------------------------------------------------------------

# How long a follower asks the daemon to hold one `show` (or `logs`) for news: long
# when it prints only changes, a second for the live view (its clock moves each second).
SHOW_WAIT_MS: Final = 30_000
LIVE_WAIT_MS: Final = 1_000


class LongPoll:
    """The daemon's long-poll arguments while it takes them, today's polling once it refuses.

    A ``show`` reply that carries an integer ``epoch`` offers ``since`` and ``wait_ms``
    (answered once the epoch passes ``since``, or when the wait ends); ``logs`` may
    take ``wait_ms`` (an empty page held until a record arrives).  A daemon without
    them answers ``invalid_arguments`` naming the field: the request is sent again
    without them, and that verb is polled from then on.
    """

    def __init__(self) -> None:
        self.epoch: int | None = None
        self.refused: set[str] = set()

    def note(self, data: Any) -> None:
        epoch = data.get("epoch") if isinstance(data, dict) else None
        self.epoch = epoch if isinstance(epoch, int) and not isinstance(epoch, bool) else None

    def show_wait(self, wait_ms: int) -> dict[str, Any]:
        if self.epoch is None or "show" in self.refused:
            return {}
        return {"since": self.epoch, "wait_ms": wait_ms}

    def logs_wait(self, wait_ms: int) -> dict[str, Any]:
        return {} if "logs" in self.refused else {"wait_ms": wait_ms}

    def call(self, client: Client, verb: str, args: dict[str, Any], extra: dict[str, Any]) -> Reply:
        if not extra:
            return client.call(verb, args)
        reply = client.call(verb, {**args, **extra})
        if not reply.ok and reply.error.get("code") == "invalid_arguments":
            details = reply.error.get("details")
            if isinstance(details, dict) and details.get("field") in extra:
                self.refused.add(verb)
                return client.call(verb, args)
        return reply
