"""``sloopd.runs.stop``: why a run stops and what its driver does next, case by case.

The tables are today's precedence as the run driver had it before the stop was one
value (read from runner.py, budget.py, watchdog.py, retries.py, execute.py and
spawning.py), so a change to any row is a change of behaviour:

* the abort verb and a stopping daemon (an abort with requeue): the first wins;
* the watchdog: a stall once per stage, never after a timeout or a spent budget;
  a timeout even after a stall; neither looked at an abort;
* the output callback: a spent budget unless a timeout or a budget came first;
* the classification of a finished stage: a vendor limit (requeue at the
  cooldown's end, the reason told from the log), a transient failure (queued
  again, or retries spent), a spent budget: each settles failed, fail_action;
* at a step: an interrupted stage is closed first; a merge that moved main wins
  over every stop; a halt wins over an abort; the child's stops play no part.
"""

from __future__ import annotations

from typing import Any

import pytest

from sloopd.core.config import Config
from sloopd.flows import walk
from sloopd.flows.flow import Stage, parse
from sloopd.flows.results import StageResult, daemon_diagnosis
from sloopd.runs import stop as stops
from sloopd.runs.runstate import ActiveRun
from sloopd.runs.stop import Stop

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
                {"name": "merge", "action": "ff_only"},
            ]
        },
        # Stages after the merge: what the walk does once main moved.
        "after": {
            "stages": [
                {"name": "implement", "action": "agent"},
                {"name": "merge", "action": "ff_only"},
                {
                    "name": "check",
                    "action": "command",
                    "command": ["check"],
                    "return_to": "implement",
                    "returns": 1,
                },
            ]
        },
        "nomerge": {"stages": [{"name": "implement", "action": "agent"}]},
    },
).flows


def _log(*steps: tuple[str, str, int, dict[str, Any]]) -> list[walk.LogRow]:
    return [
        walk.LogRow(seq, kind, stage, attempt, None, 1000 + seq, data)
        for seq, (kind, stage, attempt, data) in enumerate(steps, 1)
    ]


def _ran(stage: str, passed: bool, attempt: int = 1) -> list[tuple[str, str, int, dict[str, Any]]]:
    return [
        (walk.STAGE_STARTED, stage, attempt, {}),
        (walk.STAGE_FINISHED, stage, attempt, {"passed": passed}),
    ]


WALKS: dict[str, walk.Walk] = {
    "fresh": walk.replay(FLOWS["default"], []),
    "running": walk.replay(FLOWS["default"], _log((walk.STAGE_STARTED, "implement", 1, {}))),
    "return": walk.replay(FLOWS["default"], _log(*_ran("implement", True), *_ran("test", False))),
    "needs_review": walk.replay(FLOWS["nomerge"], _log(*_ran("implement", True))),
    "failed": walk.replay(FLOWS["nomerge"], _log(*_ran("implement", False))),
    "merged": walk.replay(
        FLOWS["default"],
        _log(*_ran("implement", True), *_ran("test", True), *_ran("merge", True)),
    ),
    "merging": walk.replay(
        FLOWS["default"],
        _log(*_ran("implement", True), *_ran("test", True), (walk.STAGE_STARTED, "merge", 1, {})),
    ),
    "moved_then_start": walk.replay(
        FLOWS["after"], _log(*_ran("implement", True), *_ran("merge", True))
    ),
    "moved_then_return": walk.replay(
        FLOWS["after"], _log(*_ran("implement", True), *_ran("merge", True), *_ran("check", False))
    ),
    "corrupt": walk.replay(FLOWS["default"], _log(*_ran("test", True))),
}
assert WALKS["moved_then_return"].next == "return"
assert WALKS["corrupt"].halt == "corrupt_log"

