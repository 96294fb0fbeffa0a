"""``sloopd.walk.replay`` on synthetic stage logs (DESIGN "The walk").

The stage log is the source of truth of a run's progress: replaying it gives
the executions so far and the one next step.  A log the driver wrote always
replays; a row that does not fit the flow makes the whole log corrupt.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from sloopd.flows import walk
from sloopd.flows.flow import Flow, parse

FLOW = parse(
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
                    "name": "lint",
                    "action": "command",
                    "command": ["make", "lint"],
                    "fail_action": "continue",
                },
                {"name": "sync", "action": "sync"},
                {"name": "merge", "action": "ff_only", "return_to": "sync", "returns": 2},
            ]
        },
        "nomerge": {
            "stages": [
                {"name": "implement", "action": "agent"},
                {"name": "check", "action": "command", "command": ["check"]},
            ]
        },
    },
).flows
DEFAULT = FLOW["default"]
NOMERGE = FLOW["nomerge"]


@dataclass
class Log:
    """Builds a run's stage log row by row, numbering ``seq`` and ``at_ms`` as the store does."""

    rows: list[walk.LogRow] = field(default_factory=list)

    def add(
        self,
        kind: str,
        stage: str | None = None,
        attempt: int | None = None,
        seat: int | None = None,
        **data: Any,
    ) -> Log:
        seq = len(self.rows) + 1
        self.rows.append(walk.LogRow(seq, kind, stage, attempt, seat, 1000 + 10 * seq, data))
        return self

    def start(self, stage: str, attempt: int = 1) -> Log:
        return self.add(walk.STAGE_STARTED, stage, attempt)

    def finish(self, stage: str, attempt: int = 1, passed: bool = True, **data: Any) -> Log:
        return self.add(walk.STAGE_FINISHED, stage, attempt, passed=passed, **data)

    def run(self, stage: str, attempt: int = 1, passed: bool = True, **data: Any) -> Log:
        return self.start(stage, attempt).finish(stage, attempt, passed, **data)

    def ret(self, stage: str, attempt: int, to: str) -> Log:
        return self.add(walk.RETURNED, stage, attempt, to=to)

    def halt(self, **data: Any) -> Log:
        return self.add(walk.HALTED, **data)

    def replay(self, flow: Flow = DEFAULT) -> walk.Walk:
        return walk.replay(flow, self.rows)


def executions(state: walk.Walk) -> list[tuple[str, int, bool | None]]:
    return [(e.stage.name, e.attempt, e.passed) for e in state.executions]


def passing_walk() -> Log:
    log = Log()
    for stage in ("implement", "test", "lint", "sync", "merge"):
        log.run(stage, exit_code=0 if stage in ("implement", "test", "lint") else None)
    return log


# --- walks that replay ---------------------------------------------------------------


def test_empty_log_starts_the_first_stage() -> None:
    state = Log().replay()
    assert state.next == "start"
    assert state.next_stage is not None
    assert state.next_stage.name == "implement"
    assert state.executions == []
    assert state.current is None
    assert state.outcome is None
    assert state.halt is None
    assert state.corrupt is None


def test_a_stage_in_flight_is_running() -> None:
    state = Log().start("implement").replay()
    assert state.next == "running"
    assert state.current is not None
    assert state.current.stage.name == "implement"
    assert state.current.attempt == 1
    assert state.current.running
    assert state.current.started_at_ms == 1010


def test_passing_walk_is_merged() -> None:
    state = passing_walk().replay()
    assert state.next == "done"
    assert state.outcome == "merged"
    assert state.halt is None
    assert executions(state) == [
        ("implement", 1, True),
        ("test", 1, True),
        ("lint", 1, True),
        ("sync", 1, True),
        ("merge", 1, True),
    ]
    assert state.current is None
    assert state.corrupt is None
    implement = state.executions[0]
    assert implement.exit_code == 0
    assert implement.finished_at_ms == 1020


def test_each_finish_names_the_next_stage() -> None:
    log = Log()
    for stage, following in (
        ("implement", "test"),
        ("test", "lint"),
        ("lint", "sync"),
        ("sync", "merge"),
    ):
        state = log.run(stage).replay()
        assert state.next == "start"
        assert state.next_stage is not None
        assert state.next_stage.name == following


def test_finish_records_the_stage_facts() -> None:
    state = (
        Log()
        .run("implement", exit_code=3, passed=False, verdict_source="exit_code", reason="boom")
        .replay()
    )
    failed = state.executions[0]
    assert (failed.passed, failed.exit_code, failed.verdict_source, failed.reason) == (
        False,
        3,
        "exit_code",
        "boom",
    )


def test_a_failure_without_return_to_halts_with_fail_action() -> None:
    state = Log().run("implement", passed=False).replay()
    assert state.next == "halt"
    assert state.outcome == "failed"
    assert state.halt == "fail_action"
    state = Log().run("implement").run("test").run("lint").run("sync", passed=False).replay()
    assert (state.outcome, state.halt) == ("failed", "fail_action")


