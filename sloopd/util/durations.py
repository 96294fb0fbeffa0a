"""Durations as operators write them: ``30s``, ``20m``, ``2h``, ``1h30m``, ``1d``.

The reading is ``sloopd.wire.api.parse_duration_ms``: one grammar for every duration
an operator writes, ``sloop.toml``'s keys and ``sloopctl``'s ``--at`` alike, kept in
the one module both packages import.  ``format_ms`` writes what it reads.
"""

from __future__ import annotations

from typing import Final

_UNIT_MS: Final = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def format_ms(ms: int) -> str:
    """Milliseconds as the grammar reads them, largest units first: ``6h``, ``1h30m``, ``90s``."""
    if ms <= 0:
        return "0s"
    parts = []
    for unit in ("d", "h", "m", "s", "ms"):
        amount, ms = divmod(ms, _UNIT_MS[unit])
        if amount:
            parts.append(f"{amount}{unit}")
    return "".join(parts)
