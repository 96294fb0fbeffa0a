"""Agent usage as a person reads it: ``12.4k tok $0.0312`` (DESIGN "Agents and cost")."""

from __future__ import annotations

from typing import Any


def _count(n: int) -> str:
    if n >= 1_000_000:
        return f"{n / 1_000_000:.1f}M"
    if n >= 10_000:
        return f"{n / 1000:.0f}k"
    if n >= 1000:
        return f"{n / 1000:.1f}k"
    return str(n)


def usage_text(usage: Any) -> str:
    """Input plus output tokens and the cost where reported; ``-`` when nothing was."""
    if not isinstance(usage, dict):
        return "-"
    tokens = sum(
        value
        for key in ("input_tokens", "output_tokens")
        if isinstance(value := usage.get(key), int) and not isinstance(value, bool)
    )
    words = f"{_count(tokens)} tok"
    cost = usage.get("cost_usd")
    if isinstance(cost, int | float) and not isinstance(cost, bool):
        words += f" ${cost:.4f}" if cost < 1 else f" ${cost:.2f}"
    return words
