"""Cutting a child's output into lines: partial lines held, long ones split.

A line is at most ``MAX_LINE_BYTES`` (split pieces are flagged), bytes are
decoded as UTF-8 with replacement, and a line is never cut inside a character.
What a failing child said last (``LastWords``) is kept from the same batches, bounded.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import UTC, datetime

from sloopd.util import quoting
from sloopd.util.clock import now_ms
from sloopd.util.sizes import format_bytes

log = logging.getLogger(__name__)

MAX_LINE_BYTES = 64 * 1024

# One call per read of a pipe: the stream, its complete lines in order, whether they
# are pieces of a split line.  A batch of many lines costs one call, not one per line.
OnLines = Callable[[str, list[str], bool], None]


class LineSplitter:
    """Turns chunks into lines; a line longer than MAX_LINE_BYTES leaves in split pieces.

    The lines of one chunk leave together, in order, as one batch; a split piece
    leaves on its own (its batch is flagged), after the lines before it.
    """

    def __init__(self, stream: str, on_lines: OnLines) -> None:
        self._stream = stream
        self._on_lines = on_lines
        self._pending = b""
        self._splitting = False  # pieces of the current line were already delivered

    def feed(self, data: bytes) -> None:
        end = data.rfind(b"\n")
        if end >= 0:
            whole = self._pending + data[:end] if self._pending else data[:end]
            self._pending = data[end + 1 :]
            if not self._splitting and len(whole) <= MAX_LINE_BYTES:
                # No line in it can be too long.  Decoding the lines joined equals
                # decoding each: a newline byte ends any invalid UTF-8 sequence.
                self._emit(whole.decode("utf-8", errors="replace").split("\n"), False)
            else:
                self._lines(whole.split(b"\n"))
        else:
            self._pending += data
        while len(self._pending) > MAX_LINE_BYTES:
            cut = _cut(self._pending)
            self._emit_piece(self._pending[:cut])
            self._pending = self._pending[cut:]
            self._splitting = True

    def close(self) -> None:
        if self._pending or self._splitting:
            self._lines([self._pending])
        self._pending = b""

    def _lines(self, lines: list[bytes]) -> None:
        """Lines that may be too long: the short ones batched, the long ones in pieces."""
        batch: list[str] = []
        for line in lines:
            if not self._splitting and len(line) <= MAX_LINE_BYTES:
                batch.append(line.decode("utf-8", errors="replace"))
                continue
            if batch:
                self._emit(batch, False)
                batch = []
            while len(line) > MAX_LINE_BYTES:
                cut = _cut(line)
                self._emit_piece(line[:cut])
                line = line[cut:]
            self._emit_piece(line)
            self._splitting = False
        if batch:
            self._emit(batch, False)

    def _emit_piece(self, piece: bytes) -> None:
        self._emit([piece.decode("utf-8", errors="replace")], True)

    def _emit(self, texts: list[str], split: bool) -> None:
        try:
            self._on_lines(self._stream, texts, split)
        except Exception:  # a broken consumer must not stop the capture
            log.exception("on_lines callback failed for %s", self._stream)


# The quote of a child's last line: at most this many characters of it, escapes removed.
SAID_CHARS = 200
# Of each line, only this many characters are read for it: a 10 MB line costs no more.
SAID_READ_CHARS = 4 * 1024


class LastWords:
    """The last non-empty line of each of a child's streams, quoted in bounded space.

    A stage that failed by its exit code quotes what its child said last
    (``exited with code 1: FAILED: …``): the test's own verdict line, a compiler's
    error.  The child's output is hostile input, so each line is read only up to
    ``SAID_READ_CHARS``, its terminal escapes and controls removed, and kept cut to
    ``SAID_CHARS``; a line that is blank once cleaned does not count.  A line split
    in pieces (longer than ``MAX_LINE_BYTES``) is quoted from its head, where what it
    says starts.  Memory: one short string per stream, whatever the child prints.
    """

    __slots__ = ("_last", "_open")

    def __init__(self) -> None:
        self._last: dict[str, str] = {}
        self._open: set[str] = set()  # streams in the middle of a split line

    def heard(self, stream: str, texts: list[str], split: bool = False) -> None:
        """One batch of ``stream``'s lines (``split``: one piece of a long line)."""
        if split:
            continuing = stream in self._open
            # A full piece leaves its line open; a shorter one was its last.
            if _piece_bytes(texts[-1]) >= MAX_LINE_BYTES - 3:
                self._open.add(stream)
            else:
                self._open.discard(stream)
            if continuing:
                return  # the line's head was heard already
        else:
            self._open.discard(stream)
        for text in reversed(texts):
            line = quoting.without_escapes(text[:SAID_READ_CHARS]).strip()
            if line:
                self._last[stream] = quoting.clip(line, SAID_CHARS)
                return

    def said(self, streams: tuple[str, ...] = ("stderr", "stdout")) -> str | None:
        """The last non-empty line of the first of ``streams`` that printed one:
        stderr first, where a failing program says why."""
        return next((self._last[s] for s in streams if s in self._last), None)

    def clear(self) -> None:
        self._last.clear()
        self._open.clear()


