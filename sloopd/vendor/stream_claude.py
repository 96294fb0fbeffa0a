"""Claude Code's ``--output-format stream-json`` stream: what a run cost, what was refused.

Headless (``claude -p --output-format stream-json --verbose``) the CLI prints one
JSON event per line: ``system`` (``init``, ``api_retry``, …), ``assistant``,
``user`` (tool results) and, last, one ``result`` event::

    {"type":"result","subtype":"success","is_error":false,"num_turns":2,
     "total_cost_usd":0.02164,"usage":{"input_tokens":2400,"output_tokens":600,
     "cache_read_input_tokens":200,"cache_creation_input_tokens":0,…},
     "permission_denials":[{"tool_name":"Bash","tool_use_id":"toolu_…",
     "tool_input":{…}}],"result":"…",…}

Its ``usage`` and ``total_cost_usd`` are the session's totals (the per-result share
is a separate ``model_usage_since_last_result``), so :func:`parse` *sets* the
execution's ``Usage`` from the latest ``result`` event rather than adding to it.

Before that, every ``assistant`` event carries its API message's ``id``, ``model``
and ``usage`` (as ``message_start`` reported it: the prompt's tokens in full, the
output's only as far as they were known; a message of several content blocks is
printed once per block, with the same id and usage).  So the running total is the
sum over distinct message ids since the last ``result``, each message counted once
at its latest usage, and a budget can stop the session between two API calls
rather than after the last: :func:`new_parser` gives each stage execution a
parser that remembers the ids it counted.  Those events carry no cost; the model
they name is what ``sloopd.vendor.pricing`` prices until ``result`` says.
Claude's ``input_tokens`` counts only the uncached part of the prompt; ``Usage``
counts cached tokens inside ``input_tokens`` (as the other vendors report them),
so ``input_tokens`` is input + cache creation + cache read, and ``cached_tokens``
is the cache read.  A failed session still ends with a ``result`` event
(``is_error: true``, often ``subtype: "success"``, the API error in ``result``).

``permission_denials`` lists the tools the CLI refused to run for want of a
permission (headless without ``--dangerously-skip-permissions`` or a matching
``--allowedTools``, it refuses every tool that asks, and still exits 0):
:func:`permission_denials` names them.  Nothing here raises on a line it does
not understand; an agent's output is untrusted.
"""

from __future__ import annotations

import json
import math
from typing import Any

from sloopd.vendor.usage import ModelTokens, Usage

# A result event carries the final answer's text; past this a line is not parsed.
MAX_LINE_CHARS = 16 * 1024 * 1024
_TOKEN_LIMIT = 10**15  # a count past this is not a real one


def result_event(line: str) -> dict[str, Any] | None:
    """The ``result`` event on ``line``, or None when the line is anything else."""
    text = line.strip()
    if not text.startswith("{") or '"result"' not in text or len(text) > MAX_LINE_CHARS:
        return None
    try:
        event = json.loads(text)
    except (ValueError, RecursionError):
        return None
    if not isinstance(event, dict) or event.get("type") != "result":
        return None
    return event


def _count(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        return 0
    return value if 0 <= value < _TOKEN_LIMIT else 0


def _cost(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    cost = float(value)
    return cost if math.isfinite(cost) and cost >= 0 else None


def _tokens(reported: dict[str, Any]) -> ModelTokens:
    """Claude's counts as ``Usage`` counts them: cache writes and reads inside input."""
    fresh = _count(reported.get("input_tokens"))
    written = _count(reported.get("cache_creation_input_tokens"))
    read = _count(reported.get("cache_read_input_tokens"))
    return ModelTokens(fresh + written + read, _count(reported.get("output_tokens")), read)


def parse(line: str, usage: Usage) -> bool:
    """Set ``usage`` from a ``result`` event's ``usage`` and ``total_cost_usd``.

    Returns True when ``line`` was a ``result`` event (even one without usage);
    a ``StreamParser`` (``sloopd.vendor.usage``).  It reads no ``assistant`` event:
    that takes the per-execution parser of :func:`new_parser`.
    """
    event = result_event(line)
    if event is None:
        return False
    reported = event.get("usage")
    if isinstance(reported, dict):
        tokens = _tokens(reported)
        usage.input_tokens = tokens.input_tokens
        usage.output_tokens = tokens.output_tokens
        usage.cached_tokens = tokens.cached_tokens
    cost = _cost(event.get("total_cost_usd"))
    if cost is not None:
        usage.cost_usd = cost
    return True


def assistant_usage(line: str) -> tuple[str, str, ModelTokens] | None:
    """An ``assistant`` event's message id, model and usage; None for any other line."""
    text = line.strip()
    if (
        not text.startswith("{")
        or '"assistant"' not in text
        or '"usage"' not in text
        or len(text) > MAX_LINE_CHARS
    ):
        return None
    try:
        event = json.loads(text)
    except (ValueError, RecursionError):
        return None
    if not isinstance(event, dict) or event.get("type") != "assistant":
        return None
    message = event.get("message")
    if not isinstance(message, dict) or not isinstance(message.get("usage"), dict):
        return None
    ident, model = message.get("id"), message.get("model")
    return (
        ident if isinstance(ident, str) else "",
        model if isinstance(model, str) else "",
        _tokens(message["usage"]),
    )


class _ExecutionParser:
    """One stage execution's reading of the stream: each API message counted once."""

    def __init__(self) -> None:
        # Since the last result event: each message's latest usage, by message id.
        self._messages: dict[str, tuple[str, ModelTokens]] = {}
        self._settled = Usage()  # what the last result event said

    def __call__(self, line: str, usage: Usage) -> bool:
        seen = assistant_usage(line)
        if seen is not None:
            ident, model, tokens = seen
            self._messages[ident or f"unnamed-{len(self._messages)}"] = (model, tokens)
            self._publish(usage)
            return True
        if not parse(line, self._settled):
            return False
        self._messages.clear()  # the result's totals include every message so far
        self._publish(usage)
        return True

    def _publish(self, usage: Usage) -> None:
        """``usage`` := the last result's totals plus every message since it."""
        usage.input_tokens = self._settled.input_tokens
        usage.output_tokens = self._settled.output_tokens
        usage.cached_tokens = self._settled.cached_tokens
        usage.cost_usd = self._settled.cost_usd if not self._messages else None
        usage.models = {}
        for model, tokens in self._messages.values():
            usage.input_tokens += tokens.input_tokens
            usage.output_tokens += tokens.output_tokens
            usage.cached_tokens += tokens.cached_tokens
            if model:
                usage.models[model] = usage.models.get(model, ModelTokens()).plus(tokens)


def new_parser() -> _ExecutionParser:
    """A parser for one stage execution (``sloopd.vendor.usage.for_execution``)."""
    return _ExecutionParser()


def permission_denials(line: str) -> list[str] | None:
    """The tools a ``result`` event says were refused for want of permission, in order.

    None when ``line`` is not a ``result`` event; ``[]`` when nothing was refused.
    A tool refused twice is named twice.
    """
    event = result_event(line)
    if event is None:
        return None
    denials = event.get("permission_denials")
    if not isinstance(denials, list):
        return []
    names: list[str] = []
    for denial in denials:
        name = denial.get("tool_name") if isinstance(denial, dict) else None
        if isinstance(name, str) and name:
            names.append(name)
    return names


def is_error(line: str) -> bool | None:
    """Whether a ``result`` event reports a failed session (None: not a result event)."""
    event = result_event(line)
    if event is None:
        return None
    return event.get("is_error") is True
