"""``post`` through the real operator socket (protocol: "Register or refresh a ticket").

Every case of the protocol text: a new file, a repost, ``--hold``, ``--manual``,
``--at``, terminal tickets, the trigger a ticket already has, and the files and
arguments that are refused without registering anything.

The scheduler is live, so a trigger due now is claimed at once (and its run,
with the test repository's failing agent, settles ``failed``).  Tests that
need a trigger to stay queued make it due in an hour.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sloopd.queue.tickets import TicketFile
from tests.support.tickets import (
    SLOOP_TOML,
    TICKET_ROW_KEYS,
    TRIGGER_ROW_KEYS,
    Operator,
    by_id,
    ids,
    later,
    later_ms,
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


def snapshot(op: Operator) -> tuple[Any, Any, Any]:
    """What a refused post must leave untouched: rows, queue and stored ids."""
    board = op.dashboard()
    truth = op.truth()
    return board["tickets"], board["queued_triggers"], (truth.ticket_ids, truth.trigger_ids)


# --- a new file -------------------------------------------------------------------


def test_a_new_post_registers_a_ready_ticket_with_a_trigger_due_now(op: Operator) -> None:
    op.write("tickets/add-login.md", ticket_text("Add a login form", "Users need to log in."))
    before = now_ms()
    data = op.post("tickets/add-login.md")
    after = now_ms()

    assert set(data) >= {"ticket", "created", "trigger", "trigger_suppressed"}
    assert data["created"] is True
    assert data["trigger_suppressed"] is None
    ticket = data["ticket"]
    assert set(ticket) >= TICKET_ROW_KEYS
    assert ticket == {
        **ticket,
        "id": "T1",
        "name": "add-login",
        "title": "Add a login form",
        "path": "tickets/add-login.md",
        "project": "default",
        "flow": "default",
        "priority": 0,
        "state": "ready",
        "waiting": None,
    }
    assert before <= ticket["created_at_ms"] == ticket["updated_at_ms"] <= after
    trigger = data["trigger"]
    assert set(trigger) == TRIGGER_ROW_KEYS
    assert (trigger["id"], trigger["ticket"]) == ("TR1", "T1")
    assert before <= trigger["created_at_ms"] <= after
    assert before <= trigger["due_at_ms"] <= after

    # Due now: the scheduler claims it at once; the run (agent 'false') fails.
    board = op.settle()
    assert board["queued_triggers"] == []
    assert "queued_activations" not in board
    assert board.get("next_wake") is None
    detail = op.detail("T1")
    assert (detail["body"], detail["manual"], detail["trigger"]) == (
        "Users need to log in.",
        False,
        None,
    )
    assert detail["state"] == "failed"
    assert [run["id"] for run in detail["runs"]] == ["R1"]
    run = op.ok("show", {"ref": "R1"})
    assert (run["kind"], run["value"]["ticket"], run["value"]["trigger"]) == ("run", "T1", "TR1")

    # Reposting the failed ticket refreshes it and queues nothing, --at or not.
    op.write("tickets/add-login.md", ticket_text("Add a login form, again"))
    for args in ({}, {"trigger": later()}):
        data = op.post("tickets/add-login.md", **args)
        assert data["created"] is False
        assert data["ticket"]["title"] == "Add a login form, again"
        assert data["trigger"] is None
        assert data["trigger_suppressed"] == {"reason": "terminal_ticket", "state": "failed"}
    assert op.dashboard()["queued_triggers"] == []


def test_absolute_and_relative_paths_name_the_same_ticket(op: Operator) -> None:
    target = op.write("tickets/billing/fix-rounding.md", ticket_text("Fix rounding"))
    first = op.post(target, trigger=later())  # absolute
    assert first["created"] is True
    assert first["ticket"]["path"] == "tickets/billing/fix-rounding.md"
    assert first["ticket"]["project"] == "billing"
    for again in (
        "tickets/billing/fix-rounding.md",
        "./tickets/../tickets/billing/fix-rounding.md",
    ):
        data = op.post(again)
        assert data["created"] is False, again
        assert data["ticket"]["id"] == "T1"
        assert data["trigger"]["id"] == "TR1"


def test_any_markdown_file_inside_the_repository_can_be_posted(op: Operator) -> None:
    op.write("docs/plans/rollout.markdown", ticket_text("Roll out"))
    op.write("top.md", "No heading here.\n")
    rollout = op.post("docs/plans/rollout.markdown", manual=True)["ticket"]
    top = op.post("top.md", manual=True)["ticket"]
    assert (rollout["name"], rollout["path"], rollout["project"]) == (
        "rollout",
        "docs/plans/rollout.markdown",
        "default",
    )
    assert (top["name"], top["title"], top["project"]) == ("top", "top", "default")


def test_a_symlink_inside_the_repository_registers_its_target(op: Operator) -> None:
    op.write("tickets/real.md", ticket_text("Real"))
    os.symlink(op.repo / "tickets/real.md", op.repo / "tickets/alias.md")
    data = op.post("tickets/alias.md", manual=True)
    assert (data["ticket"]["name"], data["ticket"]["path"]) == ("real", "tickets/real.md")
    assert op.post("tickets/real.md", manual=True)["created"] is False


def test_front_matter_is_indexed(op: Operator) -> None:
    op.write(
        "tickets/billing/invoice.md",
        ticket_text("Invoice totals", "Round half even.", project="finance", priority=5),
    )
    ticket = op.post("tickets/billing/invoice.md", manual=True)["ticket"]
    assert (ticket["project"], ticket["priority"], ticket["flow"]) == ("finance", 5, "default")
    assert op.detail("invoice")["body"] == "Round half even."


def test_post_at_makes_the_trigger_due_then_and_sets_next_wake(op: Operator) -> None:
    soon, later = later_ms(600_000), later_ms(7_200_000)
    op.write("tickets/later.md", ticket_text("Later"))
    op.write("tickets/soon.md", ticket_text("Soon"))
    op.write("tickets/now.md", ticket_text("Now"))

    data = op.post("tickets/later.md", trigger={"at_ms": later})
    assert data["ticket"]["state"] == "ready"
    assert data["trigger"]["due_at_ms"] == later
    assert data["trigger_suppressed"] is None
    assert reason(data["ticket"]) == "scheduled"
    assert data["ticket"]["waiting"]["until_ms"] == later
    assert op.dashboard()["next_wake"] == later

    soon_trigger = op.post("tickets/soon.md", trigger={"at_ms": soon})["trigger"]
    # A held ticket's trigger that is due now stays queued (nothing claims it)
    # and is no future wake-up.
    op.post("tickets/now.md", hold=True)
    now_trigger = op.ok("run", {"ref": "now"})["trigger"]
    board = op.settle()
    assert board["next_wake"] == soon  # the earliest future trigger
    # Queued triggers are listed in due order.
    assert board["queued_triggers"] == [now_trigger, soon_trigger, data["trigger"]]
    assert [t["due_at_ms"] for t in board["queued_triggers"]][1:] == [soon, later]
    waiting = {t["name"]: t["waiting"] for t in board["tickets"]}
    assert waiting["now"]["reason"] == "held"
    assert waiting["soon"]["reason"] == "scheduled"
    assert waiting["soon"]["until_ms"] == soon


def test_post_at_in_the_past_is_due_at_once(op: Operator) -> None:
    op.write("tickets/past.md", ticket_text("Past"))
    data = op.post("tickets/past.md", trigger={"at_ms": 0})
    assert data["trigger"]["due_at_ms"] == 0
    assert data["ticket"]["waiting"] is None
    board = op.settle()
    assert board.get("next_wake") is None
    assert op.detail("past")["runs"][0]["id"] == "R1"


def test_post_hold_registers_a_held_ticket_and_queues_nothing(op: Operator) -> None:
    op.write("tickets/held.md", ticket_text("Held"))
    data = op.post("tickets/held.md", hold=True)
    assert data["created"] is True
    assert data["ticket"]["state"] == "held"
    assert reason(data["ticket"]) == "held"
    assert data["trigger"] is None
    assert data["trigger_suppressed"] is None
    board = op.dashboard()
    assert board["queued_triggers"] == []
    assert ids(board["tickets"]) == ["T1"]
    assert op.detail("T1")["trigger"] is None
    # --at means nothing without a trigger.
    op.write("tickets/held2.md", ticket_text("Held 2"))
    assert op.post("tickets/held2.md", hold=True, trigger={"at_ms": later_ms()})["trigger"] is None
    assert op.dashboard()["queued_triggers"] == []


def test_post_manual_registers_a_ready_ticket_without_a_trigger(op: Operator) -> None:
    op.write("tickets/manual.md", ticket_text("Manual"))
    data = op.post("tickets/manual.md", manual=True)
    assert data["ticket"]["state"] == "ready"
    assert reason(data["ticket"]) == "no_trigger"
    assert data["trigger"] is None
    assert data["trigger_suppressed"] is None
    assert op.dashboard()["queued_triggers"] == []
    detail = op.detail("manual")
    assert (detail["manual"], detail["trigger"]) == (True, None)


def test_explicit_false_flags_and_null_trigger_are_a_plain_post(op: Operator) -> None:
    op.write("tickets/plain.md", ticket_text("Plain"))
    data = op.post("tickets/plain.md", hold=False, manual=False, trigger=later())
    assert (data["ticket"]["state"], data["trigger"]["id"]) == ("ready", "TR1")
    for trigger in (None, {}, {"at_ms": None}):
        data = op.post("tickets/plain.md", hold=False, manual=False, trigger=trigger)
        assert (data["ticket"]["state"], data["trigger"]["id"]) == ("ready", "TR1")
    assert len(op.dashboard()["queued_triggers"]) == 1


# --- reposts ----------------------------------------------------------------------


def test_repost_refreshes_the_indexed_content(op: Operator) -> None:
    op.write("tickets/login.md", ticket_text("Old title", "Old body."))
    first = op.post("tickets/login.md", trigger=later())["ticket"]
    tick()
    op.write(
        "tickets/login.md",
        ticket_text("New title", "New body.", project="auth", priority=4),
    )
    data = op.post("tickets/login.md")
    ticket = data["ticket"]
    assert data["created"] is False
    assert ticket["id"] == first["id"] == "T1"
    assert (ticket["title"], ticket["priority"], ticket["project"]) == ("New title", 4, "auth")
    assert ticket["created_at_ms"] == first["created_at_ms"]
    assert ticket["updated_at_ms"] > first["updated_at_ms"]
    assert op.detail("T1")["body"] == "New body."
    assert op.dashboard()["tickets"] == [ticket]
    assert op.ok("show", {"ref": "project:auth"})["value"]["tickets"] == [ticket]


def test_repost_returns_the_trigger_already_queued(op: Operator) -> None:
    op.write("tickets/once.md", ticket_text("Once"))
    first = op.post("tickets/once.md", trigger=later())["trigger"]
    again = op.post("tickets/once.md")
    assert again["trigger"] == first
    assert again["trigger_suppressed"] is None
    # A different --at neither doubles nor reschedules it.
    for trigger in (later(7_200_000), {"at_ms": 0}):
        rescheduled = op.post("tickets/once.md", trigger=trigger)
        assert rescheduled["trigger"] == first
    board = op.dashboard()
    assert board["queued_triggers"] == [first]
    assert board["next_wake"] == first["due_at_ms"]
    assert op.truth().queued == {"T1": ["TR1"]}


def test_repost_hold_makes_a_ready_ticket_held(op: Operator) -> None:
    op.write("tickets/pause.md", ticket_text("Pause"))
    queued = op.post("tickets/pause.md", trigger=later())["trigger"]
    data = op.post("tickets/pause.md", hold=True)
    assert data["created"] is False
    assert data["ticket"]["state"] == "held"
    assert reason(data["ticket"]) == "held"
    assert (data["trigger"], data["trigger_suppressed"]) == (None, None)
    # The trigger it had stays queued; holding only keeps it from being claimed.
    assert op.dashboard()["queued_triggers"] == [queued]


def test_repost_manual_asks_for_nothing_and_leaves_a_queued_trigger(op: Operator) -> None:
    op.write("tickets/quiet.md", ticket_text("Quiet"))
    queued = op.post("tickets/quiet.md", trigger=later())["trigger"]
    data = op.post("tickets/quiet.md", manual=True)
    assert (data["ticket"]["state"], data["trigger"], data["trigger_suppressed"]) == (
        "ready",
        None,
        None,
    )
    detail = op.detail("quiet")
    assert (detail["manual"], detail["trigger"]) == (True, queued)
    assert reason(detail) == "scheduled"


def test_repost_of_a_held_ticket_keeps_it_held_and_says_why(op: Operator) -> None:
    op.write("tickets/wait.md", ticket_text("Wait"))
    op.post("tickets/wait.md", hold=True)
    data = op.post("tickets/wait.md")
    assert data["ticket"]["state"] == "held"
    assert data["trigger"] is None
    assert data["trigger_suppressed"] == {"reason": "held_ticket", "state": "held"}
    # --at asks for a trigger just as much.
    data = op.post("tickets/wait.md", trigger={"at_ms": later_ms()})
    assert data["trigger_suppressed"] == {"reason": "held_ticket", "state": "held"}
    # --hold and --manual ask for none, so nothing was refused.
    assert op.post("tickets/wait.md", hold=True)["trigger_suppressed"] is None
    assert op.post("tickets/wait.md", manual=True)["trigger_suppressed"] is None
    assert op.dashboard()["queued_triggers"] == []
    assert op.detail("wait")["state"] == "held"


def test_repost_without_manual_of_a_manual_ticket_queues_a_trigger(op: Operator) -> None:
    op.write("tickets/later.md", ticket_text("Later"))
    op.post("tickets/later.md", manual=True)
    data = op.post("tickets/later.md", trigger=later())
    assert data["trigger"] is not None
    assert data["trigger"]["id"] == "TR1"
    assert op.detail("later")["manual"] is False


def test_reposts_of_terminal_and_running_tickets_refresh_but_queue_nothing(
    op: Operator,
) -> None:
    states = {"T1": "merged", "T2": "failed", "T3": "needs_review", "T4": "running"}
    for number, state in enumerate(states.values(), start=1):
        op.write(f"tickets/t{number}.md", ticket_text(f"{state} before"))
        op.post(f"tickets/t{number}.md", trigger=later())
    op.restart(states)
    assert op.dashboard()["queued_triggers"] == []

    for number, (ticket_id, state) in enumerate(states.items(), start=1):
        path = f"tickets/t{number}.md"
        op.write(path, ticket_text(f"{state} after", priority=number))
        expected = (
            {"reason": "running_ticket", "state": state}
            if state == "running"
            else {"reason": "terminal_ticket", "state": state}
        )
        for args in ({}, {"trigger": {"at_ms": later_ms()}}):
            data = op.post(path, **args)
            assert data["created"] is False
            assert data["trigger"] is None, (state, args)
            assert data["trigger_suppressed"] == expected, (state, args)
            ticket = data["ticket"]
            assert (ticket["id"], ticket["state"]) == (ticket_id, state)
            # The index is refreshed all the same.
            assert (ticket["title"], ticket["priority"]) == (f"{state} after", number)
        for flag in ("hold", "manual"):
            data = op.post(path, **{flag: True})
            assert (data["trigger"], data["trigger_suppressed"]) == (None, None), (state, flag)
            assert data["ticket"]["state"] == state, (state, flag)
        detail = op.detail(ticket_id)
        if state == "running":
            assert detail["waiting"] is None
        else:
            assert reason(detail) == "terminal"

    board = op.dashboard()
    assert board["queued_triggers"] == []
    assert "queued_activations" not in board
    assert board.get("next_wake") is None
    # The dashboard lists non-terminal tickets only.
    assert ids(board["tickets"]) == ["T4"]
    truth = op.truth()
    assert truth.queued == {}
    assert truth.states == states


# --- refused posts ------------------------------------------------------------------

BAD_FILES: list[tuple[str, str | bytes | None, str, int | None]] = [
    # (path to post, file content or None for no file, message start, line)
    ("tickets/missing.md", None, "tickets/missing.md: no such file", None),
    ("tickets/notes.txt", "# Notes\n", "tickets/notes.txt: not a Markdown file", None),
    ("tickets/bad-utf8.md", b"# Title\n\xff\n", "tickets/bad-utf8.md:2: not valid UTF-8", 2),
    (
        "tickets/unclosed.md",
        '+++\nflow = "default"\n# T\n',
        "tickets/unclosed.md:1: front matter opened with '+++' is never closed",
        1,
    ),
    (
        "tickets/bad-toml.md",
        '+++\nproject = "x"\n\npriority = = 1\n+++\n',
        "tickets/bad-toml.md:4: front matter is not valid TOML",
        4,
    ),
    (
        "tickets/unknown-key.md",
        '+++\npriority = 1\nowner = "me"\n+++\n',
        "tickets/unknown-key.md:3: unknown front matter key 'owner'",
        3,
    ),
    (
        "tickets/prio-string.md",
        '+++\npriority = "high"\n+++\n',
        "tickets/prio-string.md:2: 'priority' must be an integer",
        2,
    ),
    (
        "tickets/prio-float.md",
        "+++\n\npriority = 1.5\n+++\n",
        "tickets/prio-float.md:3: 'priority' must be an integer",
        3,
    ),
    (
        "tickets/flow-int.md",
        "+++\nflow = 2\n+++\n",
        "tickets/flow-int.md:2: 'flow' must be a string",
        2,
    ),
    (
        "tickets/project-empty.md",
        '+++\nproject = ""\n+++\n',
        "tickets/project-empty.md:2: 'project' must not be empty",
        2,
    ),
    (
        "tickets/unknown-flow.md",
        '+++\npriority = 1\nflow = "fast"\n+++\n',
        "tickets/unknown-flow.md:3: unknown flow 'fast'",
        3,
    ),
    (
        "tickets/-dash.md",
        "# T\n",
        "tickets/-dash.md: the file name '-dash' cannot name a ticket",
        None,
    ),
    # Names git refuses in the run branch sloop/<name>/<attempt> ...
    ("tickets/a..b.md", "# T\n", "tickets/a..b.md: the file name 'a..b' cannot name", None),
    ("tickets/x.lock.md", "# T\n", "tickets/x.lock.md: the file name 'x.lock' cannot", None),
    ("tickets/end..md", "# T\n", "tickets/end..md: the file name 'end.' cannot name", None),
    ("tickets/a@{1}.md", "# T\n", "tickets/a@{1}.md: the file name 'a@{1}' cannot", None),
    # ... and names that would shadow (or be shadowed by) an id in the ladder.
    ("tickets/R1.md", "# T\n", "tickets/R1.md: the file name 'R1' cannot name a ticket", None),
    ("tickets/T3.md", "# T\n", "tickets/T3.md: the file name 'T3' cannot name a ticket", None),
    ("tickets/TR4.md", "# T\n", "tickets/TR4.md: the file name 'TR4' cannot name", None),
]


def test_refused_files_register_nothing(op: Operator) -> None:
    op.write("tickets/good.md", ticket_text("Good"))
    op.post("tickets/good.md", trigger=later())
    before = snapshot(op)
    for path, content, message, line in BAD_FILES:
        if isinstance(content, bytes):
            (op.repo / path).write_bytes(content)
        elif content is not None:
            op.write(path, content)
        err = op.error("post", {"path": path})
        assert err["code"] == "invalid_arguments", path
        assert err["message"].startswith(message), (path, err)
        expected: dict[str, Any] = {"path": path}
        if line is not None:
            expected["line"] = line
        assert err["details"] == expected, path
        assert snapshot(op) == before, path


def test_files_outside_the_repository_are_refused(op: Operator) -> None:
    outside = op.root / "outside.md"
    outside.write_text(ticket_text("Outside"))
    os.symlink(outside, op.repo / "tickets-link.md")
    before = snapshot(op)
    for path in (str(outside), "../outside.md", "tickets-link.md"):
        err = op.error("post", {"path": path})
        assert err["code"] == "invalid_arguments"
        assert err["message"].startswith(f"{path}: outside the repository"), err
        assert err["details"] == {"path": path}
        assert snapshot(op) == before


def test_a_broken_repost_leaves_the_registered_ticket_alone(op: Operator) -> None:
    op.write("tickets/login.md", ticket_text("Login", "Body."))
    op.post("tickets/login.md", trigger=later())
    before = snapshot(op)
    op.write("tickets/login.md", '+++\npriority = "x"\n+++\n# Broken\n')
    err = op.error("post", {"path": "tickets/login.md"})
    assert err["details"] == {"path": "tickets/login.md", "line": 2}
    assert snapshot(op) == before
    assert op.detail("T1")["body"] == "Body."


def test_a_second_file_with_the_same_name_is_a_conflict(op: Operator) -> None:
    op.write("tickets/login.md", ticket_text("Login"))
    op.write("tickets/auth/login.md", ticket_text("Other login"))
    op.post("tickets/login.md", manual=True)
    before = snapshot(op)
    err = op.error("post", {"path": "tickets/auth/login.md"})
    assert err["code"] == "conflict"
    assert err["details"] == {"ticket": "T1", "path": "tickets/login.md"}
    assert "login" in err["message"]
    assert snapshot(op) == before


@pytest.mark.parametrize("verb", ["post", "run"])
def test_the_retired_activation_argument_is_refused(op: Operator, verb: str) -> None:
    op.write("tickets/x.md", ticket_text("X"))
    op.post("tickets/x.md", manual=True)
    before = snapshot(op)
    base = {"path": "tickets/x.md"} if verb == "post" else {"ref": "T1"}
    for activation in ({}, {"at_ms": 0}, True):
        err = op.error(verb, {**base, "activation": activation})
        assert err["code"] == "invalid_arguments"
        assert err["details"]["field"] == "activation"
        assert snapshot(op) == before


@pytest.mark.parametrize("verb", ["post", "run"])
def test_bad_trigger_arguments_are_refused(op: Operator, verb: str) -> None:
    op.write("tickets/x.md", ticket_text("X"))
    op.post("tickets/x.md", manual=True)
    before = snapshot(op)
    base: dict[str, Any] = {"path": "tickets/x.md"} if verb == "post" else {"ref": "x"}
    cases: list[tuple[Any, str]] = [
        ({"at_ms": 1, "activation": 1}, "trigger.activation"),
        ({"due_at_ms": 1}, "trigger.due_at_ms"),
        ({"at_ms": -1}, "trigger.at_ms"),
        ({"at_ms": 1.5}, "trigger.at_ms"),
        ({"at_ms": "10m"}, "trigger.at_ms"),
        ({"at_ms": True}, "trigger.at_ms"),
        (1_700_000_000_000, "trigger"),
        ("10m", "trigger"),
    ]
    for trigger, field in cases:
        err = op.error(verb, {**base, "trigger": trigger})
        assert err["code"] == "invalid_arguments", trigger
        assert err["details"]["field"] == field, trigger
        assert snapshot(op) == before


def test_post_arguments_are_checked(op: Operator) -> None:
    op.write("tickets/x.md", ticket_text("X"))
    cases: list[tuple[dict[str, Any], str]] = [
        ({}, "path"),
        ({"path": ""}, "path"),
        ({"path": 3}, "path"),
        ({"path": "tickets/x.md", "hold": "yes"}, "hold"),
        ({"path": "tickets/x.md", "manual": 1}, "manual"),
        ({"path": "tickets/x.md", "paths": ["a"]}, "paths"),
    ]
    for args, field in cases:
        err = op.error("post", args)
        assert (err["code"], err["details"]["field"]) == ("invalid_arguments", field), args
    assert op.dashboard()["tickets"] == []


def test_an_at_ms_beyond_64_bits_is_invalid(op: Operator) -> None:
    op.write("tickets/x.md", ticket_text("X"))
    err = op.error("post", {"path": "tickets/x.md", "trigger": {"at_ms": 2**63}})
    assert err["code"] == "invalid_arguments"


def test_a_priority_beyond_64_bits_is_invalid(op: Operator) -> None:
    op.write("tickets/x.md", "+++\npriority = 99999999999999999999\n+++\n")
    err = op.error("post", {"path": "tickets/x.md"})
    assert (err["code"], err["details"]) == (
        "invalid_arguments",
        {"path": "tickets/x.md", "line": 2},
    )


# --- sloop.toml -------------------------------------------------------------------

CUSTOM_TOML = (
    SLOOP_TOML
    + """
