"""``hold``, ``ready`` and ``run`` through the real operator socket (DESIGN "States").

Triggers that must stay queued are due in an hour: the scheduler is live and
claims any trigger that is due for a ``ready`` ticket.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.tickets import (
    Operator,
    by_id,
    later,
    now_ms,
    queue_repo,
    reason,
    tick,
    ticket_text,
)


@pytest.fixture
def op(sandbox: Path) -> Iterator[Operator]:
    operator = Operator(sandbox, queue_repo(sandbox))
    try:
        yield operator
    finally:
        operator.stop()


def register(op: Operator, name: str, **args: Any) -> dict[str, Any]:
    """Write ``tickets/<name>.md`` and post it; the post's answer."""
    op.write(f"tickets/{name}.md", ticket_text(name.title()))
    return op.post(f"tickets/{name}.md", **args)


# --- references ---------------------------------------------------------------------


def test_every_ticket_reference_form_reaches_the_ticket(op: Operator) -> None:
    register(op, "other", manual=True)
    register(op, "login", trigger=later())
    forms = [
        "T2",
        "login",
        "tickets/login.md",
        "./tickets/login.md",
        str(op.repo / "tickets/login.md"),
    ]
    for ref in forms:
        held = op.ok("hold", {"ref": ref})["ticket"]
        assert (held["id"], held["state"]) == ("T2", "held"), ref
        readied = op.ok("ready", {"ref": ref})["ticket"]
        assert (readied["id"], readied["state"]) == ("T2", "ready"), ref
        ran = op.ok("run", {"ref": ref, "trigger": later()})
        assert (ran["ticket"]["id"], ran["trigger"]["ticket"]) == ("T2", "T2"), ref
    assert by_id(op.dashboard()["tickets"])["T1"]["state"] == "ready"


def test_unknown_references_are_not_found(op: Operator) -> None:
    register(op, "login", manual=True)
    for verb in ("hold", "ready", "run"):
        for ref in ("T9", "logout", "tickets/logout.md", "R1", "login#1", "project:default", "log"):
            err = op.error(verb, {"ref": ref})
            assert (err["code"], err["details"]) == ("not_found", {"ref": ref}), (verb, ref)
        assert op.error(verb, {})["details"]["field"] == "ref"
        assert op.error(verb, {"ref": ""})["code"] == "invalid_arguments"
    assert op.truth().trigger_ids == []


def test_a_ticket_id_wins_over_a_ticket_named_like_one(op: Operator) -> None:
    # Since 0.6.0 post refuses such a name; a store from an older release may hold one.
    named = register(op, "old-t2", trigger=later())["ticket"]  # id T1, renamed "T2"
    other = register(op, "b", trigger=later())["ticket"]  # id T2
    assert (named["id"], other["id"]) == ("T1", "T2")
    op.restart(extra=[("UPDATE tickets SET name = 'T2' WHERE id = 'T1'", ())])
    assert op.ok("hold", {"ref": "T2"})["ticket"]["name"] == "b"
    rows = by_id(op.dashboard()["tickets"])
    assert (rows["T1"]["state"], rows["T2"]["state"]) == ("ready", "held")
    # The named one is still reachable by its path.
    assert op.ok("hold", {"ref": "tickets/old-t2.md"})["ticket"]["id"] == "T1"


# --- hold and ready -----------------------------------------------------------------


def test_hold_keeps_the_trigger_queued_and_ready_releases_the_same_one(op: Operator) -> None:
    trigger = register(op, "login", trigger=later())["trigger"]
    held = op.ok("hold", {"ref": "login"})
    assert set(held) >= {"ticket"}
    assert held["ticket"]["state"] == "held"
    assert reason(held["ticket"]) == "held"
    board = op.dashboard()
    assert board["queued_triggers"] == [trigger]
    assert reason(board["tickets"][0]) == "held"
    assert op.detail("login")["trigger"] == trigger

    readied = op.ok("ready", {"ref": "login"})["ticket"]
    assert readied["state"] == "ready"
    assert reason(readied) == "scheduled"
    assert readied["waiting"]["until_ms"] == trigger["due_at_ms"]
    assert op.dashboard()["queued_triggers"] == [trigger]
    assert op.truth().queued == {"T1": ["TR1"]}


def test_hold_on_held_and_ready_on_ready_change_nothing(op: Operator) -> None:
    register(op, "login", trigger=later())
    ready_row = op.detail("login")
    tick()
    again = op.ok("ready", {"ref": "login"})["ticket"]
    assert again["state"] == "ready"
    assert again["updated_at_ms"] == ready_row["updated_at_ms"]

    held_row = op.ok("hold", {"ref": "login"})["ticket"]
    tick()
    again = op.ok("hold", {"ref": "login"})["ticket"]
    assert again == held_row
    assert len(op.dashboard()["queued_triggers"]) == 1


def test_ready_on_a_held_ticket_without_a_trigger_queues_one_due_now(op: Operator) -> None:
    register(op, "login", hold=True)
    assert op.truth().trigger_ids == []
    before = now_ms()
    readied = op.ok("ready", {"ref": "login"})["ticket"]
    after = now_ms()
    assert readied["state"] == "ready"
    assert readied["waiting"] is None  # due now: nothing holds it back
    # The scheduler claims it at once: run R1 was started by that trigger.
    op.settle()
    truth = op.truth()
    assert truth.trigger_ids == ["TR1"]
    assert before <= truth.due["TR1"] <= after
    run = op.ok("show", {"ref": "R1"})["value"]
    assert (run["ticket"], run["trigger"]) == ("T1", "TR1")


