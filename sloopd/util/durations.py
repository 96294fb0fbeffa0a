"""Durations as operators write them: ``30s``, ``20m``, ``2h``, ``1h30m``, ``1d``.

``parse_ms`` is ``sloopctl.when.parse_duration_ms``: one grammar for every duration
an operator writes, ``sloop.toml``'s keys and ``sloopctl``'s ``--at`` alike, kept
where both packages can import it (``sloopctl`` may import nothing of the daemon but
the schema module; that module is pure, standard library only).  ``format_ms``
writes what it reads.
"""

from __future__ import annotations

from typing import Final

from sloopctl.when import parse_duration_ms as parse_ms

__all__ = ["format_ms", "parse_ms"]

_UNIT_MS: Final = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


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