ABORT = stops.cancel("aborted by alice")
SHUTDOWN = stops.cancel("the daemon is stopping", requeue=True)
LIMIT = stops.halt(None, requeue_at_ms=5000)  # a vendor limit: reason told from the log
RETRY = stops.halt("overloaded; queued again in 30 s", requeue_at_ms=7000)
SPENT = stops.halt("budget_exceeded (used 9 tokens)")  # or transient retries spent
STOPS: dict[str, Stop | None] = {
    "none": None,
    "stall": stops.stalled(60_000),
    "timeout": stops.timed_out("ran longer than timeout 1 min; stopped"),
    "budget": stops.over_budget("used 9 tokens, over max_tokens 5"),
    "abort": ABORT,
    "shutdown": SHUTDOWN,
    "limit": LIMIT,
    "retry": RETRY,
    "spent": SPENT,
    "abort+limit": stops.stop_with(ABORT, LIMIT),
    "abort+timeout": stops.stop_with(ABORT, stops.timed_out("t")),
    # The daemon stops (issue 38): the run is left in flight, to continue.
    "stopping": stops.stopping(),
    "stopping+abort": stops.stop_with(stops.stopping(), ABORT),
}
CHILD = ("none", "stall", "timeout", "budget")  # the child's stops decide no step
ABORTED = "settle aborted reason='aborted by alice'"
SHUT = "settle aborted reason='the daemon is stopping' requeue"
LIMITED = "settle failed halt=fail_action requeue_at=5000"
RETRIED = "settle failed halt=fail_action reason='overloaded; queued again in 30 s' requeue_at=7000"
SPENT_ = "settle failed halt=fail_action reason='budget_exceeded (used 9 tokens)'"
RUN_STOPS = {
    "abort": ABORTED,
    "shutdown": SHUT,
    "limit": LIMITED,
    "retry": RETRIED,
    "spent": SPENT_,
    "abort+limit": LIMITED,  # a halt wins over an abort
    "abort+timeout": ABORTED,
    "stopping": "suspend",
    "stopping+abort": ABORTED,  # an abort that came too is the operator's word
}
ENDED = {"stopping": None}  # a walk that ended on its own settles as it says
MERGED = "settle merged"


def _rows(state: str, child: str, **run: str | None) -> list[tuple[str, str, str]]:
    return [(state, name, child) for name in CHILD] + [
        (state, name, run.get(name, expected) or child) for name, expected in RUN_STOPS.items()
    ]


NEXT_MOVES = [
    *_rows("fresh", "execute implement#1"),
    # Interrupted (a step the store refused): closed first, whatever the stop.
    # A stopping daemon leaves it running, for the next start to record (sloopd.resume).
    *_rows(
        "running",
        "interrupted implement#1",
        **(dict.fromkeys(RUN_STOPS, "interrupted implement#1") | {"stopping": "suspend"}),
    ),
    *_rows(
        "merging",
        "interrupted merge#1",
        **(dict.fromkeys(RUN_STOPS, "interrupted merge#1") | {"stopping": "suspend"}),
    ),
    *_rows("return", "return test#1 to implement"),
    *_rows("needs_review", "settle needs_review", **ENDED),
    # An abort settles aborted even where the walk itself halts.
    *_rows("failed", "settle failed halt=fail_action", **ENDED),
    *_rows("corrupt", "settle failed halt=corrupt_log", **ENDED),
    # Main moved: merged, whatever the stop; without one, the walk goes on.
    *_rows("merged", MERGED, **dict.fromkeys(RUN_STOPS, MERGED)),
    *_rows("moved_then_start", "execute check#1", **dict.fromkeys(RUN_STOPS, MERGED)),
    *_rows("moved_then_return", "return check#1 to implement", **dict.fromkeys(RUN_STOPS, MERGED)),
]


