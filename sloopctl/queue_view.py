"""The merge queue (issue 32) in words: the dashboard's section, a run's place in it,
and the ``queue_*`` events.

The daemon sends the queue as data (docs/protocol.md: the dashboard's ``queue``, a run
detail's ``queue``); this module says it as a person reads it — "2nd in the merge
queue (window 8), its gate test#1 running on main + R7".  A pure function of the
reply, like ``render``: fields are read with ``.get``, an entry of a state this client
does not know is still shown (its state word, what it is built on), and a daemon
without a queue (before 0.9) shows nothing of it.

Every string here came from the daemon and was cleaned by ``sloopctl.safe_text`` when
the reply was decoded (the follow view cleans again, as it does for everything).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from sloopctl.layout import Cell, Paint, section, span, state_cell, text

# The one word for a stage row an abort, a restart or a rebuild cut short, by its
# ``ended_by`` (0.9); 0.8.0's ``aborted: true`` is the same as ``ended_by: "aborted"``.
ENDED_WORDS: Final = frozenset({"aborted", "interrupted", "rebuilt"})
# How a commit is shortened wherever a person reads it (the web view cuts the same).
SHORT_SHA: Final = 12


def ended_by(row: Mapping[str, Any]) -> str | None:
    """What cut a stage execution short (``aborted``, ``interrupted``, ``rebuilt``), or
    None for a row that ended on its own (or is still running)."""
    if row.get("state") != "failed":
        return None
    word = row.get("ended_by")
    if isinstance(word, str) and word in ENDED_WORDS:
        return word
    return "aborted" if row.get("aborted") is True else None


_SUFFIXES: Final = {1: "st", 2: "nd", 3: "rd"}


def ordinal(n: int) -> str:
    """1st, 2nd, 3rd, 4th, 11th, 12th, 13th, 21st, 112th."""
    if 10 <= n % 100 <= 20:
        return f"{n}th"
    return f"{n}{_SUFFIXES.get(n % 10, 'th')}"


def _ids(value: Any) -> list[str]:
    return [text(v) for v in value if v is not None] if isinstance(value, list) else []


def names(runs: Sequence[str]) -> str:
    """``R5``, ``R5 and R6``, ``R5, R6 and R7``."""
    if len(runs) <= 1:
        return "".join(runs)
    return f"{', '.join(runs[:-1])} and {runs[-1]}"


def _possessive(runs: Sequence[str]) -> str:
    return names([f"{run}'s" for run in runs])


def on_text(entry: Mapping[str, Any]) -> str:
    """What a candidate is built on: ``main``, ``main + R7 + R8`` (nearest run last)."""
    return " + ".join(["main", *_ids(entry.get("onto"))])


def short(sha: Any) -> str:
    return text(sha)[:SHORT_SHA] if isinstance(sha, str) and sha else "-"


def waits_text(waiting: Any, window: Any = None) -> str:
    """What a queued run waits for, in words: its reason's, so every entry reads alike
    ("waiting for R5's gates"); the daemon's message for a reason this client does not
    know (or, failing that, the reason and its runs)."""
    if not isinstance(waiting, Mapping):
        return ""
    runs = _ids(waiting.get("runs"))
    reason = text(waiting.get("reason"))
    if reason == "window":
        size = f" ({window})" if isinstance(window, int) and not isinstance(window, bool) else ""
        return f"waiting for a place in the merge window{size}"
    if reason == "candidate_ahead":
        return f"waiting for {_possessive(runs)} candidate" if runs else "waiting for its turn"
    if reason == "runs_ahead" and runs:
        return f"waiting for {names(runs)} to land"
    if reason == "runs_ahead_gates" and runs:
        return f"waiting for {_possessive(runs)} gates"
    if isinstance(waiting.get("message"), str) and waiting["message"]:
        return f"waiting: {waiting['message']}"
    return f"waiting: {reason}" + (f" ({names(runs)})" if runs else "")


def running_stage(stages: Any) -> str | None:
    """``stage#attempt`` of the last running row of a run's (or a dashboard run's) stages."""
    running = (
        [r for r in stages if isinstance(r, Mapping) and r.get("state") == "running"]
        if isinstance(stages, list)
        else []
    )
    if not running:
        return None
    row = running[-1]
    attempt = row.get("attempt")
    return text(row.get("stage")) + (f"#{attempt}" if isinstance(attempt, int) else "")


def doing(entry: Mapping[str, Any], stage: str | None = None, *, lead: bool = False) -> str:
    """What the run in the queue is doing, in words: ``its gate test#1 running on main
    + R7``.  ``lead`` names a held or landing run's state first (a line with no state
    column); ``stage`` is its running stage, when known."""
    state = text(entry.get("state"))
    on = on_text(entry)
    if state == "waiting":
        words = "not built yet"
    elif state == "building":
        words = f"its candidate being built on {on}"
    elif state == "gating":
        words = f"its gate {stage} running on {on}" if stage else f"its gates running on {on}"
    elif state == "held":
        words = ("held: " if lead else "") + f"its gate failed on {on}"
    elif state == "passed":
        words = f"its gates passed on {on}"
    elif state == "landing":
        words = ("landing: " if lead else "") + "main moving to its candidate"
        if lead and isinstance(entry.get("candidate"), str):  # the table has a column
            words += f" {short(entry['candidate'])}"
    else:  # a state of a newer daemon: its word, and where it stands
        words = f"{state} on {on}"
    return words


