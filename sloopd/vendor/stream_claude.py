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

from sloopd.vendor.usage import Usage

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


def parse(line: str, usage: Usage) -> bool:
    """Set ``usage`` from a ``result`` event's ``usage`` and ``total_cost_usd``.

    Returns True when ``line`` was a ``result`` event (even one without usage);
    a ``StreamParser`` (``sloopd.vendor.usage``).
    """
    event = result_event(line)
    if event is None:
        return False
    reported = event.get("usage")
    if isinstance(reported, dict):
        fresh = _count(reported.get("input_tokens"))
        written = _count(reported.get("cache_creation_input_tokens"))
        read = _count(reported.get("cache_read_input_tokens"))
        usage.input_tokens = fresh + written + read
        usage.output_tokens = _count(reported.get("output_tokens"))
        usage.cached_tokens = read
    cost = _cost(event.get("total_cost_usd"))
    if cost is not None:
        usage.cost_usd = cost
    return True


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
