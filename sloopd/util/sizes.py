"""Sizes as operators write them: ``65536``, ``"512KiB"``, ``"64MiB"``, ``"1GiB"``."""

from __future__ import annotations

import re

_SIZE = re.compile(r"(\d{1,15})\s*(B|KiB|MiB|GiB)?", re.IGNORECASE)
_UNIT_BYTES = {"b": 1, "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30}


def parse_bytes(value: int | str) -> int:
    """Bytes in ``value`` (an integer, or a string with a binary unit); ValueError if not a size."""
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not a size")
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"{value} is not a size (negative)")
        return value
    match = _SIZE.fullmatch(value.strip())
    if match is None:
        raise ValueError(f'\'{value}\' is not a size like 65536, "512KiB", "64MiB" or "1GiB"')
    return int(match[1]) * _UNIT_BYTES[(match[2] or "b").lower()]


def format_bytes(count: int) -> str:
    """``count`` bytes for a person: ``512 B``, ``1.5 KiB``, ``64.0 MiB``."""
    if count < 1 << 10:
        return f"{count} B"
    if count < 1 << 20:
        return f"{count / (1 << 10):.1f} KiB"
    if count < 1 << 30:
        return f"{count / (1 << 20):.1f} MiB"
    return f"{count / (1 << 30):.1f} GiB"