def _said(move: stops.Move) -> str:
    match move:
        case stops.Execute(stage, attempt):
            return f"execute {stage.name}#{attempt}"
        case stops.Interrupted(stage, attempt):
            return f"interrupted {stage.name}#{attempt}"
        case stops.Return(stage, attempt, to):
            return f"return {stage.name}#{attempt} to {to.name}"
        case stops.Rebuild(stage, attempt, reason):
            return f"rebuild {stage.name}#{attempt} reason={reason!r}"
        case stops.Continue(stage, attempt):
            return f"continue {stage.name}#{attempt}"
        case stops.Suspend():
            return "suspend"
    assert isinstance(move, stops.Settle)
    parts = [f"settle {move.outcome}"]
    if move.halt is not None:
        parts.append(f"halt={move.halt}")
    if move.reason is not None:
        parts.append(f"reason={move.reason!r}")
    if move.requeue:
        parts.append("requeue")
    if move.requeue_at_ms is not None:
        parts.append(f"requeue_at={move.requeue_at_ms}")
    return " ".join(parts)


def test_the_table_covers_every_walk_and_every_stop() -> None:
    assert {(state, stop) for state, stop, _ in NEXT_MOVES} == {
        (state, stop) for state in WALKS for stop in STOPS
    }


@pytest.mark.parametrize(("state", "stop", "expected"), NEXT_MOVES)
def test_next_move(state: str, stop: str, expected: str) -> None:
    assert _said(stops.next_move(WALKS[state], STOPS[stop])) == expected


def _arrive(*names: str) -> Stop | None:
    current: Stop | None = None
    for name in names:
        new = ARRIVALS[name]
        current = stops.stop_with(current, new)
    return current


ARRIVALS: dict[str, Stop] = {
    "abort": ABORT,
    "shutdown": SHUTDOWN,
    "stall": stops.stalled(60_000),
    "stall2": stops.stalled(90_000),
    "timeout": stops.timed_out("ran longer"),
    "timeout2": stops.timed_out("ran longer again"),
    "budget": stops.over_budget("used 9 tokens"),
    "limit": LIMIT,
    "retry": RETRY,
    "spent": SPENT,
}


def _layers(stop: Stop | None) -> list[str]:
    """Each layer as kind(what it carries), strongest first."""
    if stop is None:
        return []
    said = []
    for layer in stop.layers():
        carried = [
            str(value) for value in (layer.reason, layer.stalled_after_ms) if value is not None
        ]
        if layer.requeue:
            carried.append("requeue")
        if layer.requeue_at_ms is not None:
            carried.append(f"at {layer.requeue_at_ms}")
        said.append(f"{layer.kind}({', '.join(carried)})")
    return said


# (the stops in the order they arrive, the run's stop after them, strongest first)
STOP_WITH = [
    (("abort",), ["cancel(aborted by alice)"]),
    # The first abort wins: its reason and whether the ticket is queued again.
    (("abort", "shutdown"), ["cancel(aborted by alice)"]),
    (("shutdown", "abort"), ["cancel(the daemon is stopping, requeue)"]),
    (("stall",), ["stalled(60000)"]),
    (("stall", "stall2"), ["stalled(60000)"]),
    # A timeout or a spent budget after a stall: the stall's timing is kept beneath.
    (("stall", "timeout"), ["timed_out(ran longer)", "stalled(60000)"]),
    (("stall", "budget"), ["budget_exceeded(used 9 tokens)", "stalled(60000)"]),
    # A stopped child is not judged for silence.
    (("timeout", "stall"), ["timed_out(ran longer)"]),
    (("budget", "stall"), ["budget_exceeded(used 9 tokens)"]),
    # The first of a timeout and a spent budget is the stage's cause.
    (("timeout", "budget"), ["timed_out(ran longer)"]),
    (("budget", "timeout"), ["budget_exceeded(used 9 tokens)"]),
    (("timeout", "timeout2"), ["timed_out(ran longer)"]),
    # An abort does not keep the watchdog or the budget from recording their cause.
    (("abort", "stall"), ["cancel(aborted by alice)", "stalled(60000)"]),
    (("abort", "timeout"), ["cancel(aborted by alice)", "timed_out(ran longer)"]),
    (("abort", "budget"), ["cancel(aborted by alice)", "budget_exceeded(used 9 tokens)"]),
    (("timeout", "abort"), ["cancel(aborted by alice)", "timed_out(ran longer)"]),
    (
        ("stall", "timeout", "shutdown"),
        ["cancel(the daemon is stopping, requeue)", "timed_out(ran longer)", "stalled(60000)"],
    ),
    # A halt (vendor limit, transient failure, spent budget) wins over an abort.
    (("abort", "limit"), ["halt(at 5000)", "cancel(aborted by alice)"]),
    (("limit", "abort"), ["halt(at 5000)", "cancel(aborted by alice)"]),
    (
        ("shutdown", "retry"),
        [f"halt({RETRY.reason}, at 7000)", "cancel(the daemon is stopping, requeue)"],
    ),
    (("spent", "limit"), [f"halt({SPENT.reason})"]),
    (("retry",), [f"halt({RETRY.reason}, at 7000)"]),
]


