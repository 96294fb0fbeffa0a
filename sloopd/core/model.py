"""The read model: what the dashboard shows, held in memory and revised by the writer.

Derived once from one store snapshot when the daemon starts (after recovery),
then revised from the notes each committed transaction carries
(``sloopd.store.changes``): a noted row is re-read by its id right after the
commit, and nothing else is read.  A rolled-back transaction carries no notes,
so it leaves the model as it was.  The invariant, checked after every step of
tests/integration/test_queue_property.py: the model equals ``derive`` of the
store it revises.

It holds the non-terminal tickets, the queued triggers, the runs in flight, the
most recently settled runs (as many as the largest ``limit`` asked, at most
``RECENT_HELD_MAX``), how many runs settled in all, their summed usage, and the
gate; never a terminal ticket, a settled run's flow snapshot, or all the runs.
"""

from __future__ import annotations

import bisect
import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Final

import orjson

from sloopd.core import rows
from sloopd.core.changelog import ChangeLog
from sloopd.core.rows import Gate
from sloopd.store import GateRow, RecentRunRow, RunRow, RunUsageRow, Store, TicketRow, TriggerRow
from sloopd.store import changes as notes
from sloopd.store.changes import Change
from sloopd.vendor.usage import rounded_cost
from sloopd.wire.api import ACTIVE_RUN_STATES, DEFAULT_RECENT_LIMIT, TERMINAL_TICKET_STATES

log = logging.getLogger(__name__)

# The most settled runs the model holds for ``show {limit}``; a larger limit is read
# from the store (views/board.py), so no request makes the daemon hold every run.
RECENT_HELD_MAX: Final = 5000


@dataclass(frozen=True, slots=True)
class InFlight:
    record: RunRow  # without its flow snapshot (kilobytes the dashboard never shows)
    # What its stage log stored; shown while no driver holds the run's live usage.
    usage: dict[str, Any] | None
    # The dashboard row without its live fields, built once per revision.
    row: dict[str, Any] = field(compare=False, hash=False)

    @classmethod
    def of(cls, record: RunRow, usage: dict[str, Any] | None) -> InFlight:
        lean = record._replace(flow_snapshot=None)
        row = rows.run_row_of(lean)
        row["usage"] = usage
        return cls(lean, usage, row)


@dataclass(frozen=True, slots=True)
class Settled:
    """A run of the recent window: its row encoded once, and what orders and sums it."""

    id: str
    finished_at_ms: int | None
    usage: dict[str, Any] | None
    encoded: bytes  # the dashboard's run row, its usage included

    @classmethod
    def of(cls, record: RunRow, usage: dict[str, Any] | None) -> Settled:
        row = rows.run_row_of(record)  # the row leaves the flow snapshot out
        row["usage"] = usage
        return cls(record.id, record.finished_at_ms, usage, orjson.dumps(row))

    @property
    def order(self) -> tuple[int, int]:
        """runs_recent's order (finished_at_ms DESC, ordinal DESC), as an ascending key."""
        finished = self.finished_at_ms
        return (-(finished if finished is not None else -1), -int(self.id[1:]))


@dataclass(slots=True)
class UsageSum:
    """Settled runs' usage summed exactly (tokens as ints, dollars as fractions), so
    adding a run and removing it again leaves no rounding behind."""

    reported: int = 0  # runs that reported any usage
    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0
    costed: int = 0  # runs that reported a cost
    cost: Fraction = field(default_factory=Fraction)

    @classmethod
    def of(cls, usages: Iterable[dict[str, Any] | None]) -> UsageSum:
        total = cls()
        for usage in usages:
            total.add(usage)
        return total

    def add(self, usage: dict[str, Any] | None, sign: int = 1) -> None:
        if usage is None:
            return
        self.reported += sign
        self.input_tokens += sign * int(usage["input_tokens"])
        self.output_tokens += sign * int(usage["output_tokens"])
        self.cached_tokens += sign * int(usage["cached_tokens"])
        if usage["cost_usd"] is not None:
            self.costed += sign
            self.cost += sign * Fraction(usage["cost_usd"])

    def row(self) -> dict[str, Any] | None:
        if self.reported <= 0:
            return None
        return {
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cached_tokens": self.cached_tokens,
            "cost_usd": rounded_cost(float(self.cost)) if self.costed > 0 else None,
        }


@dataclass(slots=True)
class Snapshot:
    tickets: dict[str, TicketRow]  # non-terminal, by id
    triggers: dict[str, TriggerRow]  # queued, by id
    in_flight: dict[str, InFlight]
    recent: list[Settled]  # newest first, min(held, recent_total) of them
    recent_total: int
    usage: UsageSum  # every settled run's
    gate: Gate


def read_gate(store: Store) -> Gate:
    row = store.row(GateRow, "gate_read")
    return Gate.of(row) if row is not None else Gate()


def recent_runs(store: Store, limit: int) -> list[Settled]:
    """The ``limit`` most recently settled runs, with their usage, in one statement."""
    found = store.rows(RecentRunRow, "runs_recent", (limit,))
    return [Settled.of(r.run(), rows.usage_of_sums(r.usage())) for r in found]


def settled_usage(store: Store) -> UsageSum:
    found = store.rows(RunUsageRow, "usage_by_settled_run")
    return UsageSum.of(rows.usage_of_sums(r.usage()) for r in found)


