"""``show --follow`` on a terminal: the run's stages redrawn in place, like ``gh run watch``.

When standard output is a terminal (and ``TERM`` is not ``dumb``), the follower
draws a frame on it: the run's name, state and time so far, one line per stage
execution with its state, duration and exit code or reason, and the last lines
the running stage printed.  Each new frame is drawn over the last one (cursor
up, line by line, clearing what the old frame left), clipped to the terminal's
width so no line wraps and to its height so the cursor can always get back to
the top.  The last frame stays on screen, followed by the outcome line.

Every string drawn is cleaned by ``sloopctl.safe_text`` here, even under
``--raw``: an agent's escape sequence in a log line could otherwise move the
cursor and break the frame, or do worse (docs/security.md "Terminal safety").

Everything but ``LiveTable.redraw`` is a pure function of the reply and the
clock, tested without a terminal; tests/integration/test_follow_tty.py runs the
real thing under a pseudo-terminal.
"""

from __future__ import annotations

import shutil
import unicodedata
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final, TextIO

from sloopctl.layout import STATE_STYLE, Paint, colour_enabled, painter, span, text
from sloopctl.queue_view import place_line
from sloopctl.safe_text import clean
from sloopctl.stages_view import NOT_REACHED, stage_state

# How many of the running stage's last output lines the frame shows.
OUTPUT_LINES: Final = 6
_MARKS: Final = {
    "passed": "✓",
    "failed": "✗",
    "running": "▶",
    "pending": "·",
    NOT_REACHED: "-",
    "pass": "✓",
    "fail": "✗",
    "aborted": "■",
    "interrupted": "■",
    "rebuilt": "↻",
}
# A panel seat's verdict as a stage state, for its colour.
_SEAT_STYLE: Final = {"pass": STATE_STYLE["passed"], "fail": STATE_STYLE["failed"]}
_HIDE_CURSOR, _SHOW_CURSOR = "\x1b[?25l", "\x1b[?25h"
Segment = tuple[str, str]  # text, style name ("" for none)
Size = Callable[[], tuple[int, int]]  # (columns, lines)


def columns(value: str) -> int:
    """The terminal cells ``value`` takes: wide characters two, combining marks none."""
    return sum(_cells(ch) for ch in value)


def _cells(ch: str) -> int:
    if unicodedata.combining(ch) or ch == "\u200b":
        return 0
    return 2 if unicodedata.east_asian_width(ch) in ("W", "F") else 1


def fit(segments: Sequence[Segment], width: int, paint: Paint) -> str:
    """The segments painted, clipped to ``width`` cells (an ellipsis marks a cut),
    without trailing blanks."""
    segments = [(words, style) for words, style in segments if words]
    while segments and not segments[-1][0].rstrip():
        segments.pop()
    if segments:
        segments[-1] = (segments[-1][0].rstrip(), segments[-1][1])
    out, used = [], 0
    for words, style in segments:
        room = width - used
        size = columns(words)
        if size > room:
            cut, taken = [], 0
            for ch in words:
                if taken + _cells(ch) > room - 1:
                    break
                cut.append(ch)
                taken += _cells(ch)
            out.append(paint("".join(cut) + "…", style))
            return "".join(out)
        out.append(paint(words, style) if style else words)
        used += size
    return "".join(out)


def _safe(value: Any) -> str:
    """One line of text from a reply: cleaned, tabs and newlines flattened."""
    return clean(text(value)).replace("\t", "    ").replace("\n", " ⏎ ")


