"""Readable output for a person; ``--json`` bypasses all of this.

Everything here is a pure function of the daemon's reply and the clock, so it
can be tested without a daemon.  Fields are read with ``.get`` and unknown ones
are ignored, because the protocol lets the daemon add fields within v1; nothing
is inferred that the daemon did not send.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final

from sloopctl.attention import (
    attention_section,
    resolution_of,
    resolution_words,
    run_state_cell,
)
from sloopctl.feedback_view import feedback_section
from sloopctl.layout import (
    STATE_STYLE,
    Cell,
    Paint,
    due,
    painter,
    relative,
    section,
    span,
    state_cell,
    table,
    text,
)
from sloopctl.next_steps import next_lines
from sloopctl.queue_view import place_line, queue_section
from sloopctl.stages_view import NOT_REACHED, stage_state, stages_section
from sloopctl.tickets_view import (
    TICKET_HEADERS,
    ends,
    no_open_tickets,
    ticket_cells,
    tickets_section,
    waiting_text,
)
from sloopctl.usage_text import usage_text

_STAGE_MARK: Final = {
    "passed": "✓",
    "failed": "✗",
    "running": "▶",
    "pending": "·",
    NOT_REACHED: "-",
    "aborted": "■",
    "interrupted": "■",
    "rebuilt": "↻",
}


def _rows(value: Any) -> list[dict[str, Any]]:
    return [r for r in value if isinstance(r, dict)] if isinstance(value, list) else []


def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def paint_state(state: Any, paint: Paint) -> str:
    return paint(text(state), STATE_STYLE.get(str(state), ""))


def stages_summary(stages: Any) -> str:
    """One mark per stage execution; re-entries carry their attempt number."""
    parts = []
    for s in _rows(stages):
        attempt = s.get("attempt")
        name = text(s.get("stage")) + (
            f"#{attempt}" if isinstance(attempt, int) and attempt > 1 else ""
        )
        parts.append(name + _STAGE_MARK.get(stage_state(s), "?"))
    return " ".join(parts)


def runs_section(rows: Any, now: int, paint: Paint, title: str = "Runs") -> list[str]:
    cells = [
        [
            text(r.get("id")),
            text(r.get("alias")),
            run_state_cell(r, " (stalled)" if r.get("stall") else ""),
            relative(r.get("started_at_ms"), now),
            relative(r.get("finished_at_ms"), now) if r.get("finished_at_ms") else "-",
            stages_summary(r.get("stages")),
            usage_text(r.get("usage")),
            text(r.get("reason")) if r.get("reason") else "",
        ]
        for r in _rows(rows)
    ]
    headers = ["ID", "ALIAS", "STATE", "STARTED", "FINISHED", "STAGES", "USAGE", "REASON"]
    return section(title, headers, cells, paint)


# --- show ----------------------------------------------------------------------


def dashboard(data: Mapping[str, Any], now: int, paint: Paint) -> list[str]:
    daemon = _mapping(data.get("daemon"))
    version = daemon.get("version")
    head = [paint(f"sloopd {version}" if version else "sloopd", "bold")]
    if daemon.get("pid"):
        head.append(f"pid {daemon['pid']}")
    if isinstance(daemon.get("uptime_ms"), int):
        head.append(f"up {span(daemon['uptime_ms'])}")
    elif isinstance(daemon.get("started_at_ms"), int):
        head.append(f"up {span(now - daemon['started_at_ms'])}")
    gate = _mapping(data.get("gate"))
    gate_words = "gate " + paint_state(gate.get("state"), paint)
    gate_words += ends(gate.get("until_ms"), now)
    if gate.get("reason"):
        gate_words += f" ({gate['reason']})"
    head.append(gate_words)
    if isinstance(data.get("next_wake"), int):
        head.append(f"next wake {relative(data['next_wake'], now)}")
    if isinstance(data.get("usage"), dict):
        head.append(f"agents used {usage_text(data['usage'])}")
    out = [" · ".join(head)]
    warning = _mapping(daemon.get("sandbox")).get("warning")
    if warning:
        out.append(paint(f"UNSAFE: {text(warning)}", "red"))
    fault = _mapping(daemon.get("store_fault"))
    if fault:
        since = relative(fault.get("since_ms"), now)
        out.append(
            paint(
                f"STORE: cannot write ({text(fault.get('reason'))}) since {since}: "
                f"{text(fault.get('detail'))}; runs wait, output is held",
                "red",
            )
        )

    runs = [
        [
            text(r.get("id")),
            text(r.get("alias")),
            state_cell(r.get("state"), " (stalled)" if r.get("stall") else ""),
            relative(r.get("started_at_ms"), now),
        ]
        for r in _rows(data.get("runs"))
    ]
    out += attention_section(data, now, paint)
    out += section("Runs in flight", ["ID", "ALIAS", "STATE", "STARTED"], runs, paint)
    out += queue_section(data, now, paint)
    names = {t.get("id"): t.get("name") for t in _rows(data.get("tickets"))}
    triggers = [
        [
            text(t.get("id")),
            " ".join(text(x) for x in (t.get("ticket"), names.get(t.get("ticket"))) if x),
            due(t.get("due_at_ms"), now),
        ]
        for t in _rows(data.get("queued_triggers"))
    ]
    out += section("Queued triggers", ["ID", "TICKET", "DUE"], triggers, paint)
    out += section(
        "Tickets",
        TICKET_HEADERS,
        ticket_cells(data.get("tickets"), now),
        paint,
        empty=no_open_tickets(data.get("recent")),
    )
    if "recent" in data:
        recent = _rows(data.get("recent"))
        total = data.get("recent_total")
        title = f"Recent runs ({len(recent)} of {text(total)})" if recent else "Recent runs"
        cells = [
            [
                text(r.get("id")),
                text(r.get("alias")),
                run_state_cell(r),
                relative(r.get("finished_at_ms"), now),
                text(r.get("reason")) if r.get("reason") else "",
            ]
            for r in recent
        ]
        out += section(title, ["ID", "ALIAS", "STATE", "FINISHED", "REASON"], cells, paint)
    return out


_TABLES: Final[Mapping[str, Callable[[Any, int, Paint], list[str]]]] = {
    "tickets": tickets_section,
    "runs": runs_section,
    "stages": stages_section,
}


def label(key: str) -> str:
    for suffix in ("_at_ms", "_ms"):
        if key.endswith(suffix):
            return key[: -len(suffix)]
    return key


def scalar(key: str, value: Any, now: int, paint: Paint) -> str:
    if key == "waiting":
        return waiting_text(value, now) or "-"
    if key == "state":
        return paint_state(value, paint)
    if isinstance(value, int) and not isinstance(value, bool):
        # Names say which *_ms are instants; for names this client does not know,
        # anything past 2001 in ms is an instant, since no duration is 30 years.
        if key.endswith("_at_ms") or key in ("until_ms", "next_wake") or value >= 10**12:
            return relative(value, now)
        if key.endswith("_ms"):
            return span(value)
    if isinstance(value, dict):
        return ", ".join(f"{k}={text(v)}" for k, v in value.items()) or "-"
    if isinstance(value, list):
        return "\n".join(text(v) for v in value) or "-"
    return text(value)


def _is_table(key: str, value: Any) -> bool:
    if not isinstance(value, list):
        return False
    return key in _TABLES or (bool(value) and all(isinstance(x, dict) for x in value))


def _flatten(value: Mapping[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    """Nested objects as dotted keys (ticket.title), so every leaf gets its own line."""
    pairs: list[tuple[str, Any]] = []
    for key, item in value.items():
        if isinstance(item, dict) and item and key != "waiting":
            pairs += _flatten(item, f"{prefix}{key}.")
        elif not _is_table(key, item):
            pairs.append((prefix + key, item))
    return pairs


def details(value: Mapping[str, Any], now: int, paint: Paint) -> list[str]:
    """Key/value lines for the scalar fields, then a table per list of rows."""
    pairs = [(label(k), scalar(k.rsplit(".", 1)[-1], v, now, paint)) for k, v in _flatten(value)]
    width = max((len(k) for k, _ in pairs), default=0)
    # Multi-line values (a ticket body, a list of obligations) stay in their column.
    indent = "\n" + " " * (width + 2)
    out = [f"{paint(k.ljust(width), 'dim')}  {indent.join(v.splitlines())}" for k, v in pairs]
    for key, rows in value.items():
        if _is_table(key, rows):
            known = _TABLES.get(key)
            out += known(rows, now, paint) if known else generic_section(key, rows, now, paint)
    return out


def generic_section(title: str, rows: list[dict[str, Any]], now: int, paint: Paint) -> list[str]:
    """A table for rows of a kind this client does not know yet."""
    columns: list[str] = []
    for row in rows:
        columns += [
            k for k, v in row.items() if k not in columns and not isinstance(v, list | dict)
        ]
    cells: list[list[Cell]] = [
        [scalar(c, row.get(c), now, painter(False)) for c in columns] for row in rows
    ]
    return section(title.capitalize(), [label(c).upper() for c in columns], cells, paint)


def matches(data: Mapping[str, Any], now: int, paint: Paint) -> list[str]:
    cells = ticket_cells(data.get("tickets"), now)
    ref = f" for '{data['ref']}'" if isinstance(data.get("ref"), str) else ""
    total = data.get("total")
    shown = f"{len(cells)} of {total}" if isinstance(total, int) and total > len(cells) else ""
    noun = "match" if (total if shown else len(cells)) == 1 else "matches"
    summary = f"{shown or len(cells)} {noun}{ref}"
    return [*table(TICKET_HEADERS, cells, paint), summary] if cells else [summary]


def show(data: Any, now: int, paint: Paint) -> list[str]:
    """show and its deprecated forms; shapes without a kind are the v1 answers."""
    if not isinstance(data, dict):
        return [text(data)]
    kind = data.get("kind")
    if kind == "dashboard" or (kind is None and "daemon" in data and "gate" in data):
        return dashboard(data, now, paint)
    if kind == "matches" or (kind is None and set(data) <= {"tickets", "ref"}):
        return matches(data, now, paint)
    value = data.get("value")
    if kind in ("ticket", "run", "project") and isinstance(value, dict):
        title = paint(f"{kind} {text(value.get('id') or value.get('name'))}", "bold")
        hints = next_lines(value, details=False) if kind == "run" else []
        head = [title]
        resolution = resolution_of(value) if kind == "run" else None
        if resolution is not None:  # what a person made of it, under the run's name
            head.append(paint(f"resolved: {resolution_words(resolution, now)}", "cyan"))
            value = {k: v for k, v in value.items() if k != "resolution"}
        if kind == "run" and "queue" in value:
            # Its place in the merge queue, in words, instead of the entry's fields.
            place = place_line(value.get("queue"), stages=value.get("stages"))
            head += [paint(place, "cyan")] if place else []
            value = {k: v for k, v in value.items() if k != "queue"}
        return [*head, *details(value, now, paint), *(["", *hints] if hints else [])]
    return details(data, now, paint)


# --- one-line answers -------------------------------------------------------------


def ticket_line(ticket: Any, paint: Paint) -> str:
    t = _mapping(ticket)
    return " ".join([text(t.get("id")), text(t.get("name")), paint_state(t.get("state"), paint)])


def trigger_words(trigger: Any, now: int) -> str:
    if not isinstance(trigger, dict):
        return ""
    return f"trigger {text(trigger.get('id'))} due {due(trigger.get('due_at_ms'), now)}"


def suppressed_words(suppressed: Any) -> str:
    if not isinstance(suppressed, dict):
        return ""
    if suppressed.get("reason") == "terminal_ticket":
        return f"not queued: ticket is {text(suppressed.get('state'))}"
    return f"not queued: {text(suppressed.get('reason'))}"


def post_line(data: Mapping[str, Any], now: int, paint: Paint) -> str:
    parts = [ticket_line(data.get("ticket"), paint)]
    if "created" in data:
        parts.append("created" if data["created"] else "refreshed")
    # trigger_suppressed, not a null trigger, tells "refused" from "none requested".
    queued = trigger_words(data.get("trigger"), now)
    parts.append(queued or suppressed_words(data.get("trigger_suppressed")) or "no trigger queued")
    return " · ".join(parts)


def ticket_change_line(data: Mapping[str, Any], now: int, paint: Paint) -> str:
    parts = [ticket_line(data.get("ticket"), paint)]
    if data.get("trigger"):
        parts.append(trigger_words(data.get("trigger"), now))
    else:  # hold, ready: why the ticket is not running now
        waiting = waiting_text(_mapping(data.get("ticket")).get("waiting"), now)
        parts += [waiting] if waiting else []
    return " · ".join(parts)


def abort_line(data: Mapping[str, Any], paint: Paint) -> str:
    run = _mapping(data.get("run"))
    words = [text(run.get("id")), text(run.get("alias")), paint_state(run.get("state"), paint)]
    reason = f" · {run['reason']}" if run.get("reason") else ""
    return " ".join(words) + reason


def resolve_line(data: Mapping[str, Any], now: int, paint: Paint) -> str:
    """``R7 fix-login#1 resolved: merged by hand (by alice): … · T3 fix-login merged``."""
    run = _mapping(data.get("run"))
    resolution = resolution_of(run)
    words = [text(run.get("id")), text(run.get("alias"))]
    if resolution is not None:
        words.append(paint("resolved:", "bold") + " " + resolution_words(resolution))
    else:
        words.append(paint_state(run.get("state"), paint))
    parts = [" ".join(words)]
    if isinstance(data.get("ticket"), dict):
        parts.append(ticket_line(data["ticket"], paint))
    return " · ".join(parts)


