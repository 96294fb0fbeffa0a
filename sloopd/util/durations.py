"""Durations as operators write them: ``30s``, ``20m``, ``2h``, ``1h30m``, ``1d``."""

from __future__ import annotations

import re

_PART = re.compile(r"(\d+)(ms|s|m|h|d)")
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def parse_ms(text: str) -> int:
    """Milliseconds in ``text``; ValueError naming the text when it is not a duration."""
    compact = text.strip().replace(" ", "")
    if not compact:
        raise ValueError("empty duration")
    total, position = 0, 0
    for match in _PART.finditer(compact):
        if match.start() != position:
            break
        total += int(match.group(1)) * _UNIT_MS[match.group(2)]
        position = match.end()
    if position != len(compact):
        raise ValueError(f"'{text}' is not a duration like 30s, 20m, 2h or 1h30m")
    return total


def format_ms(ms: int) -> str:
    """Milliseconds as ``parse_ms`` reads them, largest units first: ``6h``, ``1h30m``, ``90s``."""
    if ms <= 0:
        return "0s"
    parts = []
    for unit in ("d", "h", "m", "s", "ms"):
        amount, ms = divmod(ms, _UNIT_MS[unit])
        if amount:
            parts.append(f"{amount}{unit}")
    return "".join(parts)