[repo]
tickets = "work/items"

[[flows.fast.stages]]
name = "merge"
action = "ff_only"
"""
)


def test_sloop_toml_sets_the_tickets_folder_and_the_flows(sandbox: Path) -> None:
    op = Operator(sandbox, queue_repo(sandbox, {"sloop.toml": CUSTOM_TOML}))
    try:
        op.write("work/items/alpha/deploy.md", ticket_text("Deploy", flow="fast"))
        op.write("tickets/beta/other.md", ticket_text("Other"))
        op.write("work/items/turbo.md", ticket_text("Turbo", flow="turbo"))
        deploy = op.post("work/items/alpha/deploy.md", manual=True)["ticket"]
        assert (deploy["project"], deploy["flow"]) == ("alpha", "fast")
        # 'tickets/' is an ordinary folder here: its sub-folders are no projects.
        other = op.post("tickets/beta/other.md", manual=True)["ticket"]
        assert other["project"] == "default"
        err = op.error("post", {"path": "work/items/turbo.md"})
        assert err["message"].startswith("work/items/turbo.md:2: unknown flow 'turbo'")
        assert "default, fast" in err["message"]
    finally:
        op.stop()


# --- ids ------------------------------------------------------------------------


def test_ids_are_sequential_and_unique(op: Operator) -> None:
    expected_trigger = 0
    for number in range(1, 13):
        op.write(f"tickets/n{number}.md", ticket_text(f"N{number}"))
        flags: dict[str, Any] = (
            {"hold": True} if number % 4 == 0 else {"manual": True} if number % 5 == 0 else {}
        )
        data = op.post(f"tickets/n{number}.md", trigger=later(), **flags)
        assert data["ticket"]["id"] == f"T{number}"
        if flags:
            assert data["trigger"] is None
        else:
            expected_trigger += 1
            assert data["trigger"]["id"] == f"TR{expected_trigger}"
    board = op.dashboard()
    ticket_ids = ids(board["tickets"])
    assert ticket_ids == [f"T{n}" for n in range(12, 0, -1)]  # newest first
    trigger_ids = ids(board["queued_triggers"])
    assert sorted(trigger_ids, key=lambda t: int(t[2:])) == [
        f"TR{n}" for n in range(1, expected_trigger + 1)
    ]
    assert len(set(trigger_ids)) == len(trigger_ids)
    assert {t["ticket"] for t in board["queued_triggers"]} == {
        row["id"] for row in board["tickets"] if reason(row) == "scheduled"
    }


def test_ordinals_are_never_reused(op: Operator) -> None:
    for name in ("a", "b", "c"):
        op.write(f"tickets/{name}.md", ticket_text(name.upper()))
        op.post(f"tickets/{name}.md", trigger=later())
    # While stopped: TR1 is consumed by something (cancelled), and the newest
    # ticket and trigger rows vanish altogether.  Neither number comes back.
    op.restart(
        extra=[
            ("UPDATE triggers SET state = 'cancelled' WHERE id = 'TR1'", ()),
            ("DELETE FROM triggers WHERE id = 'TR3'", ()),
            ("DELETE FROM tickets WHERE id = 'T3'", ()),
        ]
    )
    assert by_id(op.dashboard()["tickets"]).keys() == {"T1", "T2"}
    run = op.ok("run", {"ref": "a", "trigger": later()})
    assert run["trigger"]["id"] == "TR4"
    op.write("tickets/d.md", ticket_text("D"))
    data = op.post("tickets/d.md", trigger=later())
    assert (data["ticket"]["id"], data["trigger"]["id"]) == ("T4", "TR5")
    data = op.post("tickets/c.md", trigger=later())
    assert (data["ticket"]["id"], data["trigger"]["id"]) == ("T5", "TR6")


def test_a_claimed_trigger_keeps_its_number(op: Operator) -> None:
    op.write("tickets/a.md", ticket_text("A"))
    assert op.post("tickets/a.md")["trigger"]["id"] == "TR1"
    op.settle()  # TR1 claimed by run R1, which failed
    again = op.ok("run", {"ref": "a", "trigger": later()})
    assert again["ticket"]["state"] == "ready"
    assert again["trigger"]["id"] == "TR2"
    assert op.truth().trigger_ids == ["TR1", "TR2"]


def test_ticket_file_fields_match_the_parser(op: Operator) -> None:
    """The row is the parser's TicketFile, field for field (no second interpretation)."""
    text = ticket_text("Parsed", "Body text.", project="ops", priority=-1)
    op.write("tickets/team/parsed.md", text)
    ticket = op.post("tickets/team/parsed.md", manual=True)["ticket"]
    expected = TicketFile(
        name="parsed",
        path="tickets/team/parsed.md",
        title="Parsed",
        body="Body text.",
        flow="default",
        project="ops",
        priority=-1,
    )
    row = {**ticket, "body": op.detail("T1")["body"]}
    for field in ("name", "path", "title", "body", "flow", "project", "priority"):
        assert row[field] == getattr(expected, field), field