def verdict_line(data: Mapping[str, Any]) -> str:
    v = _mapping(data.get("verdict"))
    # A panel seat's report names its seat where a stage worker's names its attempt.
    where = f"seat {text(v['reviewer'])}" if "reviewer" in v else f"#{text(v.get('attempt'))}"
    return (
        f"verdict {text(v.get('verdict'))} recorded · {text(v.get('run'))} "
        f"{text(v.get('stage'))} {where} · confidence {text(v.get('confidence'))}"
    )


def render(verb: str, data: Any, now: int, colour: bool) -> str:
    """The text for a successful reply to ``verb``."""
    paint = painter(colour)
    if verb in ("show", "status", "list", "wait"):
        lines = show(data, now, paint)
    elif not isinstance(data, dict):
        lines = [text(data)]
    elif verb == "post":
        lines = [post_line(data, now, paint)]
    elif verb in ("run", "hold", "ready"):
        lines = [ticket_change_line(data, now, paint)]
    elif verb == "abort":
        lines = [abort_line(data, paint)]
    elif verb == "resolve":
        lines = [resolve_line(data, now, paint)]
    elif verb == "verdict":
        lines = [verdict_line(data)]
    elif verb == "note":
        lines = ["note recorded"]
    elif verb == "brief":  # its feedback (0.9) as labelled data, after the assignment
        rest = {k: v for k, v in data.items() if k != "feedback"}
        lines = [*details(rest, now, paint), *feedback_section(data.get("feedback"), paint)]
    else:
        lines = details(data, now, paint)
    return "\n".join(lines).strip("\n")


def error_line(code: str | None, message: str, colour: bool) -> str:
    """``error: <code>: <message>``; the code is left out for the client's own errors."""
    prefix = painter(colour)("error", "red")
    return f"{prefix}: {code}: {message}" if code else f"{prefix}: {message}"
