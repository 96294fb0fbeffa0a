"""The structured error objects the CLIs print in their JSON event streams.

A preset runs each CLI with its JSON stream, so a failure arrives as an event,
not as a sentence on stderr:

* Claude Code: the final ``result`` event with ``is_error: true``, the API
  error's text in ``result`` and, for an API failure, ``api_error_status`` and
  ``api_error_type`` (``rate_limit_error``, ``overloaded_error``, …).
* Codex: ``{"type":"error","message":…}`` and ``{"type":"turn.failed",
  "error":{"message":…}}``.
* Gemini CLI: the ``result`` event with ``status: "error"`` and
  ``error: {type, message}`` (``-o stream-json``), a top-level ``error`` object
  (``-o json``), or ``{"type":"error","message":…}``.

:func:`error_statement` reads such an event into the message it carries (JSON
escapes undone, its lines joined into one, so a pattern and a reset time on
different lines of the message are read together) and, where the CLI names the
API error's kind or status, the class that kind means.  Only error events
count: Claude's ``system``/``api_retry`` events name an error too, but they are
the CLI's own retry chatter, not the failure.  Never raises; an agent's output
is untrusted.

:func:`session_error` reads whether a stream's *end* says the session failed, for
a CLI that may exit 0 all the same: Gemini CLI 0.61.0 ends a session whose model
stream broke off (no finish reason, an empty or blocked answer) with an ``error``
event and a ``result`` of status ``"error"``, and exits 0.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Final

from sloopd.vendor.tail import bounded

MAX_EVENT_CHARS: Final = 1024 * 1024
MAX_MESSAGE_CHARS: Final = 8 * 1024

# Claude Code's ``api_error_type`` (the Anthropic API's ``error.type``).
CLAUDE_ERROR_TYPES: Final = {
    "rate_limit_error": "rate_limited",
    "overloaded_error": "overloaded",
    "api_error": "overloaded",
    "authentication_error": "auth_failed",
    "permission_error": "auth_failed",
}
# HTTP statuses named by ``api_error_status`` when the type is missing or unknown.
STATUS_CLASSES: Final = {
    429: "rate_limited",
    529: "overloaded",
    503: "overloaded",
    401: "auth_failed",
}
# Gemini CLI's error class names (``error.type``) that name a cause by themselves.
GEMINI_ERROR_TYPES: Final = {
    "FatalAuthenticationError": "auth_failed",
    "TerminalQuotaError": "usage_limit",
    "RetryableQuotaError": "rate_limited",
}


# Event types that carry the session's content or the CLI's progress, never its
# failure: the agent's text and tool calls (which may quote any error it read),
# tool results, and retry chatter (Claude's ``system``/``api_retry``).
CONTENT_EVENTS: Final = frozenset(
    {
        "assistant", "user", "system", "stream_event",  # Claude Code
        "thread.started", "turn.started", "turn.completed",  # Codex
        "item.started", "item.updated", "item.completed",
        "init", "message", "tool_use", "tool_result",  # Gemini CLI
    }
)  # fmt: skip


def is_content(event: dict[str, Any]) -> bool:
    """Whether the event is the session's content or progress, so no failure by itself."""
    kind = event.get("type")
    return isinstance(kind, str) and kind in CONTENT_EVENTS


@dataclass(frozen=True)
class Statement:
    """What one error event says: its message, and the class its fields name (if any)."""

    message: str
    classification: str | None
    vendor: str


def json_event(line: str) -> dict[str, Any] | None:
    """The JSON object on ``line``, or None when the line is not one (or too big)."""
    text = line.strip()
    if not text.startswith("{") or len(text) > MAX_EVENT_CHARS:
        return None
    try:
        event = json.loads(text)
    except (ValueError, RecursionError):
        return None
    return event if isinstance(event, dict) else None


def error_statement(line: str) -> Statement | None:
    """The error an event line reports, or None when the line is no error event."""
    event = json_event(line)
    return None if event is None else statement_of(event)


def statement_of(event: dict[str, Any]) -> Statement | None:
    """The error a parsed event reports, or None when it is no error event."""
    try:
        return _claude(event) or _codex(event) or _gemini(event)
    except (TypeError, ValueError, AttributeError):
        return None


def _message(value: Any) -> str:
    if not isinstance(value, str):
        return ""
    return " ".join(value[:MAX_MESSAGE_CHARS].split())


def _claude(event: dict[str, Any]) -> Statement | None:
    if event.get("type") != "result" or event.get("is_error") is not True:
        return None
    if "session_id" not in event and "api_error_status" not in event and "subtype" not in event:
        return None
    kind = event.get("api_error_type")
    status = event.get("api_error_status")
    classification = CLAUDE_ERROR_TYPES.get(kind) if isinstance(kind, str) else None
    if classification is None and isinstance(status, int) and not isinstance(status, bool):
        classification = STATUS_CLASSES.get(status)
    return Statement(_message(event.get("result")), classification, "claude")


def _codex(event: dict[str, Any]) -> Statement | None:
    kind = event.get("type")
    if kind == "error" and "severity" not in event:
        error = event.get("error")
        nested = error.get("message") if isinstance(error, dict) else None
        return Statement(_message(event.get("message") or nested), None, "codex")
    error = event.get("error")
    if kind == "turn.failed" and isinstance(error, dict):
        return Statement(_message(error.get("message")), None, "codex")
    return None


def _gemini(event: dict[str, Any]) -> Statement | None:
    kind = event.get("type")
    error = event.get("error")
    if kind == "error" and "severity" in event:
        return Statement(_message(event.get("message")), None, "gemini")
    if not isinstance(error, dict):
        return None
    if (kind == "result" and event.get("status") == "error") or (
        kind is None and "message" in error
    ):
        name = error.get("type")
        classification = GEMINI_ERROR_TYPES.get(name) if isinstance(name, str) else None
        return Statement(_message(error.get("message")), classification, "gemini")
    return None


def session_error(stream: str, lines: Iterable[str]) -> str | None:
    """What ends ``stream``'s output when it says the session failed (``a result of
    status "error"``), or None.

    Only streams whose CLI can exit 0 after a failed session are read (Gemini CLI);
    for the others the exit status says it.  ``lines`` are the output's lines in
    order, stdout and stderr together; only their bounded tail is read.
    """
    reader = _SESSION_READERS.get(stream)
    return None if reader is None else reader(list(bounded(lines)))


def _gemini_session(lines: list[str]) -> str | None:
    """The last event of Gemini CLI's stream-json decides: a ``result`` of status
    ``"error"``, or an ``error`` event of severity ``"error"`` that no event follows.

    A warning (a loop detected) and any other last event (the session cut short, its
    exit status says why) are no verdict.
    """
    for line in reversed(lines):
        event = json_event(line)
        kind = None if event is None else event.get("type")
        if not isinstance(kind, str) or event is None:
            continue
        if kind == "result":
            return 'a result of status "error"' if event.get("status") == "error" else None
        if kind == "error" and event.get("severity") == "error":
            return "an error event"
        return None
    return None


_SESSION_READERS: Final[dict[str, Callable[[list[str]], str | None]]] = {
    "gemini": _gemini_session,
}
