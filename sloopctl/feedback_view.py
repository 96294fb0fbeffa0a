"""``sloopctl brief``'s ``feedback`` (issue 33) as an agent or a person reads it.

``feedback`` lists, oldest first, the executions that sent this stage back (or the
previous run of the ticket that failed or ended ``needs_review``): the stage, its reason,
the last lines of its output, a panel's seats, a sync conflict's paths, and the
merge-queue candidate a gate ran on.  The output is another program's text, so it is
printed as data: each line behind a ``│`` rule, under a label naming the execution
that printed it, never mixed into the words around it.  The strings were cleaned of
terminal control sequences by the client (unless ``--raw``).  Pure, as ``render`` is.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from sloopctl.layout import Paint, text
from sloopctl.queue_view import short

HEADING: Final = "What happened since your last execution"
RULE: Final = "  │ "


def _rows(value: Any) -> list[dict[str, Any]]:
    return [r for r in value if isinstance(r, dict)] if isinstance(value, list) else []


def _execution(entry: Mapping[str, Any]) -> str:
    stage = text(entry.get("stage"))
    attempt = entry.get("attempt")
    return f"{stage}#{attempt}" if isinstance(attempt, int) and attempt > 0 else stage


def entry_head(entry: Mapping[str, Any]) -> str:
    """``test#2 of R7 failed: exited with code 1: FAILED: …``, by the entry's kind."""
    where = f"{_execution(entry)} of {text(entry.get('run'))}"
    kind = entry.get("kind")
    head = {
        "failed": f"{where} failed",
        "panel": f"{where}, a panel, failed",
        "conflict": f"{where} met a conflict",
        "previous_run": f"the previous run, {text(entry.get('run'))}"
        + (f", ended at {_execution(entry)}" if entry.get("stage") else ""),
    }.get(str(kind), f"{where} ({text(kind)})")
    reason = entry.get("reason")
    return head + (f": {text(reason)}" if reason else "")


def output_lines(output: Any) -> list[str]:
    """The execution's last lines, each behind the rule, under a label saying how many."""
    if not isinstance(output, Mapping):
        return []
    lines = [text(line) for line in output.get("lines") or []]
    if not lines:
        return ["  it printed nothing"]
    left_out = output.get("omitted_lines")
    label = f"  its output, the last {len(lines)} line{'s' if len(lines) != 1 else ''}"
    if isinstance(left_out, int) and left_out > 0:
        label += f" ({left_out} earlier left out)"
    if output.get("clipped") is True:
        label += ", cut to size"
    return [label + ":", *(RULE + line for line in lines)]


def seat_lines(seats: Any) -> list[str]:
    """``  seat 1 (codex): fail: answer.txt must say …``, numbered as ``show`` does."""
    out = []
    for seat in _rows(seats):
        target = f" ({text(seat.get('target'))})" if seat.get("target") else ""
        verdict = text(seat.get("verdict")) if seat.get("verdict") is not None else "no verdict"
        reason = f": {text(seat.get('reason'))}" if seat.get("reason") else ""
        out.append(f"  seat {text(seat.get('reviewer'))}{target}: {verdict}{reason}")
    return out


def candidate_line(candidate: Any) -> list[str]:
    """Where a merge-queue gate ran: other runs' work was in that checkout too."""
    if not isinstance(candidate, Mapping):
        return []
    onto = [text(run) for run in candidate.get("onto") or []]
    built = " + ".join(["main", *onto])
    line = f"  it ran on the merge queue's candidate {short(candidate.get('commit'))} ({built})"
    if onto:
        line += f": part of its output may come from the work of {', '.join(onto)}"
    return [line]


def feedback_section(feedback: Any, paint: Paint) -> list[str]:
    """The brief's feedback under its heading; nothing when there is none."""
    entries = _rows(feedback)
    if not entries:
        return []
    out = ["", paint(f"{HEADING} ({len(entries)})", "bold")]
    for entry in entries:
        out.append(paint(entry_head(entry), "bold"))
        out += seat_lines(entry.get("seats"))
        paths = [text(p) for p in entry.get("paths") or []]
        if paths:
            out.append(f"  conflicting paths: {', '.join(paths)}")
        out += candidate_line(entry.get("candidate"))
        out += output_lines(entry.get("output"))
    return out
