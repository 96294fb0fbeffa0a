"""The bounded tail of a child's output that classification reads.

A failed agent is classified from the end of its output (the last matching
line wins), so nothing before the end is worth keeping.  The tail is bounded
when it is collected, so a child that prints gigabytes, or 64 KiB lines, costs
the daemon at most ``TAIL_CHARS`` characters per stage and classification at
most that much work: lines beyond ``TAIL_LINES``, and the oldest lines beyond
``TAIL_CHARS`` in all, are dropped; a line longer than ``LINE_CHARS`` keeps its
head and its end (a stream-JSON envelope starts with its type and may end with
the error), joined by an ellipsis.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator
from typing import Final

TAIL_LINES: Final = 500
TAIL_CHARS: Final = 256 * 1024
LINE_CHARS: Final = 16 * 1024
_HALF: Final = LINE_CHARS // 2
_JOIN: Final = " \u2026 "


def clip(line: str) -> str:
    """At most about ``LINE_CHARS`` characters of ``line``: its head and its end."""
    if len(line) <= LINE_CHARS:
        return line
    return line[:_HALF] + _JOIN + line[-_HALF:]


class OutputTail:
    """The last lines of an output, at most TAIL_LINES lines and TAIL_CHARS characters."""

    __slots__ = ("_chars", "_lines", "max_chars")

    def __init__(self, max_lines: int = TAIL_LINES, max_chars: int = TAIL_CHARS) -> None:
        self._lines: deque[str] = deque(maxlen=max_lines)
        self._chars = 0
        self.max_chars = max_chars

    def append(self, line: str) -> None:
        line = clip(line)
        lines = self._lines
        if len(lines) == lines.maxlen:
            self._chars -= len(lines[0])  # the deque drops it on append
        lines.append(line)
        self._chars += len(line)
        while self._chars > self.max_chars and len(lines) > 1:
            self._chars -= len(lines.popleft())

    def extend(self, lines: Iterable[str]) -> None:
        """``append`` of each line, in one pass: the tail is the longest suffix within
        both bounds, so only the last ``max_lines`` lines can be in it."""
        kept = self._lines
        limit = kept.maxlen or 0
        batch = [line if len(line) <= LINE_CHARS else clip(line) for line in lines][-limit:]
        overflow = len(kept) + len(batch) - limit
        for _ in range(max(overflow, 0)):
            self._chars -= len(kept.popleft())
        kept.extend(batch)
        self._chars += sum(map(len, batch))
        while self._chars > self.max_chars and len(kept) > 1:
            self._chars -= len(kept.popleft())

    def clear(self) -> None:
        self._lines.clear()
        self._chars = 0

    @property
    def chars(self) -> int:
        return self._chars

    def __len__(self) -> int:
        return len(self._lines)

    def __iter__(self) -> Iterator[str]:
        return iter(self._lines)


def bounded(lines: Iterable[str]) -> OutputTail:
    """``lines`` as an OutputTail (itself when it already is one)."""
    if isinstance(lines, OutputTail):
        return lines
    tail = OutputTail()
    tail.extend(lines)
    return tail
