"""``show --follow``'s stage transitions on standard error, off the live view.

When standard output is no live terminal (a pipe, a file, ``TERM=dumb``), the follower
prints each change of the run here: one line per change, or, when only standard error
is a terminal, one progress line redrawn in place.  Pure functions of two views of a run,
and the small writer ``Progress``; ``sloopctl.follow`` drives them.
"""

from __future__ import annotations

import io
import os
import shutil
import sys
from collections.abc import Mapping
from typing import Any, TextIO

from sloopctl.layout import text
from sloopctl.polling import rows
from sloopctl.queue_view import place_brief, place_change
from sloopctl.render import stages_summary
from sloopctl.stages_view import stage_state


def progress_line(run: Mapping[str, Any]) -> str:
    """The one-line live view: ``R3 running · implement✓ test▶ sync· merge·``."""
    stall = " (stalled)" if run.get("stall") else ""
    stages = stages_summary(run.get("stages"))
    return (
        f"{text(run.get('id'))} {text(run.get('state'))}{stall}"
        + (f" · {stages}" if stages else "")
        + place_brief(run.get("queue"))
    )


StageKey = tuple[str, int]


def stage_states(run: Mapping[str, Any]) -> dict[StageKey, dict[str, Any]]:
    """Stage executions by (stage, attempt); rows the walk has not reached are left out."""
    found = {}
    for row in rows(run.get("stages")):
        attempt = row.get("attempt")
        if row.get("state") != "pending" and isinstance(attempt, int) and attempt > 0:
            found[(text(row.get("stage")), attempt)] = row
    return found


def transitions(before: Mapping[str, Any] | None, after: Mapping[str, Any]) -> list[str]:
    """One line per change between two views of a run: its state, then each stage execution."""
    run_id = text(after.get("id"))
    lines = []
    if before is None or before.get("state") != after.get("state"):
        lines.append(f"{run_id} {text(after.get('state'))}")
    old = stage_states(before or {})
    for (stage, attempt), row in stage_states(after).items():
        previous = old.get((stage, attempt))
        if previous is not None and stage_state(previous) == stage_state(row):
            continue
        word = stage_state(row)
        line = f"{run_id} {stage}#{attempt} {word}"
        if row.get("state") == "failed" and row.get("reason"):
            reason = text(row["reason"])
            # "test#1 rebuilt: R5 left the queue", not "rebuilt: rebuilt: R5 left ...".
            line += f": {reason.removeprefix(f'{word}: ')}"
        lines.append(line)
    lines += place_change(before, after)  # its place in the merge queue (0.9)
    # The run's settling comes after its last stage's.
    if lines and after.get("terminal") is True and lines[0] == f"{run_id} {after.get('state')}":
        lines.append(lines.pop(0))
    return lines


class Progress:
    """Stage transitions on stderr: redrawn in place on a terminal, else one line each."""

    def __init__(self, stream: TextIO, live: bool, echoed: bool = False) -> None:
        self.stream = stream
        self.live = live
        # Standard output is this same file (one terminal, ``2>&1``): the outcome line
        # printed there says how the run settled, so its transition is left out here.
        self.echoed = echoed
        self.drawn = ""
        self.seen: Mapping[str, Any] | None = None

    @classmethod
    def for_stderr(cls) -> Progress:
        return cls(sys.stderr, live_terminal(sys.stderr), same_file(sys.stdout, sys.stderr))

    def show(self, run: Mapping[str, Any]) -> None:
        if self.live:
            width = max(20, shutil.get_terminal_size().columns - 1)
            line = progress_line(run)[:width]
            if line != self.drawn:
                self.stream.write("\r\x1b[K" + line)
                self.stream.flush()
                self.drawn = line
        else:
            lines = transitions(self.seen, run)
            settling = f"{text(run.get('id'))} {text(run.get('state'))}"
            if self.echoed and run.get("terminal") is True and lines and lines[-1] == settling:
                lines.pop()  # the outcome line on stdout says it, on the same screen
            for line in lines:
                self.stream.write(line + "\n")
            self.stream.flush()
        self.seen = run

    def say(self, line: str) -> None:
        self.clear()
        self.stream.write(line + "\n")
        self.stream.flush()

    def clear(self) -> None:
        if self.live and self.drawn:
            self.stream.write("\r\x1b[K")
            self.stream.flush()
            self.drawn = ""


def same_file(one: TextIO, other: TextIO) -> bool:
    """Whether two streams write to the same file: one terminal, or ``2>&1``."""
    try:
        return os.path.samestat(os.fstat(one.fileno()), os.fstat(other.fileno()))
    except (OSError, ValueError, AttributeError, io.UnsupportedOperation):
        return False


def live_terminal(stream: TextIO) -> bool:
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty()) and os.environ.get("TERM") != "dumb"
