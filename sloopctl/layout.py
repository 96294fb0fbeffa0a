"""Layout primitives for the readable output: colour, times, aligned tables.

Kept apart from ``render`` so the parts that decide *what* to show stay short;
nothing here knows a verb or a field name.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final, TextIO

Cell = str | tuple[str, str]  # plain text, or (text, style name)
Paint = Callable[[str, str], str]

_SGR: Final = {
    "bold": "1",
    "dim": "2",
    "red": "31",
    "green": "32",
    "yellow": "33",
    "blue": "34",
    "magenta": "35",
    "cyan": "36",
}
STATE_STYLE: Final = {
    "ready": "cyan",
    "held": "yellow",
    "claimed": "blue",
    "running": "blue",
    "merged": "green",
    "passed": "green",
    "failed": "red",
    "needs_review": "magenta",
    "aborted": "yellow",
    "pending": "dim",
    "open": "green",
    "cooldown": "yellow",
    "paused": "yellow",
    # A stage execution cut short (``ended_by``): a stop, or a rebuild that costs nothing.
    "interrupted": "yellow",
    "rebuilt": "cyan",
    # A run's state in the merge queue (the dashboard's ``queue``).
    "waiting": "dim",
    "building": "blue",
    "gating": "blue",
    "landing": "green",
}


def colour_enabled(stream: TextIO, environ: Mapping[str, str] | None = None) -> bool:
    """Colour only for a terminal, and never when NO_COLOR is set (no-color.org)."""
    env = os.environ if environ is None else environ
    if env.get("NO_COLOR"):  # present and non-empty disables, per no-color.org
        return False
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


def painter(colour: bool) -> Paint:
    def paint(text: str, style: str) -> str:
        code = _SGR.get(style)
        return f"\x1b[{code}m{text}\x1b[0m" if colour and code and text else text

    return paint


# --- times ---------------------------------------------------------------------


def span(ms: int) -> str:
    """A duration in the two largest units that matter: 45s, 12m, 3h5m, 2d4h.

    Rounded to the nearest shown unit, so a trigger posted with --at 10m reads
    "in 10m" rather than "in 9m" a moment later.
    """
    ms = max(ms, 0)
    if round(ms / 1000) < 60:
        return f"{round(ms / 1000)}s"
    minutes = round(ms / 60_000)
    if minutes < 60:
        return f"{minutes}m"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours}h{minutes}m" if minutes else f"{hours}h"
    days, hours = divmod(round(ms / 3_600_000), 24)
    return f"{days}d{hours}h" if hours else f"{days}d"


def relative(at_ms: Any, now: int) -> str:
    if not isinstance(at_ms, int) or isinstance(at_ms, bool):
        return "-"
    delta = now - at_ms
    if abs(delta) < 1000:
        return "now"
    return f"{span(delta)} ago" if delta > 0 else f"in {span(-delta)}"


def due(at_ms: Any, now: int) -> str:
    """A due time: anything not in the future is simply due now."""
    if isinstance(at_ms, int) and not isinstance(at_ms, bool) and at_ms > now:
        return f"in {span(at_ms - now)}"
    return "now" if isinstance(at_ms, int) else "-"


# --- tables --------------------------------------------------------------------


def text(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)


def state_cell(state: Any, suffix: str = "") -> Cell:
    return (text(state) + suffix, STATE_STYLE.get(str(state), ""))


def table(headers: Sequence[str], rows: Sequence[Sequence[Cell]], paint: Paint) -> list[str]:
    """Aligned columns; widths come from the plain text so colour cannot skew them."""
    plain = [[c if isinstance(c, str) else c[0] for c in row] for row in rows]
    widths = [max([len(h)] + [len(r[i]) for r in plain]) for i, h in enumerate(headers)]
    last = len(headers) - 1

    def line(cells: Sequence[Cell]) -> str:
        out = []
        for i, cell in enumerate(cells):
            value, style = (cell, "") if isinstance(cell, str) else cell
            padded = value if i == last else value.ljust(widths[i])
            out.append(paint(padded, style) if style else padded)
        return "  ".join(out).rstrip()

    return [paint(line(headers), "dim"), *(line(row) for row in rows)]


def section(
    title: str,
    headers: Sequence[str],
    rows: Sequence[Sequence[Cell]],
    paint: Paint,
    empty: str = "none",
) -> list[str]:
    if not rows:
        return ["", f"{paint(title, 'bold')}: {empty}"]
    return ["", paint(title, "bold"), *table(headers, rows, paint)]
