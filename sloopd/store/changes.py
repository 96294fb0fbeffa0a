"""What each write query changed, noted by the store itself (the change log's entries).

Every query that writes names here the entity it changes, keyed from its
parameters or from the row it returns, so no write site can forget to say what
it changed: ``Transaction`` notes each call as it runs, and the writer hands the
notes of a transaction to its observer only once that transaction has committed
(a rolled-back one notes nothing).  tests/unit/test_change_notes.py proves that
every writing query of ``queries.sql`` is listed, either here or in ``UNSEEN``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final, NamedTuple


class Change(NamedTuple):
    """One thing a committed write changed: ``kind`` and the key of the row."""

    kind: str
    key: Any = None


TICKET: Final = "ticket"
TRIGGER: Final = "trigger"
# Every queued trigger due at ``key`` was moved: the reader finds which ones it held.
TRIGGERS_DUE: Final = "triggers_due"
RUN: Final = "run"
# A run's stage log grew: its stages, its usage.
STAGE: Final = "stage"
GATE: Final = "gate"
# The writer's own fault (a write refused, or the first success after refusals).
STORE_FAULT: Final = "store_fault"

Params = tuple[Any, ...] | dict[str, Any]
Noter = Callable[[Params, tuple[Any, ...] | None], Change]


def _named(kind: str, name: str) -> Noter:
    def note(params: Params, _row: tuple[Any, ...] | None) -> Change:
        assert isinstance(params, dict), f"{kind}: named parameters"
        return Change(kind, params[name])

    return note


def _positional(kind: str, index: int) -> Noter:
    def note(params: Params, _row: tuple[Any, ...] | None) -> Change:
        assert isinstance(params, tuple), f"{kind}: positional parameters"
        return Change(kind, params[index])

    return note


def _returned(kind: str) -> Noter:
    def note(_params: Params, row: tuple[Any, ...] | None) -> Change:
        assert row is not None, f"a {kind} insert returns its id"
        # Positional on purpose: any insert's RETURNING row, its id first by convention
        # (ticket_insert and run_insert return only the id, trigger_insert its row).
        return Change(kind, row[0])

    return note


NOTES: Final[Mapping[str, Noter]] = {
    "ticket_insert": _returned(TICKET),
    "ticket_refresh": _named(TICKET, "id"),
    "ticket_set_state": _named(TICKET, "id"),
    "trigger_insert": _returned(TRIGGER),
    "trigger_claim": _named(TRIGGER, "id"),
    "triggers_due_now": _named(TRIGGERS_DUE, "due"),
    "run_insert": _returned(RUN),
    "run_set_worktree": _positional(RUN, 1),
    "run_started": _named(RUN, "id"),
    "run_settle": _named(RUN, "id"),
    "run_clear_worktree": _positional(RUN, 0),
    "run_resolve": _named(RUN, "id"),
    "stage_log_append": _named(STAGE, "run"),
    "gate_write": lambda _params, _row: Change(GATE),
}

# Writes no ``show`` reply reflects: the activity feed and captured output have
# their own cursors (``events``, ``logs``), so they move no epoch; the run ordinal's
# floor changes no row at all.
UNSEEN: Final = frozenset({"event_insert", "log_insert", "runs_ordinal_at_least"})
