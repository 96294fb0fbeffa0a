"""A usage parser for tests: ``stream = "python:tests.support.usage_stream:parse"``.

It reads lines like ``{"type": "usage", "input": 100, "output": 20, "cached": 5,
"cost": 0.01}``, each adding to the execution's usage (the shape is ours; the
vendor parsers read their CLIs' own events).  The daemon imports it by that spec,
so the daemon needs the repository root on its ``PYTHONPATH``.
"""

from __future__ import annotations

import json

from sloopd.vendor.usage import Usage

SPEC = "python:tests.support.usage_stream:parse"


def line(
    input_tokens: int, output_tokens: int = 0, cached: int = 0, cost: float | None = None
) -> str:
    event: dict[str, object] = {
        "type": "usage",
        "input": input_tokens,
        "output": output_tokens,
        "cached": cached,
    }
    if cost is not None:
        event["cost"] = cost
    return json.dumps(event)


def parse(text: str, usage: Usage) -> bool:
    if not text.startswith("{"):
        return False
    try:
        event = json.loads(text)
    except ValueError:
        return False
    if not isinstance(event, dict) or event.get("type") != "usage":
        return False
    usage.add(
        Usage(
            int(event.get("input", 0)),
            int(event.get("output", 0)),
            int(event.get("cached", 0)),
            event.get("cost"),
        )
    )
    return True
