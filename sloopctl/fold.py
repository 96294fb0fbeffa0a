"""``show``'s text folded to the terminal's width at word boundaries.

A terminal wraps a long line wherever its last column falls, in the middle of a
ticket's name or a reason's word.  On a terminal ``show`` folds each long line
itself instead: at spaces, every continuation indented to where the cell it breaks
in begins (a table's REASON column, a detail's value), so the columns stay readable;
a single word wider than the room left is clipped with ``…`` as the follow view
clips.  A pipe gets the lines whole, for scripts and ``grep``.

Colour codes (SGR) take no cells and are carried with the word they sit in.
"""

from __future__ import annotations

import os
import re
import shutil
from typing import Final, TextIO

from sloopctl.watch import columns

_SGR: Final = re.compile(r"\x1b\[[0-9;]*m")
_TOKEN: Final = re.compile(r"( +)")
# A continuation is never indented past this share of the width: text needs room.
_MOST_INDENT: Final = 0.5
_PLAIN_INDENT: Final = 2


def visible(line: str) -> str:
    return _SGR.sub("", line)


def _hang(plain: str, width: int) -> int:
    """Where continuation lines start: the last cell boundary (two spaces, then text)
    before the first break, or a small indent where there is none or it is too far in."""
    boundary = 0
    for match in re.finditer(r" {2,}(?=\S)", plain[:width]):
        boundary = match.end()
    if boundary == 0 or boundary > width * _MOST_INDENT:
        return _PLAIN_INDENT
    return boundary


def _clip(word: str, room: int) -> str:
    """A word too wide for any line, cut to ``room`` cells with an ellipsis."""
    out, used = [], 0
    for piece in re.split(f"({_SGR.pattern})", word):
        if _SGR.fullmatch(piece):
            out.append(piece)
            continue
        for ch in piece:
            if used + columns(ch) > room - 1:
                return "".join(out) + "…" + ("\x1b[0m" if _SGR.search(word) else "")
            out.append(ch)
            used += columns(ch)
    return "".join(out)


def fold_line(line: str, width: int) -> list[str]:
    """One line as lines of at most ``width`` cells, broken only at spaces."""
    plain = visible(line)
    if columns(plain) <= width:
        return [line]
    hang = _hang(plain, width)
    lines: list[str] = []
    current, used, spaces, worded = "", 0, "", False
    for token in _TOKEN.split(line):
        if not token:
            continue
        if _TOKEN.fullmatch(token):
            spaces += token
            continue
        size = columns(visible(token))
        if worded and used + len(spaces) + size > width:
            lines.append(current)
            current, used, spaces = " " * hang, hang, ""
        current, used, spaces = current + spaces, used + len(spaces), ""
        if used + size > width:  # wider than a whole line's room: clipped, not broken
            token = _clip(token, width - used)
            size = columns(visible(token))
        current, used, worded = current + token, used + size, True
    lines.append(current)
    return [part.rstrip() for part in lines]


def fold(text: str, width: int) -> str:
    """Every line of ``text`` folded to ``width`` cells (at least 20)."""
    width = max(20, width)
    return "\n".join(part for line in text.split("\n") for part in fold_line(line, width))


def on_terminal(stream: TextIO) -> bool:
    """A terminal that wraps at its last column (not ``TERM=dumb``, which may not)."""
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty and isatty()) and os.environ.get("TERM") != "dumb"
    except ValueError:  # a closed stream
        return False


def fold_for(stream: TextIO, text: str) -> str:
    """``text`` folded at words to the width of the terminal ``stream`` is (never its
    last column, where some terminals wrap); whole lines for a pipe or a file."""
    if not on_terminal(stream):
        return text
    return fold(text, shutil.get_terminal_size().columns - 1)