def test_ready_on_a_held_manual_ticket_queues_nothing(op: Operator) -> None:
    register(op, "login", manual=True)
    op.ok("hold", {"ref": "login"})
    readied = op.ok("ready", {"ref": "login"})["ticket"]
    assert readied["state"] == "ready"
    assert reason(readied) == "no_trigger"
    assert op.dashboard()["queued_triggers"] == []
    assert op.truth().trigger_ids == []


def test_hold_and_ready_refuse_running_and_terminal_tickets(op: Operator) -> None:
    states = {"T1": "running", "T2": "merged", "T3": "failed", "T4": "needs_review"}
    for name in ("a", "b", "c", "d"):
        register(op, name, manual=True)
    op.restart(states)
    for verb in ("hold", "ready"):
        for ticket_id, state in states.items():
            err = op.error(verb, {"ref": ticket_id})
            assert err["code"] == "conflict", (verb, ticket_id)
            assert err["details"] == {"ticket": ticket_id, "state": state}
            assert ticket_id in err["message"]
    assert op.truth().states == states


# --- run ------------------------------------------------------------------------


def test_run_queues_a_trigger_for_a_manual_ticket_and_never_doubles_it(op: Operator) -> None:
    register(op, "login", manual=True)
    at = later()
    first = op.ok("run", {"ref": "login", "trigger": at})
    assert set(first) >= {"ticket", "trigger"}
    assert first["trigger"]["due_at_ms"] == at["at_ms"]
    assert first["trigger"]["id"] == "TR1"
    assert first["ticket"]["state"] == "ready"
    assert reason(first["ticket"]) == "scheduled"
    assert op.dashboard()["next_wake"] == at["at_ms"]
    # Again, with or without a time: the queued trigger is returned as it is.
    for args in ({}, {"trigger": later(60_000)}, {"trigger": {"at_ms": 0}}):
        again = op.ok("run", {"ref": "login", **args})
        assert again["trigger"] == first["trigger"], args
    assert op.truth().queued == {"T1": ["TR1"]}


def test_run_without_a_time_is_due_now_and_claimed(op: Operator) -> None:
    register(op, "login", manual=True)
    before = now_ms()
    data = op.ok("run", {"ref": "login"})
    assert before <= data["trigger"]["due_at_ms"] <= now_ms()
    assert data["ticket"]["waiting"] is None
    op.settle()
    detail = op.detail("login")
    assert [run["id"] for run in detail["runs"]] == ["R1"]
    assert detail["state"] == "failed"  # the test agent always fails


def test_run_on_a_held_ticket_queues_a_trigger_and_keeps_it_held(op: Operator) -> None:
    register(op, "login", hold=True)
    data = op.ok("run", {"ref": "login"})
    assert data["ticket"]["state"] == "held"
    assert reason(data["ticket"]) == "held"
    # Due now, but held: nothing claims it.
    board = op.settle()
    assert board["queued_triggers"] == [data["trigger"]]
    assert board["runs"] == []
    assert op.ok("run", {"ref": "login"})["trigger"] == data["trigger"]


def test_run_starts_the_next_attempt_of_a_failed_ticket(op: Operator) -> None:
    register(op, "login")  # due now: claimed, and the run fails
    op.settle()
    assert op.detail("login")["state"] == "failed"
    data = op.ok("run", {"ref": "login"})
    assert data["ticket"]["state"] == "ready"
    assert data["trigger"]["id"] == "TR2"
    # Due now: attempt 2 is claimed and settles like the first.
    op.settle()
    runs = op.detail("login")["runs"]
    assert [(run["id"], run["alias"], run["attempt"]) for run in runs] == [
        ("R2", "login#2", 2),
        ("R1", "login#1", 1),
    ]


def test_run_on_needs_review_readies_it_and_on_merged_or_running_is_a_conflict(
    op: Operator,
) -> None:
    for name in ("review", "done", "busy"):
        register(op, name, manual=True)
    op.restart({"T1": "needs_review", "T2": "merged", "T3": "running"})

    data = op.ok("run", {"ref": "review", "trigger": later()})
    assert data["ticket"]["state"] == "ready"
    assert data["trigger"]["ticket"] == "T1"
    for ticket_id, state in (("T2", "merged"), ("T3", "running")):
        err = op.error("run", {"ref": ticket_id, "trigger": later()})
        assert err["code"] == "conflict"
        assert err["details"] == {"ticket": ticket_id, "state": state}
    truth = op.truth()
    assert truth.states == {"T1": "ready", "T2": "merged", "T3": "running"}
    assert truth.queued == {"T1": ["TR1"]}


def test_waiting_reasons_over_a_queue(op: Operator) -> None:
    register(op, "held", hold=True)
    register(op, "manual", manual=True)
    at = later()
    register(op, "scheduled", trigger=at)
    register(op, "review", manual=True)
    op.restart({"T4": "needs_review"})
    rows = by_id(op.dashboard()["tickets"])
    assert {tid: reason(row) for tid, row in rows.items()} == {
        "T1": "held",
        "T2": "no_trigger",
        "T3": "scheduled",
    }
    assert rows["T3"]["waiting"]["until_ms"] == at["at_ms"]
    assert reason(op.detail("T4")) == "terminal"
