"""A property test of the queue: random posts, reposts, holds, readies, runs,
pauses and resumes against one real daemon, checked after every step against a
model and against the store itself.

The daemon runs with ``SLOOPD_READ_MODEL_AUDIT`` set (sloopd/views/audit.py): after
every transaction it commits and every dashboard it serves, it derives its read
model from the store from scratch and records whether the two are equal.  Every
step asserts that every comparison since the last step was equal, and that the
step's own dashboard was compared: the read model, revised in memory from the
writes' notes, never drifts from the store it mirrors.

The scheduler is live and the test repository's agent always fails, so the
model knows what the daemon does with a trigger that is due for a ``ready``
ticket: a run claims it and the ticket ends ``failed``.  Every step waits for
that to happen (``Operator.settle``) before comparing.

One daemon serves every example of the test; the examples share it, so the
model of the daemon's world lives outside the state machine and each example
registers tickets under fresh names.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import orjson
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    invariant,
    rule,
    run_state_machine_as_test,
)

from sloopd.wire.api import TERMINAL_TICKET_STATES
from tests.support.tickets import Operator, later, queue_repo, reason, ticket_text


@dataclass
class Ticket:
    id: str
    name: str
    state: str
    manual: bool
    trigger: str | None = None  # the queued trigger's id
    due_now: bool = False  # whether that trigger is due (else it is due in an hour)


@dataclass
class World:
    """The model: every ticket the daemon holds, and the next ordinals."""

    tickets: dict[str, Ticket] = field(default_factory=dict)
    triggers: int = 0
    runs: int = 0
    names: Iterator[int] = field(default_factory=itertools.count)
    paused: bool = False  # the gate: while paused nothing is claimed
    audited: int = 0  # how much of the audit file the steps have read

    def new_trigger(self, ticket: Ticket, due_now: bool) -> str:
        self.triggers += 1
        ticket.trigger, ticket.due_now = f"TR{self.triggers}", due_now
        return ticket.trigger

    def ensure_trigger(self, ticket: Ticket, due_now: bool) -> str:
        """A ticket has at most one queued trigger: a new one only when it has none."""
        return ticket.trigger or self.new_trigger(ticket, due_now)

    def schedule(self) -> None:
        """The scheduler: a due trigger of a ready ticket becomes a run, which fails."""
        if self.paused:
            return
        for ticket in self.tickets.values():
            if ticket.state == "ready" and ticket.trigger is not None and ticket.due_now:
                self.runs += 1
                ticket.state, ticket.trigger, ticket.due_now = "failed", None, False


AUDIT_FILE = "read-model-audit.jsonl"


@pytest.fixture
def op(sandbox: Path) -> Iterator[Operator]:
    audit = str(sandbox / AUDIT_FILE)
    operator = Operator(sandbox, queue_repo(sandbox), SLOOPD_READ_MODEL_AUDIT=audit)
    try:
        yield operator
    finally:
        operator.stop()


class QueueMachine(RuleBasedStateMachine):
    """Rules are the operator's verbs; the invariant compares the three views.

    ``op`` and ``world`` are bound by the test (one daemon, one model per test).
    """

    op: ClassVar[Operator]
    world: ClassVar[World]
    tickets = Bundle("tickets")

    def trigger_arg(self, due_now: bool) -> dict[str, Any]:
        return {} if due_now else {"trigger": later()}

    def settled(self) -> None:
        self.op.settle()
        self.world.schedule()

    @rule(target=tickets, hold=st.booleans(), manual=st.booleans(), due_now=st.booleans())
    def post_new(self, hold: bool, manual: bool, due_now: bool) -> str:
        name = f"q{next(self.world.names)}"
        self.op.write(f"tickets/{name}.md", ticket_text(f"Ticket {name}"))
        data = self.op.post(
            f"tickets/{name}.md", hold=hold, manual=manual, **self.trigger_arg(due_now)
        )
        ticket = Ticket(
            id=f"T{len(self.world.tickets) + 1}",
            name=name,
            state="held" if hold else "ready",
            manual=manual,
        )
        self.world.tickets[ticket.id] = ticket
        expected = None if hold or manual else self.world.new_trigger(ticket, due_now)
        assert data["created"] is True
        assert (data["ticket"]["id"], data["ticket"]["state"]) == (ticket.id, ticket.state)
        assert (data["trigger"] or {}).get("id") == expected
        assert data["trigger_suppressed"] is None
        self.settled()
        return ticket.id

    @rule(
        ticket_id=tickets,
        hold=st.booleans(),
        manual=st.booleans(),
        due_now=st.booleans(),
        title=st.sampled_from(["Same", "Edited"]),
    )
    def post_again(
        self, ticket_id: str, hold: bool, manual: bool, due_now: bool, title: str
    ) -> None:
        ticket = self.world.tickets[ticket_id]
        self.op.write(f"tickets/{ticket.name}.md", ticket_text(title))
        data = self.op.post(
            f"tickets/{ticket.name}.md", hold=hold, manual=manual, **self.trigger_arg(due_now)
        )
        ticket.manual = manual
        if hold and ticket.state == "ready":
            ticket.state = "held"
        expected, suppressed = None, None
        if not (hold or manual):
            if ticket.state == "ready":
                expected = self.world.ensure_trigger(ticket, due_now)
            elif ticket.state in TERMINAL_TICKET_STATES:
                suppressed = {"reason": "terminal_ticket", "state": ticket.state}
            else:
                suppressed = {"reason": f"{ticket.state}_ticket", "state": ticket.state}
        assert data["created"] is False
        assert (data["ticket"]["title"], data["ticket"]["state"]) == (title, ticket.state)
        assert (data["trigger"] or {}).get("id") == expected
        assert data["trigger_suppressed"] == suppressed
        self.settled()

    @rule(ticket_id=tickets)
    def hold_ticket(self, ticket_id: str) -> None:
        ticket = self.world.tickets[ticket_id]
        if ticket.state in ("ready", "held"):
            ticket.state = "held"
            assert self.op.ok("hold", {"ref": ticket.name})["ticket"]["state"] == "held"
        else:
            assert self.op.error("hold", {"ref": ticket.name})["code"] == "conflict"
        self.settled()

    @rule(ticket_id=tickets)
    def ready_ticket(self, ticket_id: str) -> None:
        ticket = self.world.tickets[ticket_id]
        if ticket.state in ("ready", "held"):
            if ticket.state == "held" and not ticket.manual:
                self.world.ensure_trigger(ticket, due_now=True)
            ticket.state = "ready"
            assert self.op.ok("ready", {"ref": ticket.id})["ticket"]["state"] == "ready"
        else:
            assert self.op.error("ready", {"ref": ticket.id})["code"] == "conflict"
        self.settled()

    @rule(ticket_id=tickets, due_now=st.booleans())
    def run_ticket(self, ticket_id: str, due_now: bool) -> None:
        ticket = self.world.tickets[ticket_id]
        # merged and running never happen here: runs fail, and settle waits them out.
        if ticket.state in ("failed", "needs_review"):
            ticket.state = "ready"
        expected = self.world.ensure_trigger(ticket, due_now)
        data = self.op.ok("run", {"ref": f"tickets/{ticket.name}.md", **self.trigger_arg(due_now)})
        assert (data["ticket"]["state"], data["trigger"]["id"]) == (ticket.state, expected)
        self.settled()

    @rule()
    def pause_gate(self) -> None:
        gate = self.op.ok("pause", {"reason": "property"})["gate"]
        assert gate["state"] == "paused"
        self.world.paused = True
        self.settled()

    @rule()
    def resume_gate(self) -> None:
        assert self.op.ok("resume")["gate"]["state"] == "open"
        self.world.paused = False
        self.settled()

    @rule(limit=st.integers(min_value=1, max_value=30))
    def show_recent(self, limit: int) -> None:
        board = self.op.dashboard(limit=limit)
        assert board["recent_limit"] == limit
        assert board["recent_total"] == self.world.runs
        assert len(board["recent"]) == min(limit, self.world.runs)
        finished = [(r["finished_at_ms"], int(r["id"][1:])) for r in board["recent"]]
        assert finished == sorted(finished, reverse=True)

    @invariant()
    def the_read_model_equals_a_fresh_derivation(self) -> None:
        """Every commit and every dashboard since the last step, compared by the daemon."""
        self.op.dashboard()  # one comparison at least: this dashboard's
        path = self.op.root / AUDIT_FILE
        lines = path.read_bytes().splitlines()[self.world.audited :]
        self.world.audited += len(lines)
        audits = [orjson.loads(line) for line in lines]
        assert any(a["at"] == "show" for a in audits), audits
        unequal = [a for a in audits if not a["equal"]]
        assert unequal == [], unequal[:3]
        epochs = [a["epoch"] for a in audits]
        assert epochs == sorted(epochs), "the epoch went back"

    @invariant()
    def dashboard_matches_model_and_store(self) -> None:
        board = self.op.dashboard()
        truth = self.op.truth()
        assert board["gate"]["state"] == ("paused" if self.world.paused else "open")
        live = {
            t.id: t for t in self.world.tickets.values() if t.state not in TERMINAL_TICKET_STATES
        }
        rows = {row["id"]: row for row in board["tickets"]}

        # Non-terminal tickets: the model, the dashboard and the store agree.
        assert set(rows) == set(live) == truth.nonterminal
        assert truth.states == {t.id: t.state for t in self.world.tickets.values()}
        for ticket_id, row in rows.items():
            ticket = live[ticket_id]
            assert row["state"] == ticket.state, ticket
            if ticket.state == "held":
                assert reason(row) == "held"
            elif ticket.trigger is None:
                assert reason(row) == "no_trigger", ticket
            elif ticket.due_now:  # only a closed gate leaves a due trigger queued
                assert self.world.paused
                assert reason(row) == "cooldown", ticket
            else:
                assert reason(row) == "scheduled", ticket

        # Queued triggers: at most one per ticket, the same in all three views.
        queued = {t["ticket"]: t["id"] for t in board["queued_triggers"]}
        assert len(queued) == len(board["queued_triggers"])
        assert queued == {t.id: t.trigger for t in self.world.tickets.values() if t.trigger}
        assert truth.queued == {ticket: [trigger] for ticket, trigger in queued.items()}
        assert truth.queued_count == len(board["queued_triggers"])
        assert "queued_activations" not in board  # removed in 0.5.0

        # Every claimed trigger became one run, and every run has settled.
        assert board["runs"] == []
        assert board["recent_total"] == self.world.runs
        assert len(truth.trigger_ids) == self.world.triggers


def test_the_dashboard_always_tells_the_stored_truth(op: Operator) -> None:
    class Queue(QueueMachine):
        pass

    Queue.op, Queue.world = op, World()
    run_state_machine_as_test(
        Queue,
        settings=settings(
            max_examples=25,
            stateful_step_count=10,
            deadline=None,
            database=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
        ),
    )