def test_return_edge_reenters_the_target() -> None:
    log = Log().run("implement").run("test", passed=False)
    state = log.replay()
    assert state.next == "return"
    assert state.next_stage is not None
    assert state.next_stage.name == "implement"
    assert state.outcome is None

    state = log.ret("test", 1, "implement").replay()
    assert state.next == "start"
    assert state.next_stage is not None
    assert state.next_stage.name == "implement"
    assert state.attempts_of("implement") == 1
    assert state.returns_used == {"test": 1}

    state = log.run("implement", 2).run("test", 2).run("lint").run("sync").run("merge").replay()
    assert state.outcome == "merged"
    assert executions(state) == [
        ("implement", 1, True),
        ("test", 1, False),
        ("implement", 2, True),
        ("test", 2, True),
        ("lint", 1, True),
        ("sync", 1, True),
        ("merge", 1, True),
    ]
    assert [e.attempt for e in state.executions_of("test")] == [1, 2]


def test_return_budget_exhausted_needs_review() -> None:
    log = Log().run("implement").run("test", passed=False).ret("test", 1, "implement")
    state = log.run("implement", 2).run("test", 2, passed=False).replay()
    assert state.next == "halt"
    assert state.outcome == "needs_review"
    assert state.halt == "return_budget_exhausted"
    assert state.returns_used == {"test": 1}


def test_merge_returns_to_sync_until_its_budget_is_spent() -> None:
    log = Log().run("implement").run("test").run("lint").run("sync").run("merge", passed=False)
    state = log.ret("merge", 1, "sync").run("sync", 2).run("merge", 2).replay()
    assert state.outcome == "merged"
    assert [e.attempt for e in state.executions_of("sync")] == [1, 2]

    log = Log().run("implement").run("test").run("lint")
    for attempt in (1, 2, 3):
        log.run("sync", attempt).run("merge", attempt, passed=False)
        if attempt < 3:
            log.ret("merge", attempt, "sync")
    state = log.replay()
    assert (state.outcome, state.halt) == ("needs_review", "return_budget_exhausted")
    assert state.returns_used == {"merge": 2}


def test_advisory_failure_is_stepped_over() -> None:
    log = Log().run("implement").run("test").run("lint", passed=False)
    state = log.replay()
    assert state.next == "start"
    assert state.next_stage is not None
    assert state.next_stage.name == "sync"
    state = log.run("sync").run("merge").replay()
    assert state.outcome == "merged"
    assert state.halt is None
    lint = state.executions_of("lint")[0]
    assert lint.passed is False
    assert lint.stage.advisory


def test_a_flow_without_merge_ends_needing_review() -> None:
    state = Log().run("implement").run("check").replay(NOMERGE)
    assert state.next == "done"
    assert state.outcome == "needs_review"
    assert state.halt is None


def test_the_halted_row_settles_the_walk() -> None:
    log = passing_walk().halt(state="merged", halt=None, reason=None)
    state = log.replay()
    assert state.outcome == "merged"
    assert state.settled == {
        "state": "merged",
        "halt": None,
        "reason": None,
    }
    # An abort may end a walk between stages.
    state = Log().run("implement").halt(state="aborted", halt=None, reason="stop").replay()
    assert state.settled is not None
    assert state.settled["state"] == "aborted"
    assert state.corrupt is None


# --- corrupt logs ------------------------------------------------------------------


def assert_corrupt(state: walk.Walk, *words: str) -> None:
    assert state.next == "halt", state
    assert (state.outcome, state.halt) == ("failed", "corrupt_log")
    assert state.corrupt is not None
    for word in words:
        assert word in state.corrupt, state.corrupt


def test_wrong_stage_is_corrupt() -> None:
    assert_corrupt(Log().start("sync").replay(), "row 1", "'sync'", "'implement'")
    assert_corrupt(Log().run("implement").start("lint").replay(), "row 3", "'lint'", "'test'")
    assert_corrupt(Log().start("bogus").replay(), "'bogus'")


def test_wrong_attempt_is_corrupt() -> None:
    assert_corrupt(Log().start("implement", 2).replay(), "row 1", "execution 2")
    assert_corrupt(Log().start("implement", 0).replay(), "row 1")
    log = Log().run("implement").run("test", passed=False).ret("test", 1, "implement")
    assert_corrupt(log.start("implement", 1).replay(), "row 6", "execution 1")


def test_finish_without_start_is_corrupt() -> None:
    assert_corrupt(Log().finish("implement").replay(), "row 1", "not executing")
    assert_corrupt(Log().run("implement").finish("implement").replay(), "row 3")


def test_finish_of_another_execution_is_corrupt() -> None:
    assert_corrupt(Log().start("implement").finish("implement", 2).replay(), "row 2")
    assert_corrupt(Log().start("implement").finish("test").replay(), "row 2")


def test_finish_without_an_outcome_is_corrupt() -> None:
    log = Log().start("implement").add(walk.STAGE_FINISHED, "implement", 1, exit_code=0)
    assert_corrupt(log.replay(), "row 2", "outcome")


