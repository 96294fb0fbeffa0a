"""What waits for a person: a run's ``resolution`` in words, and the dashboard's
Needs attention section (issue 33).

A ``needs_review`` run a person resolved (``sloopctl resolve``, or the daemon when it
found the run's commit on main) keeps its state, as run states are a closed set in
protocol v1; its ``resolution`` says what became of it, and every view reads the run
as resolved: ``merged by hand``, ``dismissed``.  The attention rows come from the
daemon's own list (``attention``: the runs that left their ticket ``failed`` or
``needs_review``), each with what the person can do next; held tickets wait by intent
and are only counted.  Pure functions of the reply, as ``render`` is.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from sloopctl.layout import Cell, Paint, relative, state_cell, table, text

# A resolution as a run's state reads in a table, and its colour.
_RESOLVED: Final = {"merged": ("merged by hand", "green"), "dismissed": ("dismissed", "dim")}


def resolution_of(run: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The run's ``resolution`` when it has a known one, else None."""
    found = run.get("resolution")
    if isinstance(found, Mapping) and found.get("resolution") in _RESOLVED:
        return found
    return None


def resolution_words(resolution: Mapping[str, Any], now: int | None = None) -> str:
    """``merged by hand (by alice, 2m ago): landed with #42``; ``merged by hand (found
    on main)`` when the daemon resolved it; ``dismissed (by alice): superseded``."""
    words = _RESOLVED[str(resolution.get("resolution"))][0]
    who = []
    if resolution.get("auto") is True:
        who.append("found on main")
    elif resolution.get("by"):
        who.append(f"by {text(resolution['by'])}")
    if now is not None and isinstance(resolution.get("at_ms"), int):
        who.append(relative(resolution["at_ms"], now))
    words += f" ({', '.join(who)})" if who else ""
    reason = resolution.get("reason")
    return words + (f": {text(reason)}" if reason else "")


def run_state_cell(run: Mapping[str, Any], suffix: str = "") -> Cell:
    """A run's state for a table: a resolved run reads as what a person made of it."""
    resolution = resolution_of(run)
    if resolution is None:
        return state_cell(run.get("state"), suffix)
    words, style = _RESOLVED[str(resolution.get("resolution"))]
    return (words + suffix, style)


def what_next(run: Mapping[str, Any]) -> list[str]:
    """The commands a person can run about a run that needs attention: resolve a
    needs_review run, or run its ticket again (by id: it resolves whatever the name)."""
    again = f"sloopctl run {text(run.get('ticket'))}"
    if run.get("state") == "needs_review" and resolution_of(run) is None:
        return [f"sloopctl resolve {text(run.get('id'))} --merged|--dismissed", again]
    return [again]


def attention_section(data: Mapping[str, Any], now: int, paint: Paint) -> list[str]:
    """``Needs attention (N)``: a row per run that left its ticket failed or
    needs_review, with why, and under it what the person can do next; then how many
    tickets are held, counted apart (they wait by intent).

    Nothing at all from a daemon that sends no ``attention`` (older than 0.8.0)."""
    if "attention" not in data:
        return []
    listed = [r for r in data.get("attention") or [] if isinstance(r, dict)]
    # The daemon leaves resolved runs out; one it still sent waits for nobody either.
    runs = [r for r in listed if resolution_of(r) is None]
    total = data.get("attention_total")
    total = total - (len(listed) - len(runs)) if isinstance(total, int) else 0
    count = max(total, len(runs))
    title = f"Needs attention ({count})" if count else "Needs attention"
    if count > len(runs):
        title += f": the newest {len(runs)} shown"
    out = ["", paint(title, "bold") + ("" if runs else ": nothing needs a person now")]
    if runs:
        cells: list[list[Cell]] = [
            [
                text(r.get("id")),
                text(r.get("alias")),
                run_state_cell(r),
                relative(r.get("finished_at_ms"), now),
                text(r.get("reason")) if r.get("reason") else "",
            ]
            for r in runs
        ]
        lines = table(["ID", "ALIAS", "STATE", "FINISHED", "REASON"], cells, paint)
        out.append(lines[0])
        for line, run in zip(lines[1:], runs, strict=True):
            out += [line, paint("  next: " + " · ".join(what_next(run)), "dim")]
    held = held_count(data.get("tickets"))
    if held:
        noun = "ticket" if held == 1 else "tickets"
        out.append(f"{held} {noun} held, waiting by intent (sloopctl ready TICKET releases one)")
    return out


def held_count(tickets: Any) -> int:
    rows = tickets if isinstance(tickets, list) else []
    return sum(1 for t in rows if isinstance(t, dict) and t.get("state") == "held")
