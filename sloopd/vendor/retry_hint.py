"""What a CLI's stream says about waiting for a limit, apart from its final error.

A CLI that gives up on a rate limit often prints no reset at all: Claude Code's
last words are ``API Error: Request rejected (429) · <the API's message>`` and
Codex's ``exceeded retry limit, last status: 429 Too Many Requests``.  Only one
of the pinned CLIs relays the vendor's delay on the way there.  Claude Code
(2.1.332, its ``SDKAPIRetryMessage``) prints before each retry of a request::

    {"type":"system","subtype":"api_retry","attempt":1,"max_retries":1,
     "retry_delay_ms":5457,"error_status":429,"error":"rate_limit",
     "session_id":"…","uuid":"…"}

``retry_delay_ms`` is the ``retry-after`` the API sent (with Claude's jitter), or
its own back-off when the API sent none; ``error_status`` is null for a failure
with no HTTP answer.  Claude waits out a ``retry-after`` of at most 60 s; past
that it fails the request at once and prints no such event, so a reset further
than a minute ahead never reaches the stream.

:class:`RetryHint` follows a failed session's events and keeps the delay of the
last limit retry that nothing got past: a real model answer after it (an
``assistant`` event that is not the CLI's own API-error message) means that retry
got through, so its delay says nothing about the failure at the end.  The gate
uses the delay as a floor for its probe (``sloopd.queue.gate``), never as the
reset: the request it delayed failed again.  Never raises on untrusted input.
"""

from __future__ import annotations

from typing import Any, Final

LIMIT_STATUSES: Final = frozenset({429})
LIMIT_ERRORS: Final = frozenset({"rate_limit"})
MAX_DELAY_MS: Final = 24 * 3_600_000
"""A delay past a day is a misreading (or a joke), not a hint."""


def _delay(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return value if 0 < value <= MAX_DELAY_MS else None


def limit_retry_delay(event: dict[str, Any]) -> int | None:
    """The delay a Claude ``api_retry`` event names for a rate-limited request, else None."""
    if event.get("type") != "system" or event.get("subtype") != "api_retry":
        return None
    status, error = event.get("error_status"), event.get("error")
    limited = (isinstance(status, int) and status in LIMIT_STATUSES) or (
        isinstance(error, str) and error in LIMIT_ERRORS
    )
    return _delay(event.get("retry_delay_ms")) if limited else None


def _answered(event: dict[str, Any]) -> bool:
    """A model answer got through: an assistant event that is not an API-error message."""
    return event.get("type") == "assistant" and event.get("is_api_error_message") is not True


class RetryHint:
    """The delay of the last rate-limit retry of a session that nothing got past."""

    __slots__ = ("delay_ms",)

    def __init__(self) -> None:
        self.delay_ms: int | None = None

    def observe(self, event: dict[str, Any]) -> None:
        try:
            delay = limit_retry_delay(event)
            if delay is not None:
                self.delay_ms = delay
            elif _answered(event):
                self.delay_ms = None
        except (TypeError, ValueError, AttributeError):
            return