def test_second_start_while_running_is_corrupt() -> None:
    assert_corrupt(Log().start("implement").start("implement", 2).replay(), "row 2")


def test_unknown_kind_is_corrupt() -> None:
    assert_corrupt(Log().add("stage_skipped", "implement", 1).replay(), "row 1", "stage_skipped")


def test_rows_after_the_halted_row_are_corrupt() -> None:
    log = passing_walk().halt(state="merged", halt=None, reason=None)
    assert_corrupt(log.start("implement", 2).replay(), "row 12")
    log = Log().run("implement", passed=False).halt(state="failed", halt="fail_action")
    assert_corrupt(log.halt(state="failed").replay(), "row 4")


def test_halting_while_a_stage_executes_is_corrupt() -> None:
    assert_corrupt(Log().start("implement").halt(state="aborted").replay(), "row 2", "implement")


def test_return_rows_must_follow_the_flow() -> None:
    # No failed stage that may return.
    assert_corrupt(Log().run("implement").ret("implement", 1, "implement").replay(), "row 3")
    # A return to another stage than the flow's return_to.
    log = Log().run("implement").run("test", passed=False)
    assert_corrupt(log.ret("test", 1, "lint").replay(), "row 5", "'lint'")
    # Starting the target without the return row.
    log = Log().run("implement").run("test", passed=False)
    assert_corrupt(log.start("implement", 2).replay(), "row 5")


def test_verdict_and_seat_rows_need_a_stage_that_takes_them() -> None:
    log = Log().start("implement").add(walk.VERDICT, "implement", 1, verdict="pass")
    assert_corrupt(log.replay(), "row 2")
    log = Log().start("implement").add(walk.SEAT_STARTED, "implement", 1, seat=0)
    assert_corrupt(log.replay(), "row 2")


def test_rows_after_the_corrupt_one_are_not_replayed() -> None:
    log = Log().run("implement").start("bogus").finish("test").run("lint")
    state = log.replay()
    assert_corrupt(state, "row 3")
    assert executions(state) == [("implement", 1, True)]


# --- the driver's logs always replay -------------------------------------------------


def drive(flow: Flow, outcomes: list[bool]) -> Log:
    """Write the log the run driver writes: replay, take the next step, repeat.

    Each stage execution passes or fails by the next of ``outcomes`` (passing
    once they run out), so every walk terminates.
    """
    log = Log()
    results = iter(outcomes)
    for _ in range(200):
        state = log.replay()
        assert state.corrupt is None, state.corrupt
        if state.next == "start":
            assert state.next_stage is not None
            name = state.next_stage.name
            attempt = state.attempts_of(name) + 1
            log.run(name, attempt, passed=next(results, True))
        elif state.next == "return":
            assert state.next_stage is not None
            last = state.executions[-1]
            log.ret(last.stage.name, last.attempt, state.next_stage.name)
        else:
            assert state.next in ("done", "halt"), state.next
            log.halt(state=state.outcome, halt=state.halt)
            return log
    raise AssertionError("the walk did not end")


@given(st.lists(st.booleans(), max_size=20))
def test_driven_logs_replay_and_respect_the_flow(outcomes: list[bool]) -> None:
    log = drive(DEFAULT, outcomes)
    state = log.replay()
    assert state.corrupt is None
    assert state.settled is not None
    assert state.outcome in ("merged", "failed", "needs_review")
    for stage in DEFAULT.stages:
        assert state.returns_used.get(stage.name, 0) <= stage.returns
        attempts = [e.attempt for e in state.executions_of(stage.name)]
        assert attempts == list(range(1, len(attempts) + 1))
    if state.outcome == "merged":
        assert state.halt is None
        assert state.executions[-1].stage.name == "merge"
        assert state.executions[-1].passed is True
    elif state.outcome == "failed":
        assert state.halt == "fail_action"
        assert state.executions[-1].passed is False
        assert state.executions[-1].stage.return_to is None
    else:
        assert state.halt == "return_budget_exhausted"
        last = state.executions[-1]
        assert last.passed is False
        assert last.stage.return_to is not None
        assert state.returns_used.get(last.stage.name, 0) == last.stage.returns


@given(st.lists(st.booleans(), max_size=12), st.data())
def test_a_dropped_row_never_replays_silently(outcomes: list[bool], data: st.DataObject) -> None:
    """Removing a start, finish or return row from a driven log is caught, or it is the tail."""
    rows = drive(DEFAULT, outcomes).rows[:-1]  # without the halted row
    index = data.draw(st.integers(0, len(rows) - 1))
    damaged = [
        walk.LogRow(seq, r.kind, r.stage, r.attempt, r.seat, r.at_ms, r.data)
        for seq, r in enumerate(rows[:index] + rows[index + 1 :], start=1)
    ]
    state = walk.replay(DEFAULT, damaged)
    if index == len(rows) - 1:
        assert state.corrupt is None  # the log just ends earlier
    else:
        assert state.halt == "corrupt_log", [(r.kind, r.stage, r.attempt) for r in damaged]
