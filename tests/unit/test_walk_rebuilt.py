"""The stage log's merge-queue rows (store schema 4): ``ended_by: "rebuilt"`` and ``rebuilt``.

A rebuild sends the walk back to its landing's sync and spends no returns; a
``rebuilt`` row anywhere else makes the log corrupt; gate stages are reviewing stages
(their commit is the candidate they ran on) and the sync builds from the run's own work.
"""

from __future__ import annotations

import pytest

from sloopd.flows import walk
from sloopd.flows.flow import FlowError, parse
from tests.unit.test_walk import Log

GATED = parse(
    {},
    {
        "gated": {
            "stages": [
                {"name": "implement", "action": "agent"},
                {"name": "sync", "action": "sync"},
                {
                    "name": "test",
                    "action": "command",
                    "command": ["make", "test"],
                    "return_to": "implement",
                    "returns": 1,
                },
                {"name": "lint", "action": "command", "command": ["l"], "fail_action": "continue"},
                {"name": "merge", "action": "ff_only", "return_to": "sync", "returns": 1},
            ]
        }
    },
).flows["gated"]


def test_gate_stages_are_marked_and_do_not_produce() -> None:
    assert [s.gate for s in GATED.stages] == [False, False, True, True, False]
    assert not GATED.stages[2].produces
    assert GATED.stages[0].produces
    span = GATED.landing("test")
    assert span is not None
    assert (span.sync, span.ff_only) == (1, 4)
    assert GATED.landing("implement") is None


def test_a_cut_short_gate_waits_for_its_rebuilt_row_then_syncs_again() -> None:
    log = Log().run("implement", commit="w1").run("sync", commit="c1")
    log.start("test").finish("test", passed=False, ended_by="rebuilt", reason="rebuilt: R5 left")
    state = log.replay(GATED)
    assert state.next == "rebuild"
    assert state.corrupt is None
    log.add(walk.REBUILT, "test", 1, cause="R5 left")
    state = log.replay(GATED)
    assert (state.next, state.next_stage and state.next_stage.name) == ("start", "sync")
    assert state.returns_used == {}
    assert state.rebuilds == [{"stage": "test", "cause": "R5 left", "at_ms": 1070}]
    assert state.executions[-1].ended_by == "rebuilt"
    # The new sync is execution 2; it builds from the run's own work, not candidate c1.
    assert state.own_work("sync") == "w1"
    log.run("sync", 2, commit="c2").run("test", 2, commit="c2").run("lint", commit="c2")
    log.run("merge", commit="c2")
    done = log.replay(GATED)
    assert (done.next, done.outcome) == ("done", "merged")
    assert done.merge_target() == "c2"


def test_a_rebuilt_row_between_stages_of_the_landing_goes_back_to_the_sync() -> None:
    log = Log().run("implement", commit="w1").run("sync", commit="c1").run("test", commit="c1")
    log.run("lint", commit="c1")
    log.add(walk.REBUILT, "merge", None, cause="main moved outside the merge queue")
    state = log.replay(GATED)
    assert state.corrupt is None
    assert (state.next, state.next_stage and state.next_stage.name) == ("start", "sync")
    assert state.attempts_of("sync") == 1


@pytest.mark.parametrize(
    "log",
    [
        # Before the landing: nothing to rebuild.
        Log().run("implement").add(walk.REBUILT, "sync", None, cause="x"),
        # Naming a stage the walk does not continue with.
        Log().run("implement").run("sync").add(walk.REBUILT, "merge", None, cause="x"),
        # While a stage executes.
        Log().run("implement").run("sync").start("test").add(walk.REBUILT, "test", 1, cause="x"),
        # Outside any landing.
        Log().add(walk.REBUILT, "implement", None, cause="x"),
    ],
)
def test_a_rebuilt_row_where_the_walk_cannot_rebuild_is_corrupt(log: Log) -> None:
    state = log.replay(GATED)
    assert state.halt == "corrupt_log", state.corrupt


def test_only_return_to_spends_returns_whatever_the_rebuilds() -> None:
    log = Log().run("implement", commit="w1")
    for attempt in range(1, 4):
        log.run("sync", attempt, commit=f"c{attempt}")
        log.start("test", attempt).finish("test", attempt, passed=False, ended_by="rebuilt")
        log.add(walk.REBUILT, "test", attempt, cause="ahead left")
    log.run("sync", 4, commit="c4").run("test", 4, passed=False, reason="exit 1")
    state = log.replay(GATED)
    assert (state.next, state.next_stage and state.next_stage.name) == ("return", "implement")
    assert state.attempts_of("test") == 4
    assert len(state.rebuilds) == 3


def test_a_gate_returning_into_its_own_landing_is_refused() -> None:
    stages = [
        {"name": "implement", "action": "agent"},
        {"name": "sync", "action": "sync"},
        {"name": "test", "action": "command", "command": ["t"]},
        {"name": "check", "action": "command", "command": ["c"], "return_to": "test"},
        {"name": "merge", "action": "ff_only"},
    ]
    with pytest.raises(FlowError, match=r"stages\[3\]\.return_to.*gate stage"):
        parse({}, {"f": {"stages": stages}})
