"""The walk of a run that continues after a daemon's stop (issue 38), as pure functions.

An execution that ends ``interrupted`` is no failure of the run's: the same stage
comes next, spending no returns.  A panel's sitting seat cut short frees its seat for
the same execution.  Interruptions in a row are counted (a sitting and the execution
it belongs to count once), reset by anything that ends on its own, and at three the
driver settles the run failed instead of running the stage again.
"""

from __future__ import annotations

from typing import Any

import pytest

from sloopctl.stages_view import stages_section
from sloopd.flows import walk
from sloopd.flows.agent_settings import FlowError, parse_agent
from sloopd.flows.flow import parse
from sloopd.flows.results import StageResult
from sloopd.runs import stop as stops

FLOWS = parse(
    {},
    {
        "default": {
            "stages": [
                {"name": "implement", "action": "agent"},
                {
                    "name": "test",
                    "action": "command",
                    "command": ["make", "test"],
                    "return_to": "implement",
                    "returns": 1,
                },
                {
                    "name": "review",
                    "action": "agent",
                    "result_check": "panel",
                    "quorum": 2,
                    "reviewers": [
                        {"target": "claude", "command": ["a"]},
                        {"target": "codex", "command": ["b"]},
                    ],
                },
                {"name": "merge", "action": "ff_only"},
            ]
        }
    },
).flows["default"]
CUT = {"passed": False, "reason": "interrupted: the daemon restarted", "ended_by": "interrupted"}


def _log(*rows: tuple[str, str, int, int | None, dict[str, Any]]) -> walk.Walk:
    return walk.replay(
        FLOWS,
        [
            walk.LogRow(seq, kind, stage, attempt, seat, 1000 + seq, data)
            for seq, (kind, stage, attempt, seat, data) in enumerate(rows, 1)
        ],
    )


def _ran(stage: str, attempt: int, data: dict[str, Any]) -> list[Any]:
    return [
        (walk.STAGE_STARTED, stage, attempt, None, {}),
        (walk.STAGE_FINISHED, stage, attempt, None, data),
    ]


def test_an_interrupted_execution_is_followed_by_the_same_stage_spending_no_returns() -> None:
    state = _log(*_ran("implement", 1, {"passed": True}), *_ran("test", 1, CUT))
    assert (state.next, state.next_stage and state.next_stage.name) == ("start", "test")
    assert state.returns_used == {}
    assert state.interrupted_in_a_row == 1
    move = stops.next_move(state, None)
    assert move == stops.Execute(FLOWS.stage("test"), 2)  # type: ignore[arg-type]


def test_interruptions_in_a_row_are_bounded_and_reset_by_an_execution_that_ends() -> None:
    three = [*_ran("test", 1, CUT), *_ran("test", 2, CUT), *_ran("test", 3, CUT)]
    state = _log(*_ran("implement", 1, {"passed": True}), *three)
    assert state.interrupted_in_a_row == 3
    move = stops.next_move(state, None)
    assert isinstance(move, stops.Settle)
    assert (move.outcome, move.halt, move.requeue) == ("failed", "fail_action", False)
    assert move.reason is not None
    assert "stage 'test' execution 3" in move.reason
    assert "3 times in a row" in move.reason
    # A failure of its own in between resets the count: the stage may run again.
    reset = _log(
        *_ran("implement", 1, CUT),
        *_ran("implement", 2, CUT),
        *_ran("implement", 3, {"passed": True}),
        *_ran("test", 1, CUT),
        *_ran("test", 2, CUT),
    )
    assert reset.interrupted_in_a_row == 2
    assert isinstance(stops.next_move(reset, None), stops.Execute)


def _panel_sitting(*seats: tuple[int, str]) -> list[Any]:
    rows: list[Any] = [*_ran("implement", 1, {"passed": True}), *_ran("test", 1, {"passed": True})]
    rows.append((walk.STAGE_STARTED, "review", 1, None, {}))
    for seat, how in seats:
        rows.append((walk.SEAT_STARTED, "review", 1, seat, {"target": "x"}))
        if how == "pass":
            rows.append((walk.VERDICT, "review", 1, seat, {"verdict": "pass"}))
            rows.append((walk.SEAT_FINISHED, "review", 1, seat, {"exit_code": 0}))
        elif how == "cut":
            usage = {"input_tokens": 5, "output_tokens": 1, "cached_tokens": 0, "cost_usd": None}
            rows.append((walk.SEAT_INTERRUPTED, "review", 1, seat, {"usage": usage}))
    return rows