@pytest.mark.parametrize(("arrivals", "expected"), STOP_WITH)
def test_stop_with_keeps_todays_precedence(arrivals: tuple[str, ...], expected: list[str]) -> None:
    assert _layers(_arrive(*arrivals)) == expected


def test_the_run_keeps_its_stop_through_one_setter() -> None:
    active = ActiveRun("r1", Config())
    active.stop_with(stops.stalled(60_000))
    active.stop_with(stops.timed_out("ran longer"))
    active.stop_with(ABORT)
    active.stop_with(SHUTDOWN)
    assert _layers(active.stop) == [
        "cancel(aborted by alice)",
        "timed_out(ran longer)",
        "stalled(60000)",
    ]
    active.seat_ended()  # each seat has its own clock; the stall stays
    assert _layers(active.stop) == ["cancel(aborted by alice)", "stalled(60000)"]
    active.stage_ended()  # the child's stops end with the stage, the run's stay
    assert _layers(active.stop) == ["cancel(aborted by alice)"]
    active.stop_with(LIMIT)
    assert _layers(active.stop) == ["halt(at 5000)", "cancel(aborted by alice)"]


@pytest.mark.parametrize(
    ("arrivals", "seat", "stage"),
    [
        ((), [], []),
        (("stall",), ["stalled(60000)"], []),
        (("budget",), ["budget_exceeded(used 9 tokens)"], []),
        (("stall", "timeout"), ["stalled(60000)"], []),
        (("limit",), ["halt(at 5000)"], ["halt(at 5000)"]),
        (("abort", "budget"), _layers(_arrive("abort", "budget")), ["cancel(aborted by alice)"]),
    ],
)
def test_what_a_seat_and_a_stage_leave(
    arrivals: tuple[str, ...], seat: list[str], stage: list[str]
) -> None:
    stop = _arrive(*arrivals)
    assert _layers(stops.after_seat(stop)) == seat
    assert _layers(stops.after_stage(stop)) == stage


@pytest.mark.parametrize(
    ("arrivals", "stops_children", "child_stopped"),
    [
        ((), False, None),
        (("stall",), False, None),  # a panel's next seat still sits after a stall
        (("timeout",), True, "timed_out"),
        (("budget",), True, "budget_exceeded"),
        (("abort",), True, None),
        (("abort", "stall"), True, None),
        (("stall", "budget"), True, "budget_exceeded"),
    ],
)
def test_what_stops_a_child(
    arrivals: tuple[str, ...], stops_children: bool, child_stopped: str | None
) -> None:
    stop = _arrive(*arrivals)
    assert stops.stops_children(stop) is stops_children
    found = stops.child_stopped(stop)
    assert (found.kind if found is not None else None) == child_stopped


STAGES: dict[str, Stage] = {
    stage.action: stage
    for stage in (*FLOWS["default"].stages, *FLOWS["after"].stages)
    if stage.action in ("agent", "command", "ff_only")
}
CLASSIFIED = {"classification": "unknown", "evidence": None, "vendor": None, "reset_at_ms": None}
FAILED = StageResult.checked("exit_code", False, "exited with code 1", 1)
PASSED = StageResult.checked("exit_code", True, None, 0)
MERGE_PASSED = StageResult.checked("git", True, None).but(commit="abc")
MERGE_FAILED = StageResult.checked("git", False, "main moved", None).but(final=True)
PANEL_TIMED = FAILED.but(diagnosis=daemon_diagnosis("timed_out", "seat 0 (a) ran longer"))