def _piece_bytes(text: str) -> int:
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


def _cut(data: bytes) -> int:
    """Where to cut a long line: at most MAX_LINE_BYTES, not inside a UTF-8 character."""
    cut = MAX_LINE_BYTES
    for _ in range(3):
        if data[cut] & 0xC0 != 0x80:
            return cut
        cut -= 1
    return cut if data[cut] & 0xC0 != 0x80 else MAX_LINE_BYTES


class OutputBudget:
    """How much of one child's output is stored: ``max_lines`` lines, ``max_bytes`` bytes.

    Past either limit nothing more of the child's output is stored (its pipes are
    still drained, so it never blocks on a full pipe, and its lines still count as
    output for the stall clock and classification); what is dropped is counted, with
    when the first and the last dropped line arrived, for the one ``system`` record
    that reports it when the child ends (``summary``).  Bytes are the UTF-8 bytes of
    the lines, without their newlines.
    """

    __slots__ = (
        "dropped_bytes",
        "dropped_lines",
        "first_dropped_ms",
        "last_dropped_ms",
        "max_bytes",
        "max_lines",
        "seen_bytes",
        "stored_bytes",
        "stored_lines",
    )

    def __init__(self, max_lines: int, max_bytes: int) -> None:
        self.max_lines = max_lines
        self.max_bytes = max_bytes
        self.stored_lines = self.stored_bytes = 0
        self.dropped_lines = self.dropped_bytes = 0
        self.seen_bytes = 0
        self.first_dropped_ms: int | None = None
        self.last_dropped_ms: int | None = None

    def admit(self, text: str) -> bool:
        """Count one line; whether it is stored (False once a limit was reached)."""
        size = len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))
        self.seen_bytes += size
        if self.dropped_lines == 0 and (
            self.stored_lines < self.max_lines and self.stored_bytes + size <= self.max_bytes
        ):
            self.stored_lines += 1
            self.stored_bytes += size
            return True
        # Once over, everything after is dropped: one contiguous gap, reported once.
        moment = now_ms()
        if self.first_dropped_ms is None:
            self.first_dropped_ms = moment
        self.last_dropped_ms = moment
        self.dropped_lines += 1
        self.dropped_bytes += size
        return False

    def admit_many(self, texts: list[str]) -> int:
        """Count a batch of lines; how many of them, from the first, are stored.

        The same verdicts as ``admit`` line by line (once over a limit, every line
        after is dropped), at one size computation per batch while it fits.
        """
        joined = "".join(texts)
        size = len(joined) if joined.isascii() else len(joined.encode("utf-8", "surrogatepass"))
        if self.dropped_lines == 0 and (
            self.stored_lines + len(texts) <= self.max_lines
            and self.stored_bytes + size <= self.max_bytes
        ):
            self.seen_bytes += size
            self.stored_lines += len(texts)
            self.stored_bytes += size
            return len(texts)
        admitted = 0
        for text in texts:
            if self.admit(text):
                admitted += 1
        return admitted

    def dropped(self) -> dict[str, int | str] | None:
        """The record's ``dropped`` field, shaped like the store-fault loss records."""
        if not self.dropped_lines:
            return None
        assert self.first_dropped_ms is not None and self.last_dropped_ms is not None
        return {
            "lines": self.dropped_lines,
            "bytes": self.dropped_bytes,
            "from_ms": self.first_dropped_ms,
            "to_ms": self.last_dropped_ms,
            "cause": "limit",
        }

    def summary(self) -> str | None:
        """The system record's text when anything was dropped, else None."""
        if not self.dropped_lines:
            return None
        assert self.first_dropped_ms is not None and self.last_dropped_ms is not None
        return (
            f"output limit reached: {self.dropped_lines} lines "
            f"({_size(self.dropped_bytes)}) not stored, "
            f"printed from {_moment(self.first_dropped_ms)} to {_moment(self.last_dropped_ms)}; "
            f"stored {self.stored_lines} lines ({_size(self.stored_bytes)}) "
            f"(agent.max_log_lines = {self.max_lines}, agent.max_log_bytes = {self.max_bytes})"
        )


def _moment(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds")[:-6] + "Z"


def _size(count: int) -> str:
    return f"{count} bytes" if count < 1024 else f"{format_bytes(count)}, {count} bytes"
