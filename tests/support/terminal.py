"""A program under a pseudo-terminal, and the few escape sequences a redraw uses, replayed.

``Screen`` plays back what a program wrote to a terminal: text, ``\\r``, ``\\n``,
cursor up (CSI n A, CSI n F), erase to the end of the line (CSI K) and below
(CSI J), colours (SGR, ignored) and cursor visibility; any other sequence fails
the test, since the live view must not send what it was not meant to.  A line longer than the
screen wraps, and ``wrapped`` says where.  ``run_in_pty``
starts a command with its standard output and error on a pseudo-terminal of a
given size and collects every byte until it exits.
"""

from __future__ import annotations

import fcntl
import os
import re
import select
import struct
import subprocess
import termios
import time
from collections.abc import Callable
from dataclasses import dataclass, field

_SEQUENCE = re.compile(rb"\x1b\[(\??)([0-9;]*)([A-Za-z])")


@dataclass
class Screen:
    columns: int = 100
    lines: list[str] = field(default_factory=lambda: [""])
    row: int = 0
    col: int = 0
    ups: int = 0  # cursor-up moves seen: the frame was redrawn in place
    wrapped: list[int] = field(default_factory=list)  # rows a too-long line wrapped from

    def feed(self, data: bytes) -> None:
        position = 0
        while position < len(data):
            if data[position : position + 1] == b"\x1b":
                match = _SEQUENCE.match(data, position)
                assert match, f"unexpected escape at {data[position : position + 20]!r}"
                self._sequence(match.group(1), match.group(2).decode(), match.group(3).decode())
                position = match.end()
                continue
            end = position
            while end < len(data) and data[end : end + 1] not in (b"\x1b", b"\r", b"\n"):
                end += 1
            if end == position:
                self._control(data[position : position + 1])
                position += 1
                continue
            self._text(data[position:end].decode("utf-8", errors="replace"))
            position = end

    def _control(self, byte: bytes) -> None:
        if byte == b"\r":
            self.col = 0
        elif byte == b"\n":
            self.row += 1
            self.col = 0  # the pty's onlcr turns \n into \r\n
            while len(self.lines) <= self.row:
                self.lines.append("")

    def _text(self, words: str) -> None:
        while words:
            if self.col >= self.columns:  # autowrap, as a terminal does
                self.wrapped.append(self.row)
                self._control(b"\n")
            room = self.columns - self.col
            part, words = words[:room], words[room:]
            line = self.lines[self.row].ljust(self.col)
            self.lines[self.row] = line[: self.col] + part + line[self.col + len(part) :]
            self.col += len(part)

    def _sequence(self, private: bytes, params: str, final: str) -> None:
        if private:
            assert params == "25", (params, final)
            assert final in "hl", (params, final)  # cursor shown/hidden
            return
        count = int(params or "1") if final in "AF" else 0
        if final == "m":
            return
        if final in "AF":
            self.ups += 1
            self.row = max(0, self.row - count)
            if final == "F":
                self.col = 0
        elif final == "K":
            self.lines[self.row] = self.lines[self.row][: self.col]
        elif final == "J":
            self.lines[self.row] = self.lines[self.row][: self.col]
            del self.lines[self.row + 1 :]
        else:
            raise AssertionError(f"unexpected sequence CSI {params}{final}")

    def text(self) -> list[str]:
        """The screen's lines, trailing blanks dropped."""
        shown = [line.rstrip() for line in self.lines]
        while shown and not shown[-1]:
            shown.pop()
        return shown


@dataclass
class PtyRun:
    code: int
    output: bytes


def run_in_pty(
    argv: list[str],
    env: dict[str, str],
    *,
    columns: int = 100,
    rows: int = 40,
    timeout: float = 60.0,
    until: Callable[[bytes], bool] | None = None,
    then: Callable[[], None] | None = None,
) -> PtyRun:
    """Run ``argv`` with stdout and stderr on a pty; once ``until(output so far)`` holds,
    call ``then`` (once).  Every byte written, and the exit code."""
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))
    process = subprocess.Popen(
        argv, stdin=subprocess.DEVNULL, stdout=slave, stderr=slave, env=env, close_fds=True
    )
    os.close(slave)
    output = b""
    deadline = time.monotonic() + timeout
    try:
        while True:
            left = deadline - time.monotonic()
            assert left > 0, f"no exit in time; output so far: {output[-2000:]!r}"
            ready, _, _ = select.select([master], [], [], min(left, 0.2))
            if ready:
                try:
                    chunk = os.read(master, 65536)
                except OSError:  # EIO: the program exited and closed the pty
                    chunk = b""
                if not chunk:
                    break
                output += chunk
            if then is not None and until is not None and until(output):
                then()
                then = None
            if not ready and process.poll() is not None:
                break
        return PtyRun(process.wait(timeout=10), output)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        os.close(master)
