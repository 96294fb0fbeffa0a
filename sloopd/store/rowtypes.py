"""Named rows: what a query answers, by column name, built once per row.

A query whose columns make a row kind is listed in ``ROW_TYPES``, and its
callers read it through ``NamedReads`` (``store.row(RunRow, "run_by_id", …)``,
``store.run_by_id(…)``), so no caller counts columns.  Each type's fields are
its query's column names, in order (tests/unit/test_row_types.py compares them
with what SQLite says each query returns), and ``queries.sql`` keeps one column
list per kind.

The types are NamedTuples: built by ``_make`` from the row apsw gives (about
the cost of the tuple itself), still tuples for code that unpacks them.  The
hot paths (a ``logs`` page, an ``events`` page) read tuples of one or two
values and unpack them; they stay unnamed so a page costs no object per row.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, NamedTuple, TypeVar

Row = tuple[Any, ...]
Params = tuple[Any, ...] | dict[str, Any]


# Any row type of this module (each builds itself from a store row: ``_make``).
R = TypeVar("R", bound=NamedTuple)


class TicketRow(NamedTuple):
    """A ticket as every ``ticket_*``/``tickets_*`` listing query gives it."""

    id: str
    name: str
    title: str
    path: str
    project: str
    flow: str
    priority: int
    state: str
    created_at_ms: int
    updated_at_ms: int


class TicketExtra(NamedTuple):
    """What a ticket row leaves out: its body (kilobytes) and whether it is manual."""

    body: str
    manual: int


class ClaimFacts(NamedTuple):
    """What claiming a ticket's trigger needs: its name, its flow, its last attempt."""

    name: str
    flow: str
    last_attempt: int


class TriggerRow(NamedTuple):
    """A queued trigger (only queued triggers are ever shown)."""

    id: str
    ticket: str
    due_at_ms: int
    created_at_ms: int


class ClaimableTrigger(NamedTuple):
    id: str
    ticket: str
    due_at_ms: int


class RunRow(NamedTuple):
    """A run as ``run_by_id`` gives it."""

    id: str
    alias: str
    ticket: str
    attempt: int
    state: str
    trigger: str | None
    flow: str
    # The flow the run was claimed with (JSON): None in the read model's lean copy
    # and in ``runs_recent``, which never carry its kilobytes.
    flow_snapshot: str | None
    branch: str
    worktree: str
    claimed_at_ms: int
    started_at_ms: int | None
    finished_at_ms: int | None
    agent_exit_code: int | None
    halt: str | None
    reason: str | None
    classification: str | None
    resolution: str | None  # (0.9.0) JSON, or None while no one resolved the run


class UsageRow(NamedTuple):
    """A run's summed ``stage_finished`` usage: how many reported any, and the sums."""

    reported: int
    input_tokens: int
    output_tokens: int
    cached_tokens: int
    cost: float | None


# Where runs_recent's and usage_by_settled_run's usage columns begin: the split of a
# joined row into its two named rows, written down once (the row test pins both).
_RUN_WIDTH: Final = len(RunRow._fields)


class RecentRunRow(NamedTuple):
    """A settled run of ``runs_recent``: its run row (no snapshot), then its usage sums."""

    id: str
    alias: str
    ticket: str
    attempt: int
    state: str
    trigger: str | None
    flow: str
    flow_snapshot: None
    branch: str
    worktree: str
    claimed_at_ms: int
    started_at_ms: int | None
    finished_at_ms: int | None
    agent_exit_code: int | None
    halt: str | None
    reason: str | None
    classification: str | None
    resolution: str | None  # (0.9.0) JSON, or None while no one resolved the run
    reported: int | None
    input_tokens: int | None
    output_tokens: int | None
    cached_tokens: int | None
    cost: float | None

    def run(self) -> RunRow:
        return RunRow._make(self[:_RUN_WIDTH])

    def usage(self) -> UsageRow | None:
        """None when its log has no ``stage_finished`` row (the LEFT JOIN found none)."""
        return None if self.reported is None else UsageRow._make(self[_RUN_WIDTH:])


class RunUsageRow(NamedTuple):
    """``usage_by_settled_run``: one settled run's id, then its usage sums."""

    run: str
    reported: int
    input_tokens: int
    output_tokens: int
    cached_tokens: int
    cost: float | None

    def usage(self) -> UsageRow:
        return UsageRow._make(self[1:])


class GateRow(NamedTuple):
    state: str
    until_ms: int | None
    reason: str | None


# Every query a named row is read from, and its type: the one table the row test
# checks, and ``NamedReads.row`` asserts a caller pairs a query with its type.
ROW_TYPES: Final[Mapping[str, type[NamedTuple]]] = {
    "ticket_by_id": TicketRow,
    "ticket_by_name": TicketRow,
    "ticket_by_path": TicketRow,
    "tickets_nonterminal": TicketRow,
    "tickets_all": TicketRow,
    "tickets_in_project": TicketRow,
    "ticket_extra": TicketExtra,
    "ticket_claim_facts": ClaimFacts,
    "trigger_insert": TriggerRow,
    "trigger_queued_for_ticket": TriggerRow,
    "trigger_queued_by_id": TriggerRow,
    "triggers_queued": TriggerRow,
    "claimable_triggers": ClaimableTrigger,
    "run_by_id": RunRow,
    "runs_in_flight": RunRow,
    "runs_recent": RecentRunRow,
    "runs_settled_page": RecentRunRow,
    "runs_needing_attention": RecentRunRow,
    "usage_for_run": UsageRow,
    "usage_by_settled_run": RunUsageRow,
    "gate_read": GateRow,
}


class NamedReads:
    """Typed reads over ``one``/``all`` (the store's reader, or a write transaction).

    Everything here goes through ``one``/``all``, so what those do (a transaction's
    notes, the store's ``StoreUnavailable``) holds for the named reads too.
    """

    def one(self, query: str, params: Params = ()) -> Row | None:
        raise NotImplementedError

    def all(self, query: str, params: Params = ()) -> list[Row]:
        raise NotImplementedError

    def row(self, kind: type[R], query: str, params: Params = ()) -> R | None:
        """The first row of ``query`` as ``kind`` (its type in ``ROW_TYPES``)."""
        assert ROW_TYPES[query] is kind, f"{query} answers {ROW_TYPES[query].__name__}"
        found = self.one(query, params)
        return None if found is None else kind._make(found)

    def rows(self, kind: type[R], query: str, params: Params = ()) -> list[R]:
        """Every row of ``query`` as ``kind`` (its type in ``ROW_TYPES``)."""
        assert ROW_TYPES[query] is kind, f"{query} answers {ROW_TYPES[query].__name__}"
        return list(map(kind._make, self.all(query, params)))

    def scalar(self, query: str, params: Params = ()) -> Any:
        """The one value of a one-column query (a count, a max, a returned id); None
        when it answers no row."""
        found = self.one(query, params)
        if found is None:
            return None
        (value,) = found
        return value

    def run_by_id(self, run_id: str) -> RunRow | None:
        return self.row(RunRow, "run_by_id", (run_id,))

    def ticket_by_id(self, ticket_id: str) -> TicketRow | None:
        return self.row(TicketRow, "ticket_by_id", (ticket_id,))