JUDGED = [
    # (stops, stage action, result, the result recorded)
    ((), "agent", FAILED, FAILED.but(diagnosis=CLASSIFIED)),
    ((), "agent", PASSED, PASSED),
    ((), "command", FAILED, FAILED),
    ((), "agent", PANEL_TIMED, PANEL_TIMED),
    (
        ("stall",),
        "agent",
        FAILED,
        FAILED.but(
            diagnosis=daemon_diagnosis("stalled", "no output for 60 s (stall_kill_after); stopped")
        ),
    ),
    (
        ("stall2",),
        "agent",
        FAILED,
        FAILED.but(
            diagnosis=daemon_diagnosis("stalled", "no output for 90 s (stall_kill_after); stopped")
        ),
    ),
    (("stall",), "command", FAILED, FAILED),
    (("stall",), "agent", PASSED, PASSED),
    (
        ("stall", "timeout"),
        "agent",
        PASSED,
        PASSED.but(
            passed=False, reason="ran longer", diagnosis=daemon_diagnosis("timed_out", "ran longer")
        ),
    ),
    (
        ("budget",),
        "command",
        PASSED,
        PASSED.but(
            passed=False,
            reason="used 9 tokens",
            diagnosis=daemon_diagnosis("budget_exceeded", "used 9 tokens"),
            final=True,  # a spent budget is final: no return mends it
        ),
    ),
    (
        ("timeout",),
        "ff_only",
        MERGE_FAILED,
        MERGE_FAILED.but(
            reason="ran longer", diagnosis=daemon_diagnosis("timed_out", "ran longer")
        ),
    ),
    # An abort: the stage failed with its reason, and its output is not classified.
    (("abort",), "agent", PASSED, PASSED.failed("aborted by alice")),
    (("abort",), "agent", FAILED, FAILED.failed("aborted by alice")),
    (("abort", "stall"), "agent", FAILED, FAILED.failed("aborted by alice")),
    (("abort", "timeout"), "agent", FAILED, FAILED.failed("aborted by alice")),
    (("abort",), "agent", PANEL_TIMED, PANEL_TIMED.failed("aborted by alice")),
    # Too late to stop a merge that moved main: it stands.
    (("abort",), "ff_only", MERGE_PASSED, MERGE_PASSED),
    (("abort",), "ff_only", MERGE_FAILED, MERGE_FAILED.failed("aborted by alice")),
]


@pytest.mark.parametrize(("arrivals", "action", "result", "expected"), JUDGED)
def test_judged(
    arrivals: tuple[str, ...], action: str, result: StageResult, expected: StageResult
) -> None:
    assert stops.judged(result, _arrive(*arrivals), STAGES[action], lambda: CLASSIFIED) == expected


def test_a_merge_too_late_to_stop_names_the_abort() -> None:
    stop = _arrive("abort")
    assert stops.merged_despite(stop, STAGES["ff_only"], MERGE_PASSED) == "aborted by alice"
    assert stops.merged_despite(stop, STAGES["ff_only"], MERGE_FAILED) is None
    assert stops.merged_despite(None, STAGES["ff_only"], MERGE_PASSED) is None
    assert stops.merged_despite(stop, STAGES["agent"], PASSED) is None


@pytest.mark.parametrize(
    ("after_ms", "said"),
    [(60_000, "60 s"), (119_000, "119 s"), (120_000, "2 min"), (7_200_000, "2.0 h")],
)
def test_a_stall_names_its_silence(after_ms: int, said: str) -> None:
    judged = stops.judged(FAILED, stops.stalled(after_ms), STAGES["agent"], lambda: CLASSIFIED)
    assert judged.diagnosis is not None
    assert judged.diagnosis["detail"] == f"no output for {said} (stall_kill_after); stopped"
