"""A run's stages as a table: one row per execution, a panel's seats below it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from sloopctl.layout import Cell, Paint, relative, section, span, state_cell, table, text
from sloopctl.queue_view import ended_by
from sloopctl.usage_text import usage_text


def _rows(value: Any) -> list[dict[str, Any]]:
    return [r for r in value if isinstance(r, dict)] if isinstance(value, list) else []


# A settled run's pending row (``unreached``, 0.8.0) is not waiting for anything.
NOT_REACHED: Final = "not reached"


def stage_state(row: Mapping[str, Any]) -> str:
    """The word for a stage row's state: ``not reached`` once the run settled without it;
    ``aborted``, ``interrupted`` or ``rebuilt`` for an execution cut short (its ``state``
    stays ``failed`` for v1 clients: drawn as a stop or a rebuild, not as a failure)."""
    if row.get("unreached") is True:
        return NOT_REACHED
    return ended_by(row) or text(row.get("state"))


def stage_state_cell(row: Mapping[str, Any], suffix: str = "") -> Cell:
    word = stage_state(row)
    return (word + suffix, "dim") if word == NOT_REACHED else state_cell(word, suffix)


def node_text(node: Any) -> str:
    """A Ray node as ``host/id12``; "-" for the daemon's own host (null)."""
    if not isinstance(node, Mapping):
        return "-"
    ident = text(node.get("id"))[:12]
    return f"{text(node.get('host'))}/{ident}" if ident else text(node.get("host"))


def stages_section(rows: Any, now: int, paint: Paint) -> list[str]:
    stages = _rows(rows)
    cells = [
        [
            text(s.get("stage")),
            text(s.get("attempt")),
            stage_state_cell(s, " (advisory)" if s.get("advisory") else ""),
            relative(s.get("started_at_ms"), now),
            span(s["duration_ms"]) if isinstance(s.get("duration_ms"), int) else "-",
            text(s.get("exit_code")),
            text(s.get("verdict_source")),
            text(s.get("confidence")),
            usage_text(s.get("usage")),
            text(s.get("reason")) if s.get("reason") else "",
        ]
        for s in stages
    ]
    headers = ["STAGE", "ATTEMPT", "STATE", "STARTED", "TOOK", "EXIT", "SOURCE", "CONF", "USAGE"]
    # Where each ran, once any stage ran on a Ray node (0.8.0): "-" for the daemon's host.
    on_nodes = any(isinstance(s.get("node"), Mapping) for s in stages)
    if on_nodes:
        headers.append("NODE")
        for row, s in zip(cells, stages, strict=True):
            row.insert(len(headers) - 1, node_text(s.get("node")))
    headers.append("REASON")
    out = section("Stages", headers, cells, paint)
    for s in stages:
        seats = _rows(s.get("reviewers"))
        if seats:
            out += [
                "",
                paint(f"Reviewers of {text(s.get('stage'))}#{text(s.get('attempt'))}", "bold"),
            ]
            placed = any(isinstance(r.get("node"), Mapping) for r in seats)
            out += table(
                [
                    "SEAT",
                    "TARGET",
                    "VERDICT",
                    "CONF",
                    "USAGE",
                    *(["NODE"] if placed else []),
                    "REASON",
                ],
                [
                    [
                        text(r.get("reviewer")),
                        text(r.get("target")),
                        state_cell(r.get("verdict")),
                        text(r.get("confidence")),
                        usage_text(r.get("usage")),
                        *([node_text(r.get("node"))] if placed else []),
                        _seat_reason(r),
                    ]
                    for r in seats
                ],
                paint,
            )
    return out


def _seat_reason(seat: Mapping[str, Any]) -> str:
    """The seat's reason, and (0.9.0) how often a daemon's stop made it sit again."""
    said = text(seat.get("reason")) if seat.get("reason") else ""
    cut = seat.get("interrupted")
    if not isinstance(cut, list) or not cut:
        return said
    again = f"sat again after {len(cut)} interrupted sitting" + ("s" if len(cut) > 1 else "")
    return f"{said} ({again})" if said else again
