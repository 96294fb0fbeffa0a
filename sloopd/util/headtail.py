"""A stream kept in bounded space as it is read: its first part, its last part, and
a count of what was dropped between them.

Whatever a tool prints, the daemon holds at most ``head + 2 * tail`` bytes of it
while it reads (the tail is trimmed once it holds twice its share, so a byte is
moved at most once), never the whole stream: an agent's repository can make a git
print one line per entry of a 96 MiB ``objects/info/alternates``, and on 0.8.0 the
daemon kept all of it (issue 34).  Both ends are kept because both say something:
the first lines are what went wrong first, the last what the tool said as it gave
up.  What was dropped is counted in bytes and lines and named where it was::

    error: unable to normalize alternate object path: /missing-000000/…
    … 96.0 MiB (25,222 lines) omitted …
    fatal: could not read from remote repository.

Imports nothing of ``sloopd`` but ``util.sizes``.
"""

from __future__ import annotations

from typing import Final

from sloopd.util.sizes import format_bytes

# What a tool's standard error keeps of each end: it is for a person.
STDERR_HEAD: Final = 64 * 1024
STDERR_TAIL: Final = 64 * 1024


def omission(dropped: int, lines: int) -> str:
    """The line that stands for what was dropped: ``… 96.0 MiB (25,222 lines) omitted …``."""
    counted = f" ({lines:,} line{'' if lines == 1 else 's'})" if lines else ""
    return f"… {format_bytes(dropped)}{counted} omitted …"


class HeadTail:
    """The first ``head`` and the last ``tail`` bytes of a stream fed to ``add``."""

    def __init__(self, head: int = STDERR_HEAD, tail: int = STDERR_TAIL) -> None:
        self._head_limit = head
        self._tail_limit = tail
        self.head = bytearray()
        self._tail = bytearray()
        self.dropped = 0  # bytes between the head and the tail
        self.dropped_lines = 0  # line ends among them

    def add(self, chunk: bytes) -> None:
        room = self._head_limit - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        if not chunk:
            return
        self._tail += chunk
        if len(self._tail) > 2 * self._tail_limit:
            self._drop(len(self._tail) - self._tail_limit)

    def _drop(self, count: int) -> None:
        self.dropped += count
        self.dropped_lines += self._tail.count(b"\n", 0, count)
        del self._tail[:count]

    @property
    def tail(self) -> bytes:
        if len(self._tail) > self._tail_limit:
            self._drop(len(self._tail) - self._tail_limit)
        return bytes(self._tail)

    def __len__(self) -> int:
        """The bytes the stream held in all, dropped ones included."""
        return len(self.head) + self.dropped + len(self._tail)

    def value(self) -> bytes:
        """The stream as kept: whole when nothing was dropped, else the head, a line
        naming what was dropped, and the tail."""
        tail = self.tail
        if not self.dropped:
            return bytes(self.head) + tail
        head = bytes(self.head)
        before = "" if head.endswith(b"\n") else "\n"
        after = "" if tail.startswith(b"\n") else "\n"
        marker = f"{before}{omission(self.dropped, self.dropped_lines)}{after}"
        return head + marker.encode() + tail

    def text(self) -> str:
        return self.value().decode(errors="replace")