def _ms(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def elapsed(row: Mapping[str, Any], now: int) -> str:
    """A stage's or run's time so far: its duration once ended, else since it started."""
    duration = _ms(row.get("duration_ms"))
    if duration is not None:
        return span(duration)
    started = _ms(row.get("started_at_ms"))
    if started is None:
        return ""
    finished = _ms(row.get("finished_at_ms"))
    return span((finished if finished is not None else now) - started)


def stage_line(row: Mapping[str, Any], name_width: int, now: int) -> list[Segment]:
    """``  ✓ implement#1   passed      45s  exit 0``: mark, name, state, time, detail."""
    state = stage_state(row)
    attempt = _ms(row.get("attempt")) or 0
    name = _safe(row.get("stage")) + (f"#{attempt}" if attempt > 0 else "")
    took = elapsed(row, now) if state not in ("pending", NOT_REACHED) else ""
    detail = []
    if isinstance(row.get("exit_code"), int):
        detail.append(f"exit {row['exit_code']}")
    if row.get("advisory"):
        detail.append("advisory")
    if row.get("reason"):
        detail.append(_safe(row["reason"]))
    style = STATE_STYLE.get(state, "dim" if state == NOT_REACHED else "")
    line: list[Segment] = [
        (f"  {_MARKS.get(state, '?')} ", style),
        (name.ljust(name_width) + "  ", ""),
        (state.ljust(8), style),
        (f"  {took:>6}" if took else "", ""),
    ]
    return line + ([("  " + "  ".join(detail), "dim")] if detail else [])


def wrap_words(words: str, first: int, rest: int) -> list[str]:
    """``words`` in lines of at most ``first`` cells, then ``rest``, broken at spaces; a
    word wider than a line gets a line of its own (``fit`` clips it)."""
    lines: list[str] = []
    current, used, room = "", 0, max(1, first)
    for word in words.split():
        size = columns(word)
        if current and used + 1 + size > room:
            lines.append(current)
            current, used, room = "", 0, max(1, rest)
        current, used = (f"{current} {word}", used + 1 + size) if current else (word, size)
    return [*lines, current] if current else lines


def seat_lines(row: Mapping[str, Any], width: int | None = None) -> list[list[Segment]]:
    """A panel's seats under its row: ``      ✗ seat 1 codex  fail  low  missing tests``,
    so the reader sees which seat failed the stage and why (a seat still sitting reads
    ``waiting``).  Seats are numbered as ``show`` numbers them (``reviewer``).  Given the
    frame's ``width``, a long reason is folded at words under its first word, not cut:
    it is the cause a person reads."""
    seats = [r for r in row.get("reviewers") or [] if isinstance(r, dict)]
    lines = []
    for seat in seats:
        verdict = text(seat.get("verdict")) if seat.get("verdict") is not None else "waiting"
        style = _SEAT_STYLE.get(verdict, "")
        target = f" {_safe(seat.get('target'))}" if seat.get("target") else ""
        line: list[Segment] = [
            (f"      {_MARKS.get(verdict, '▶')} ", style),
            (f"seat {_safe(seat.get('reviewer'))}{target}  ", ""),
            (verdict, style),
        ]
        if seat.get("confidence"):
            line.append((f"  {_safe(seat['confidence'])}", ""))
        reason = _safe(seat["reason"]) if seat.get("reason") else ""
        if reason and width is not None:
            start = sum(columns(words) for words, _ in line) + 2
            hang = start if start <= width // 2 else 10  # the reason needs room
            first, *more = wrap_words(reason, width - start, width - hang) or [""]
            line.append((f"  {first}", "dim"))
            lines += [line, *([(" " * hang + part, "dim")] for part in more)]
            continue
        if reason:
            line.append((f"  {reason}", "dim"))
        lines.append(line)
    return lines


def frame(
    run: Mapping[str, Any],
    output: Sequence[str],
    output_of: str | None,
    now: int,
    width: int | None = None,
) -> list[list[Segment]]:
    """The lines of one frame, as segments (``LiveTable`` clips and paints them); with
    the ``width`` it is drawn at, a seat's reason is folded to it instead."""
    state = text(run.get("state"))
    head: list[Segment] = [
        (_safe(run.get("alias") or run.get("id")), "bold"),
        (f"  {_safe(run.get('id'))}  ", "dim"),
        (state, STATE_STYLE.get(state, "")),
        ("  (stalled)" if run.get("stall") else "", "yellow"),
    ]
    took = elapsed(run, now)
    if took:
        head.append((f"  {took}", "dim"))
    stages = [r for r in run.get("stages") or [] if isinstance(r, dict)]
    name_width = max([len(_safe(r.get("stage"))) + 4 for r in stages] + [8])
    lines = [head]
    place = place_line(run.get("queue"), stages=stages)
    if place:  # its place in the merge queue (0.9), under the run's name
        lines.append([(f"  {_safe(place)}", "cyan")])
    for row in stages:
        lines += [stage_line(row, name_width, now), *seat_lines(row, width)]
    if output_of is not None and output:
        lines.append([("", "")])
        lines.append([(f"  {output_of} output:", "dim")])
        lines += [[("    " + _safe(line), "")] for line in output]
    return lines


class OutputTail:
    """The last lines of one stage execution's output, read through ``logs``."""

    def __init__(self, keep: int = OUTPUT_LINES) -> None:
        self.key: str | None = None
        self.cursor: str | None = None
        self.lines: deque[str] = deque(maxlen=keep)

    def request(self, run: Mapping[str, Any]) -> dict[str, Any] | None:
        """The ``logs`` arguments for the running execution's news; None when none runs."""
        running = [
            r
            for r in run.get("stages") or []
            if isinstance(r, dict) and r.get("state") == "running"
        ]
        if not running or not isinstance(run.get("id"), str):
            return None
        row = running[-1]
        key = f"{text(row.get('stage'))}#{text(row.get('attempt'))}"
        if key != self.key:
            self.key, self.cursor = key, None
            self.lines.clear()
        args: dict[str, Any] = {"run": run["id"], "stage": key}
        if self.cursor is None:
            args["tail"] = self.lines.maxlen or OUTPUT_LINES
        else:
            args["after"] = self.cursor
        return args

    def take(self, page: Any) -> bool:
        """Add a ``logs`` page; whether it held anything new."""
        if not isinstance(page, dict):
            return False
        records = [r for r in page.get("records") or [] if isinstance(r, dict)]
        for record in records:
            if record.get("stream") != "system":
                self.lines.append(text(record.get("text")))
        # Far behind (more than a page came): jump to the newest lines next time.
        caught_up = page.get("complete") is not False
        cursor = page.get("next_cursor")
        self.cursor = cursor if isinstance(cursor, str) and caught_up else None
        return bool(records)


def terminal_size() -> tuple[int, int]:
    size = shutil.get_terminal_size()
    return size.columns, size.lines


class LiveTable:
    """The frame on standard output, redrawn in place; the follower's ``progress``."""

    def __init__(self, stream: TextIO, colour: bool, size: Size = terminal_size) -> None:
        self.stream = stream
        self.paint = painter(colour)
        self.size = size
        self.tail = OutputTail()
        self.drawn = 0  # lines of the current frame on screen, the cursor below them
        self.last: list[str] = []
        self.run: Mapping[str, Any] | None = None
        self.clock: Callable[[], int] | None = None

    @classmethod
    def for_stdout(cls, stream: TextIO, now: Callable[[], int]) -> LiveTable:
        table = cls(stream, colour_enabled(stream))
        table.clock = now
        return table

    def show(self, run: Mapping[str, Any]) -> None:
        self.run = run
        output_of = self.tail.key if self.tail.lines else None
        if run.get("terminal") is True and run.get("state") == "merged":
            output_of = None  # a clean final table; a failure keeps its last words
        now = self.clock() if self.clock is not None else 0
        width = max(20, self.size()[0] - 1)  # as redraw clips
        self.redraw(frame(run, list(self.tail.lines), output_of, now, width))

    def say(self, line: str) -> None:
        self.redraw([[(_safe(line), "")]])

    def clear(self) -> None:
        """Stop owning the screen: the frame stays, the cursor comes back."""
        if self.drawn:
            self.stream.write(_SHOW_CURSOR)
            self.stream.flush()
        self.drawn, self.last = 0, []

    def redraw(self, lines: list[list[Segment]]) -> None:
        width, height = self.size()
        width = max(20, width - 1)  # never the last column: some terminals wrap there
        shown = [fit(line, width, self.paint) for line in lines][-max(1, height - 1) :]
        if shown == self.last:
            return
        # Back to the frame's first line: carriage return, cursor up (CUU) that many.
        out = [_HIDE_CURSOR if not self.drawn else f"\r\x1b[{self.drawn}A"]
        out += [line + "\x1b[K\n" for line in shown]
        out.append("\x1b[J")  # whatever a longer frame left below
        self.stream.write("".join(out))
        self.stream.flush()
        self.drawn, self.last = len(shown), shown
