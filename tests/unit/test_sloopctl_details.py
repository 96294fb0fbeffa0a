"""The terminal's small items of issue 26, without a daemon: one token rule, ``show``
folded at words, a panel's seats and unreached stages in the follow view, the next
commands after a failure, the refusal to follow a name nothing carries, ``--version``.

The same behaviours against a real daemon under a pseudo-terminal are
tests/integration/test_terminal_details.py's.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from importlib.metadata import version
from typing import Any

import pytest
from click.testing import CliRunner

from sloopctl.cli import main
from sloopctl.fold import fold, fold_line
from sloopctl.follow import unfollowable
from sloopctl.layout import painter
from sloopctl.next_steps import next_commands, next_lines
from sloopctl.render import render, stages_summary
from sloopctl.stages_view import stages_section
from sloopctl.usage_text import count, usage_text
from sloopctl.watch import columns, fit, frame
from tests.unit.test_sloopctl_cli import CLEAN_ENV, FakeDaemon
from tests.unit.test_sloopctl_follow import Script, sloopctl
from tests.unit.test_sloopctl_follow import fake as fake  # the fixture

NOW = 1_700_000_100_000

# The one table both renderers follow (the web's copy: tests/web/test_web_details.py).
COUNTS = [
    (0, "0"),
    (950, "950"),
    (1000, "1.0k"),
    (1049, "1.0k"),
    (1050, "1.1k"),
    (1250, "1.3k"),  # halves up, where float formatting would round to even
    (9949, "9.9k"),
    (9950, "10k"),
    (52_245, "52k"),
    (999_499, "999k"),
    (999_500, "1.0M"),
    (1_234_567, "1.2M"),
]
USAGES: list[tuple[Any, str]] = [
    (None, "-"),
    (
        {
            "input_tokens": 52_245,
            "output_tokens": 1800,
            "cached_tokens": 40_211,
            "cost_usd": 0.0421,
        },
        "52k in (40k cached), 1.8k out, $0.0421",
    ),
    ({"input_tokens": 300, "output_tokens": 30, "cached_tokens": 0}, "300 in, 30 out"),
    ({"input_tokens": 12, "output_tokens": 3, "cost_usd": 12.5}, "12 in, 3 out, $12.5000"),
]


@pytest.mark.parametrize(("n", "shown"), COUNTS)
def test_token_counts_are_cut_one_way(n: int, shown: str) -> None:
    assert count(n) == shown


@pytest.mark.parametrize(("usage", "shown"), USAGES)
def test_usage_reads_in_with_the_cached_part_then_out_then_the_cost(usage: Any, shown: str) -> None:
    assert usage_text(usage) == shown


# --- folding ----------------------------------------------------------------------


def dashboard_data() -> dict[str, Any]:
    long_name = "rewrite-the-authentication-middleware-for-sessions"
    reason = (
        "stage 'implement' failed on execution 1: exited with code 3 after the compiler "
        "refused the generated migration"
    )
    return {
        "kind": "dashboard",
        "daemon": {"version": "0.8.0", "pid": 12, "uptime_ms": 5000},
        "gate": {"state": "open"},
        "runs": [],
        "queued_triggers": [],
        "tickets": [
            {
                "id": "T1",
                "name": long_name,
                "state": "held",
                "priority": 0,
                "updated_at_ms": NOW,
                "waiting": {"reason": "held", "message": "held by the operator; ready it"},
            }
        ],
        "recent": [
            {"id": "R1", "alias": "x#1", "state": "failed", "finished_at_ms": NOW, "reason": reason}
        ],
        "recent_total": 1,
    }


def words_of(text: str) -> set[str]:
    return set(re.sub(r"\x1b\[[0-9;]*m", "", text).split())


@pytest.mark.parametrize("colour", [False, True])
def test_show_folds_at_words_within_the_width(colour: bool) -> None:
    whole = render("show", dashboard_data(), NOW, colour)
    folded = fold(whole, 59)
    plain = re.sub(r"\x1b\[[0-9;]*m", "", folded)
    assert all(columns(line) <= 59 for line in plain.splitlines()), plain
    assert words_of(folded) == words_of(whole)  # no word was cut in two, none lost
    # A reason continues under its own column, not at the left edge.
    lines = plain.splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("R1 "))
    column = lines[first].index("stage 'implement'")
    assert lines[first + 1].startswith(" " * column)
    assert lines[first + 1][column] != " "


def test_a_short_line_is_left_alone_and_a_word_wider_than_a_line_is_clipped() -> None:
    assert fold_line("short line", 40) == ["short line"]
    folded = fold_line("path " + "x" * 80, 30)
    assert folded[0] == "path"
    assert folded[1].endswith("…")
    assert all(columns(line) <= 30 for line in folded)


# --- the follow view's frame ----------------------------------------------------


def panel_run() -> dict[str, Any]:
    seats = [
        {"reviewer": 0, "target": "careful", "verdict": "pass", "confidence": "high",
         "reason": "reads well"},
        {"reviewer": 1, "target": "strict", "verdict": "fail", "confidence": "low",
         "reason": "missing tests"},
    ]  # fmt: skip
    return {
        "id": "R3",
        "alias": "fix#1",
        "ticket": "T2",
        "state": "needs_review",
        "terminal": True,
        "stages": [
            {
                "stage": "implement",
                "attempt": 1,
                "state": "passed",
                "duration_ms": 4000,
                "exit_code": 0,
            },
            {
                "stage": "review",
                "attempt": 1,
                "state": "failed",
                "duration_ms": 3000,
                "reason": "1 of 2 seats passed; quorum 2",
                "reviewers": seats,
            },
            {"stage": "merge", "attempt": 0, "state": "pending", "unreached": True},
        ],
    }


def test_a_panel_shows_a_row_per_seat_and_the_failing_seats_reason() -> None:
    lines = [fit(line, 200, painter(False)) for line in frame(panel_run(), [], None, NOW)]
    assert lines[2].split()[:3] == ["✗", "review#1", "failed"]
    assert lines[3] == "      ✓ seat 0 careful  pass  high  reads well"
    assert lines[4] == "      ✗ seat 1 strict  fail  low  missing tests"
    assert lines[5].split()[:3] == ["-", "merge", "not"]  # not reached, not pending
    assert "pending" not in "\n".join(lines)


def test_a_settled_runs_unreached_stages_read_not_reached_in_show() -> None:
    table = "\n".join(stages_section(panel_run()["stages"], NOW, painter(False)))
    merge = next(line for line in table.splitlines() if line.startswith("merge"))
    assert "not reached" in merge
    assert stages_summary(panel_run()["stages"]) == "implement✓ review✗ merge-"
    running = [{"stage": "merge", "attempt": 0, "state": "pending", "unreached": False}]
    assert "pending" in "\n".join(stages_section(running, NOW, painter(False)))


# --- next commands --------------------------------------------------------------


def test_a_failed_run_suggests_its_failed_executions_logs() -> None:
    run = panel_run()
    assert next_commands(run, details=True) == [
        "sloopctl logs R3 --stage review#1",
        "sloopctl show R3",
        "sloopctl diff R3",
        "sloopctl resolve R3 --merged|--dismissed",
        "sloopctl run T2",
    ]
    shown = render("show", {"kind": "run", "value": run}, NOW, False).splitlines()
    assert shown[-4:] == [
        "next: sloopctl logs R3 --stage review#1",
        "next: sloopctl diff R3",
        "next: sloopctl resolve R3 --merged|--dismissed",
        "next: sloopctl run T2",
    ]
    # A gating failure is named before an advisory one; an aborted run points at its successor.
    run["stages"].append({"stage": "lint", "attempt": 1, "state": "failed", "advisory": True})
    run.update(state="aborted", followed_by={"id": "R4", "alias": "fix#2", "state": "running"})
    assert next_lines(run, details=False) == [
        "next: sloopctl logs R3 --stage review#1",
        "next: sloopctl show R4 --follow",
    ]
    nothing_failed = {"id": "R5", "state": "aborted", "terminal": True, "stages": []}
    assert next_commands(nothing_failed, details=False)[0] == "sloopctl logs R5"


def test_a_run_that_waits_for_a_person_suggests_running_it_again_and_resolving_it() -> None:
    """Issue 33: `next:` hints never suggested `sloopctl run TICKET`, and a needs_review
    run had no way out but that."""
    failed = {"id": "R5", "ticket": "T2", "state": "failed", "terminal": True, "stages": []}
    assert next_commands(failed, details=False) == [
        "sloopctl logs R5",
        "sloopctl diff R5",
        "sloopctl run T2",
    ]
    waiting = {**failed, "state": "needs_review"}
    assert next_commands(waiting, details=False)[2:] == [
        "sloopctl resolve R5 --merged|--dismissed",
        "sloopctl run T2",
    ]
    # Once a person resolved it, or the ticket's next attempt exists, neither is offered.
    resolved = {**waiting, "resolution": {"resolution": "dismissed", "by": "alice"}}
    assert next_commands(resolved, details=False) == ["sloopctl logs R5", "sloopctl diff R5"]
    followed = {**waiting, "followed_by": {"id": "R6", "alias": "x#2", "state": "running"}}
    assert next_commands(followed, details=False) == [
        "sloopctl logs R5",
        "sloopctl show R6 --follow",
    ]
    aborted = {**failed, "state": "aborted"}  # held by the abort: 'ready' is its way on
    assert next_commands(aborted, details=False) == ["sloopctl logs R5", "sloopctl diff R5"]


@pytest.mark.parametrize(
    "run",
    [
        {"id": "R1", "state": "merged", "terminal": True, "stages": []},
        {"id": "R1", "state": "running", "terminal": False, "stages": []},
    ],
)
def test_nothing_is_suggested_for_a_merged_run_or_one_in_flight(run: dict[str, Any]) -> None:
    assert next_commands(run, details=True) == []
    assert "next:" not in render("show", {"kind": "run", "value": run}, NOW, False)


# --- following a name nothing carries -------------------------------------------


def test_following_a_name_nothing_carries_says_so_and_how_to_go_on(
    fake: Callable[[Script], FakeDaemon],
) -> None:
    empty = {"kind": "matches", "ref": "later", "tickets": [], "total": 0}
    message, code = unfollowable("later", empty)
    assert code == 2
    assert message.startswith("no ticket or run is called 'later' (yet)")
    assert "sloopctl post" in message
    several = {
        "kind": "matches",
        "tickets": [{"name": f"fix-{i}"} for i in range(7)],
        "total": 7,
    }
    message, code = unfollowable("fix", several)
    assert code == 2
    assert "fix-0, fix-1, fix-2, fix-3, fix-4 and 2 more" in message

    daemon = fake({"show": [empty]})
    refused = sloopctl(daemon, "show", "later", "--follow")
    assert refused.exit_code == 2
    assert "no ticket or run is called 'later' (yet)" in refused.stderr
    assert "daemon answered with" not in refused.stderr


def test_version_prints_the_installed_distributions_version() -> None:
    result = CliRunner().invoke(main, ["--version"], env=CLEAN_ENV)
    assert result.exit_code == 0
    assert result.stdout == f"sloopctl {version('sloop')}\n"
    assert result.stdout == "sloopctl 0.8.0\n"
