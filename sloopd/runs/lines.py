"""Cutting a child's output into lines: partial lines held, long ones split.

A line is at most ``MAX_LINE_BYTES`` (split pieces are flagged), bytes are
decoded as UTF-8 with replacement, and a line is never cut inside a character.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

log = logging.getLogger(__name__)

MAX_LINE_BYTES = 64 * 1024

OnLine = Callable[[str, str, bool], None]


class LineSplitter:
    """Turns chunks into lines; a line longer than MAX_LINE_BYTES leaves in split pieces."""

    def __init__(self, stream: str, on_line: OnLine) -> None:
        self._stream = stream
        self._on_line = on_line
        self._pending = b""
        self._splitting = False  # pieces of the current line were already delivered

    def feed(self, data: bytes) -> None:
        parts = data.split(b"\n")
        parts[0] = self._pending + parts[0]
        self._pending = parts.pop()
        for line in parts:
            self._line(line)
        while len(self._pending) > MAX_LINE_BYTES:
            cut = _cut(self._pending)
            self._emit(self._pending[:cut], True)
            self._pending = self._pending[cut:]
            self._splitting = True

    def close(self) -> None:
        if self._pending or self._splitting:
            self._line(self._pending)
        self._pending = b""

    def _line(self, line: bytes) -> None:
        if not self._splitting and len(line) <= MAX_LINE_BYTES:
            self._emit(line, False)
            return
        while len(line) > MAX_LINE_BYTES:
            cut = _cut(line)
            self._emit(line[:cut], True)
            line = line[cut:]
        self._emit(line, True)
        self._splitting = False

    def _emit(self, piece: bytes, split: bool) -> None:
        try:
            self._on_line(self._stream, piece.decode("utf-8", errors="replace"), split)
        except Exception:  # a broken consumer must not stop the capture
            log.exception("on_line callback failed for %s", self._stream)


def _cut(data: bytes) -> int:
    """Where to cut a long line: at most MAX_LINE_BYTES, not inside a UTF-8 character."""
    cut = MAX_LINE_BYTES
    for _ in range(3):
        if data[cut] & 0xC0 != 0x80:
            return cut
        cut -= 1
    return cut if data[cut] & 0xC0 != 0x80 else MAX_LINE_BYTES
