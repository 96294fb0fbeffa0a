"""Usage from ``codex exec --json``: the tokens of every ``turn.completed`` event.

Codex prints one JSON object a line (``thread.started``, ``turn.started``,
``item.started``/``item.completed``, ``turn.completed``, ``turn.failed``, ``error``).
Each ``turn.completed`` carries the turn's usage, summed over the model requests the
turn made::

    {"type":"turn.completed","usage":{"input_tokens":3000,"cached_input_tokens":400,
     "cache_write_input_tokens":0,"output_tokens":500,"reasoning_output_tokens":0}}

``input_tokens`` is the API's count, cached tokens included (``cached_input_tokens``
is the part of it served from the cache); ``reasoning_output_tokens`` is part of
``output_tokens``.  Turns add up.  Codex reports no cost: ``cost_usd`` stays None.

In ``codex exec`` one ``turn.completed`` closes the whole session, after its last
model request (0.171.0 prints no per-request usage in ``--json``), so a budget can
only judge a Codex stage once it has ended.  Nor does the stream name the model:
pricing takes the stage's configured one (the preset's ``CODEX_MODEL``).
"""

from __future__ import annotations

import json
from typing import Any

from sloopd.vendor.usage import Usage

_MAX_LINE = 1 << 20  # a usage event is short; a longer line is someone's output


def _count(usage: dict[str, Any], key: str) -> int:
    value = usage.get(key, 0)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return 0
    return value


def parse(line: str, usage: Usage) -> bool:
    """Add ``line``'s usage to ``usage`` when it is a ``turn.completed`` event."""
    text = line.strip()
    if not text.startswith("{") or '"turn.completed"' not in text or len(text) > _MAX_LINE:
        return False
    try:
        event = json.loads(text)
    except ValueError:
        return False
    if not isinstance(event, dict) or event.get("type") != "turn.completed":
        return False
    counts = event.get("usage")
    if not isinstance(counts, dict):
        return False
    usage.add(
        Usage(
            input_tokens=_count(counts, "input_tokens"),
            output_tokens=_count(counts, "output_tokens"),
            cached_tokens=_count(counts, "cached_input_tokens"),
        )
    )
    return True
