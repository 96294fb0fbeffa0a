"""Agent usage as a person reads it: ``52k in (40k cached), 1.8k out, $0.0421``.

One rule for every place Sloop shows usage, the one ``sloopctl logs`` prints
(docs/agents.md "Tokens"): ``in`` is ``input_tokens``, which already counts the
cached input, the cached part follows in brackets when there is one, then ``out``
and the cost in dollars to four decimals.  Tables cut the counts to a few
characters (950, 1.2k, 12k, 1.2M); ``logs`` prints one event's exact counts.  The
web's ``usageText`` (sloopctl/web/static/widgets.js) follows this rule to the
letter; tests/unit/test_sloopctl_render.py and tests/web/test_web_details.py pin
both to the same words.
"""

from __future__ import annotations

from typing import Any


def count(n: int) -> str:
    """A token count in a few characters; integer arithmetic, rounding halves up, so
    the web's copy of this rule (no float formatting there either) says the same."""
    if n >= 999_500:
        tenths = (n + 50_000) // 100_000
        return f"{tenths // 10}.{tenths % 10}M"
    if n >= 9_950:
        return f"{(n + 500) // 1000}k"
    if n >= 1000:
        tenths = (n + 50) // 100
        return f"{tenths // 10}.{tenths % 10}k"
    return str(n)


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def usage_text(usage: Any) -> str:
    """Tokens in (cached among them), out, and the cost where reported; ``-`` when
    nothing was."""
    if not isinstance(usage, dict):
        return "-"
    words = f"{count(_int(usage.get('input_tokens')))} in"
    cached = _int(usage.get("cached_tokens"))
    if cached:
        words += f" ({count(cached)} cached)"
    words += f", {count(_int(usage.get('output_tokens')))} out"
    cost = usage.get("cost_usd")
    if isinstance(cost, int | float) and not isinstance(cost, bool):
        words += f", ${cost:.4f}"
    return words