def test_a_cut_short_seat_sits_again_in_the_same_execution() -> None:
    state = _log(*_panel_sitting((0, "pass"), (1, "cut")))
    current = state.current
    assert current is not None
    assert sorted(current.seats) == [0]
    assert current.seats[0]["verdict"] == "pass"
    assert [s["reviewer"] for s in current.interrupted_seats] == [1]
    assert state.interrupted_in_a_row == 1
    assert stops.next_move(state, None) == stops.Continue(current.stage, 1)
    # The seat sits again and reports: the panel passes, one execution of it.
    again = _panel_sitting((0, "pass"), (1, "cut"), (1, "pass"))
    again.append((walk.STAGE_FINISHED, "review", 1, None, {"passed": True}))
    done = _log(*again)
    assert done.corrupt is None
    assert done.interrupted_in_a_row == 0
    assert [e.attempt for e in done.executions_of("review")] == [1]


def test_a_panel_finished_interrupted_after_its_seat_counts_the_stop_once() -> None:
    rows = _panel_sitting((0, "pass"), (1, "cut"))
    rows.append((walk.STAGE_FINISHED, "review", 1, None, CUT))
    state = _log(*rows)
    assert state.interrupted_in_a_row == 1
    assert state.next_stage is not None
    assert (state.next, state.next_stage.name) == ("start", "review")


def test_a_stopping_daemon_suspends_a_panel_and_a_stage_but_not_an_abort() -> None:
    state = _log(*_panel_sitting((0, "pass")))
    assert stops.next_move(state, stops.stopping()) == stops.Suspend()
    aborted = stops.stop_with(stops.stopping(), stops.cancel("by alice"))
    assert isinstance(stops.next_move(state, aborted), stops.Interrupted)


USAGE = {"input_tokens": 9, "output_tokens": 1, "cached_tokens": 0, "cost_usd": None}
# A flow with a sync, for the git stages a stopping daemon lets stand.
SYNC = parse({}, {"f": {"stages": [{"name": "s", "action": "sync"}]}}).flows["f"].stages[0]


def _stage(action: str) -> Any:
    return SYNC if action == "sync" else next(s for s in FLOWS.stages if s.action == action)


@pytest.mark.parametrize("passed", [True, False])
def test_a_stopping_daemon_cuts_a_child_stage_short(passed: bool) -> None:
    result = StageResult(passed=passed, reason="r", commit="abc", usage=USAGE)
    judged = stops.judged(result, stops.stopping(), _stage("agent"), lambda: {})
    # Run again from the same commit: the agent's own commit is not kept.
    assert (judged.passed, judged.ended_by, judged.commit) == (False, "interrupted", None)
    assert judged.reason == "interrupted: the daemon stopped"
    assert judged.clean
    assert judged.usage == USAGE  # the budget counts what it spent


@pytest.mark.parametrize("action", ["sync", "ff_only"])
def test_a_stopping_daemon_lets_a_git_stage_that_passed_stand(action: str) -> None:
    result = StageResult(passed=True, reason="r", commit="abc", usage=USAGE)
    assert stops.judged(result, stops.stopping(), _stage(action), lambda: {}) == result


def test_sloopctl_says_a_seat_sat_again() -> None:
    stage_row = {
        "stage": "review",
        "attempt": 1,
        "state": "passed",
        "reviewers": [
            {"reviewer": 0, "target": "claude", "verdict": "pass", "reason": "fine"},
            {
                "reviewer": 1,
                "target": "codex",
                "verdict": "pass",
                "reason": None,
                "interrupted": [{"at_ms": 1, "usage": None}, {"at_ms": 2, "usage": None}],
            },
        ],
    }
    lines = "\n".join(stages_section([stage_row], 0, lambda text, _style: text))
    assert "sat again after 2 interrupted sittings" in lines
    assert "fine (" not in lines


def test_a_clean_stop_does_not_count_toward_the_bound() -> None:
    clean = {**CUT, "reason": "interrupted: the daemon stopped", "clean": True}
    rows = [*_ran("implement", 1, {"passed": True})]
    for attempt in range(1, 6):
        rows += _ran("test", attempt, clean)
    state = _log(*rows)
    assert state.interrupted_in_a_row == 0
    assert stops.next_move(state, None) == stops.Execute(FLOWS.stage("test"), 6)  # type: ignore[arg-type]
    # A crash after them counts, and the bound is the configured one.
    crashed = _log(*rows, *_ran("test", 6, CUT))
    assert crashed.interrupted_in_a_row == 1
    move = stops.next_move(crashed, None, bound=1)
    assert isinstance(move, stops.Settle)
    assert move.reason is not None
    assert "agent.max_interruptions = 1" in move.reason


def test_the_bound_is_a_setting() -> None:
    assert parse_agent({}).max_interruptions == stops.MAX_INTERRUPTED_IN_A_ROW
    assert parse_agent({"max_interruptions": 7}).max_interruptions == 7
    with pytest.raises(FlowError, match=r"agent\.max_interruptions"):
        parse_agent({"max_interruptions": 0})