def derive(store: Store, held: int) -> Snapshot:
    """The model from scratch: every list query, read in one store snapshot."""
    with store.snapshot():
        total = store.scalar("runs_recent_count")
        return Snapshot(
            tickets={r.id: r for r in store.rows(TicketRow, "tickets_nonterminal")},
            triggers={r.id: r for r in store.rows(TriggerRow, "triggers_queued")},
            in_flight={
                r.id: InFlight.of(r, rows.run_usage(store, r.id))
                for r in store.rows(RunRow, "runs_in_flight")
            },
            recent=recent_runs(store, held),
            recent_total=int(total or 0),
            usage=settled_usage(store),
            gate=read_gate(store),
        )


@dataclass(slots=True)
class Touched:
    """The rows a transaction's notes name, each once."""

    tickets: set[str] = field(default_factory=set)
    triggers: set[str] = field(default_factory=set)
    runs: dict[str, bool] = field(default_factory=dict)  # run id -> its stage log grew
    gate: bool = False

    @classmethod
    def of(cls, changed: list[Change], snapshot: Snapshot) -> Touched:
        touched = cls()
        for kind, key in changed:
            if kind == notes.TICKET:
                touched.tickets.add(key)
            elif kind == notes.TRIGGER:
                touched.triggers.add(key)
            elif kind == notes.TRIGGERS_DUE:
                touched.triggers.update(
                    i for i, t in snapshot.triggers.items() if t.due_at_ms == key
                )
            elif kind == notes.RUN:
                touched.runs.setdefault(key, False)
            elif kind == notes.STAGE:
                touched.runs[key] = True
            elif kind == notes.GATE:
                touched.gate = True
        return touched


class ReadModel:
    """The snapshot, revised in place by ``committed`` (the writer's observer)."""

    def __init__(self, store: Store, changes: ChangeLog) -> None:
        self.store = store
        self.changes = changes
        self.held = DEFAULT_RECENT_LIMIT
        self.snapshot = derive(store, self.held)
        self._stale = False
        # Moves whenever the snapshot's tickets, triggers or gate may have: what the
        # dashboard's queue part is made of (with the clock, the runs in flight and the
        # configuration), so it is encoded again on that, not on every event (a log
        # line moves the epoch; with 2,000 queued an encoding took 3 ms a ``show``).
        self.queue_revision = 0

    @classmethod
    def install(cls, store: Store, changes: ChangeLog) -> ReadModel:
        """Derive the model and make the store's writer revise it on every commit.

        The server calls it once recovery has settled the runs a killed daemon left,
        before it listens: no request is ever answered from an unrevised model.
        """
        model = cls(store, changes)
        store.writer.observer = model.committed
        return model

    def current(self) -> Snapshot:
        if self._stale:
            # A revision failed half-way (a read refused right after a commit):
            # derive again rather than serve a model that may be wrong.
            self.snapshot = derive(self.store, self.held)
            self._stale = False
            self.queue_revision += 1
        return self.snapshot

    def committed(self, changed: list[Change]) -> None:
        try:
            if not self._stale:  # a stale model is derived whole on its next read
                self._revise(changed)
        except Exception:
            log.exception("revising the read model failed; it is derived again on next read")
            self._stale = True
        self.changes.bump()

    def hold_recent(self, limit: int) -> bool:
        """Hold ``limit`` settled runs from now on; False when that is more than it holds."""
        if limit <= self.held:
            return True
        if limit > RECENT_HELD_MAX:
            return False
        snapshot = self.current()
        with self.store.snapshot():
            snapshot.recent = recent_runs(self.store, limit)
        self.held = limit
        return True

    def _revise(self, changed: list[Change]) -> None:
        snapshot, store = self.snapshot, self.store
        touched = Touched.of(changed, snapshot)
        if touched.tickets or touched.triggers or touched.gate:
            self.queue_revision += 1  # first: a revision failing half-way has moved it
        for ticket_id in touched.tickets:
            record = store.ticket_by_id(ticket_id)
            if record is not None and record.state not in TERMINAL_TICKET_STATES:
                snapshot.tickets[ticket_id] = record
            else:
                snapshot.tickets.pop(ticket_id, None)
        for trigger_id in touched.triggers:
            found = store.row(TriggerRow, "trigger_queued_by_id", (trigger_id,))
            if found is not None:
                snapshot.triggers[trigger_id] = found
            else:
                snapshot.triggers.pop(trigger_id, None)
        for run_id, staged in touched.runs.items():
            self._revise_run(snapshot, run_id, staged)
        if touched.gate:
            snapshot.gate = read_gate(store)

    def _revise_run(self, snapshot: Snapshot, run_id: str, staged: bool) -> None:
        store = self.store
        record = store.run_by_id(run_id)
        if record is None:
            return
        usage = rows.run_usage(store, run_id)
        was_in_flight = snapshot.in_flight.pop(run_id, None) is not None
        if record.state in ACTIVE_RUN_STATES:
            snapshot.in_flight[run_id] = InFlight.of(record, usage)
            return
        settled = Settled.of(record, usage)
        recent = snapshot.recent
        if was_in_flight:  # it settled in this transaction
            snapshot.recent_total += 1
            snapshot.usage.add(usage)
            at = bisect.bisect_left(recent, settled.order, key=lambda r: r.order)
            if at < self.held:
                recent.insert(at, settled)
                del recent[self.held :]
            return
        # A settled run changed: its worktree was removed, or (never today) a step
        # was appended after its end.
        held = next((i for i, r in enumerate(recent) if r.id == run_id), None)
        if staged:
            if held is not None:
                snapshot.usage.add(recent[held].usage, -1)
                snapshot.usage.add(usage)
            else:
                # Its old usage is not held: sum every settled run's again.
                snapshot.usage = settled_usage(store)
        if held is not None:
            recent[held] = settled