def stale_text(entry: Mapping[str, Any]) -> str:
    """Why its candidate is to be built again, once it is (the entry's ``stale``)."""
    stale = entry.get("stale")
    return f"to be rebuilt: {text(stale)}" if isinstance(stale, str) and stale else ""


def rebuilds_text(entry: Mapping[str, Any]) -> str:
    count = entry.get("rebuilds")
    if not isinstance(count, int) or isinstance(count, bool) or count < 1:
        return ""
    return "rebuilt once" if count == 1 else f"rebuilt {count} times"


def place_line(entry: Any, window: Any = None, stages: Any = None) -> str:
    """A run's place in the queue, one line for ``show RUN`` and the follow view:
    ``2nd in the merge queue (window 8), its gate test#1 running on main + R7``."""
    if not isinstance(entry, Mapping):
        return ""
    if window is None:
        window = entry.get("merge_window")
    position = entry.get("position")
    where = (
        f"{ordinal(position)} in the merge queue"
        if isinstance(position, int) and not isinstance(position, bool) and position > 0
        else "in the merge queue"
    )
    if isinstance(window, int) and not isinstance(window, bool):
        where += f" (window {window})"
    parts = [f"{where}, {doing(entry, running_stage(stages), lead=True)}"]
    parts += [w for w in (waits_text(entry.get("waiting_for"), window), stale_text(entry)) if w]
    rebuilt = rebuilds_text(entry)
    if rebuilt:
        parts.append(rebuilt)
    return "; ".join(parts)


def place_change(before: Mapping[str, Any] | None, after: Mapping[str, Any]) -> list[str]:
    """``show --follow``'s line off a terminal when a run's place in the queue reads
    differently from the last view's: ``R9 2nd in the merge queue, ...``."""
    place = place_line(after.get("queue"), stages=after.get("stages"))
    was = place_line((before or {}).get("queue"), stages=(before or {}).get("stages"))
    return [f"{text(after.get('id'))} {place}"] if place and place != was else []


def place_brief(entry: Any) -> str:
    """`` · 2nd in the merge queue`` for the one-line live view; "" outside the queue."""
    position = entry.get("position") if isinstance(entry, Mapping) else None
    if not isinstance(position, int) or isinstance(position, bool) or position < 1:
        return ""
    return f" · {ordinal(position)} in the merge queue"


def queue_section(data: Mapping[str, Any], now: int, paint: Paint) -> list[str]:
    """The dashboard's "Merge queue", in queue order; nothing when it is empty or the
    daemon sends none (an older daemon, or a repository whose flows have no landing)."""
    entries = (
        [e for e in data.get("queue") or [] if isinstance(e, Mapping)]
        if isinstance(data.get("queue"), list)
        else []
    )
    if not entries:
        return []
    window = data.get("merge_window")
    running = (
        {
            text(r.get("id")): running_stage(r.get("stages"))
            for r in data.get("runs") or []
            if isinstance(r, Mapping)
        }
        if isinstance(data.get("runs"), list)
        else {}
    )
    cells: list[list[Cell]] = []
    for entry in entries:
        rebuilt = rebuilds_text(entry)
        what = [doing(entry, running.get(text(entry.get("run"))))]
        what += [w for w in (waits_text(entry.get("waiting_for"), window), stale_text(entry)) if w]
        cells.append(
            [
                text(entry.get("position")),
                text(entry.get("run")),
                text(entry.get("alias")),
                state_cell(entry.get("state"), f" ({rebuilt})" if rebuilt else ""),
                short(entry.get("candidate")),
                "; ".join(what),
            ]
        )
    title = "Merge queue"
    if isinstance(window, int) and not isinstance(window, bool):
        title += f" (window {window})"
    del now  # the queue's times are in the events; kept for the sections' one signature
    return section(title, ["#", "ID", "ALIAS", "STATE", "CANDIDATE", "WHAT"], cells, paint)


# --- events -------------------------------------------------------------------------


def event_words(kind: Any, data: Any) -> str | None:
    """A ``queue_*`` event's data in words (``sloopctl events``), None for other kinds
    (printed as ``key=value`` pairs) or data of a shape this client does not know."""
    if not isinstance(kind, str) or not kind.startswith("queue_") or not isinstance(data, dict):
        return None
    if kind == "queue_joined":
        position = data.get("position")
        if isinstance(position, int) and not isinstance(position, bool) and position > 0:
            return f"joined the merge queue, {ordinal(position)}"
        return "joined the merge queue"
    if kind == "queue_rebuilt":
        # The sentence (``reason``, 0.9.0) where there is one, else the cause's label.
        said = data.get("reason") or data.get("cause")
        cause = text(said) if said else "rebuilt"
        # The run that left, unless the cause already names it.
        by = f" (by {text(data['by'])})" if data.get("by") and text(data["by"]) not in cause else ""
        return f"{cause}{by}" if cause.startswith("rebuilt") else f"rebuilt: {cause}{by}"
    if kind == "queue_landed":
        words = "landed"
        if isinstance(data.get("commit"), str):
            words += f" {short(data['commit'])}"
        waited = data.get("waited_ms")
        if isinstance(waited, int) and not isinstance(waited, bool):
            words += f" after {span(waited)} in the queue"
        return words
    if kind == "queue_left":
        return (
            f"left the merge queue: {text(data.get('cause'))}"
            if data.get("cause")
            else ("left the merge queue")
        )
    return None
