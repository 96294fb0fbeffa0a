"""The client's one long-poll negotiation: whether this daemon holds a request for news.

Protocol 0.7.0 lets a ``logs`` or ``events`` request carry ``wait_ms`` (a page with
nothing new is held until something arrives, or the wait ends) and a ``show`` carry
``since`` (the last reply's ``epoch``) with ``wait_ms`` (answered once the epoch
passes ``since``).  A daemon from before answers ``invalid_arguments`` naming the
field: the request is sent again without the long-poll arguments, and that verb is
polled from then on.  A ``show`` reply without an integer ``epoch`` has nothing to
wait past, so the next ``show`` is not held either.

Every follower of the client negotiates here: ``logs``/``events --follow``
(``sloopctl.feeds_cli``), ``show --follow`` (``sloopctl.follow``) and the web
gateway's feeds (``sloopctl.web.feeds``).  The gateway runs on asyncio and the
commands block, so the negotiation itself does no I/O: ``held`` says what to add to
a request, ``retry`` reads its reply and says what to send again.  ``LongPoll.call``
is the blocking driver of those two steps; the gateway awaits its connection
between the same two.
"""

from __future__ import annotations

from typing import Any, Final

from sloopctl.client import Client, Reply
from sloopd.wire import api

# The arguments a daemon before 0.7.0 does not know.
LONG_POLL_FIELDS: Final = frozenset({"wait_ms", "since"})
# The verbs held only past an epoch (``since``), not on a cursor.
_ON_EPOCH: Final = frozenset({"show"})


def epoch_of(data: Any) -> int | None:
    """The ``epoch`` a ``show`` reply carries; None when it has no integer one."""
    epoch = data.get("epoch") if isinstance(data, dict) else None
    return epoch if isinstance(epoch, int) and not isinstance(epoch, bool) else None


def without_long_poll(args: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in args.items() if k not in LONG_POLL_FIELDS}


class LongPoll:
    """Which verbs this daemon holds: every verb until its first refusal of the arguments.

    One per daemon (the gateway shares one between its feeds); ``forget`` when the
    daemon may have been replaced, so another build is asked afresh.
    """

    def __init__(self) -> None:
        self.refused: set[str] = set()

    def supported(self, verb: str) -> bool:
        return verb not in self.refused

    def held(self, verb: str, wait_ms: int, since: int | None = None) -> dict[str, Any]:
        """The arguments that ask the daemon to hold the next ``verb`` request for news:
        none once it refused them, nor for a ``show`` without an epoch to wait past."""
        if verb in self.refused:
            return {}
        if verb in _ON_EPOCH:
            return {} if since is None else {"since": since, "wait_ms": wait_ms}
        return {"wait_ms": wait_ms}

    def retry(self, verb: str, sent: dict[str, Any], reply: Reply) -> dict[str, Any] | None:
        """The request to send again when ``reply`` refuses the long-poll arguments ``sent``
        carried (learning that ``verb`` is polled from now on); None for any other reply."""
        if reply.ok or reply.error.get("code") != api.ErrorCode.INVALID_ARGUMENTS:
            return None
        details = reply.error.get("details")
        field = details.get("field") if isinstance(details, dict) else None
        if field not in LONG_POLL_FIELDS or field not in sent:
            return None
        self.refused.add(verb)
        return without_long_poll(sent)

    def refuse(self, verb: str) -> None:
        """Poll ``verb`` from now on: the daemon showed it cannot hold it (no epoch)."""
        self.refused.add(verb)

    def forget(self) -> None:
        """Ask afresh: the daemon went away, and the one that answers now may be newer."""
        self.refused.clear()

    def call(self, client: Client, verb: str, args: dict[str, Any]) -> Reply:
        """One request on a blocking client, sent again without what this daemon refused."""
        reply = client.call(verb, args)
        again = self.retry(verb, args, reply)
        return reply if again is None else client.call(verb, again)
