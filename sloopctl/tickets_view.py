"""Tickets in words: the dashboard's and a search's table of tickets, why one waits, and
what the dashboard says when no ticket is open (``sloopctl.render`` lays them out)."""

from __future__ import annotations

from typing import Any, Final

from sloopctl import feedwalk
from sloopctl.layout import Cell, Paint, relative, section, state_cell, text


def waiting_text(waiting: Any, now: int) -> str:
    if not isinstance(waiting, dict):
        return ""
    words = text(waiting.get("reason"))
    if waiting.get("message"):
        words += f": {waiting['message']}"
    return words + ends(waiting.get("until_ms"), now)


def ends(until_ms: Any, now: int) -> str:
    """When a wait or a cooldown is over; nothing once that time has passed."""
    if isinstance(until_ms, int) and until_ms > now:
        return f" (ends {relative(until_ms, now)})"
    return ""


TICKET_HEADERS: Final = ("ID", "NAME", "STATE", "PRIO", "PROJECT", "UPDATED", "WAITING")


def ticket_cells(rows: Any, now: int) -> list[list[Cell]]:
    return [
        [
            text(t.get("id")),
            text(t.get("name")),
            state_cell(t.get("state")),
            text(t.get("priority")),
            text(t.get("project")),
            relative(t.get("updated_at_ms"), now),
            waiting_text(t.get("waiting"), now),
        ]
        for t in feedwalk.rows(rows)
    ]


def tickets_section(rows: Any, now: int, paint: Paint) -> list[str]:
    return section("Tickets", TICKET_HEADERS, ticket_cells(rows, now), paint)


def no_open_tickets(recent: Any) -> str:
    """The dashboard lists the tickets not settled; with none, what settled lately, so a
    merged ticket never reads as "none" (0.8.0's tour did)."""
    latest: dict[str, str] = {}
    for run in feedwalk.rows(recent):  # newest first: a ticket's first run is its latest
        name = text(run.get("alias")).rpartition("#")[0]
        if name:
            latest.setdefault(name, text(run.get("state")))
    if not latest:
        return "none"
    settled = ", ".join(f"{name} {state}" for name, state in latest.items())
    return f"none open; settled lately: {settled} ('sloopctl show NAME' for one)"
