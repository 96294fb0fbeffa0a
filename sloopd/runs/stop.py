"""Why a run stops, and what its driver does next: one value, pure decisions.

Five things may stop a run: the abort verb, a stopping daemon, the stall watchdog
(silence, a timeout), the output callback (a spent budget) and the classification of
a failed stage (a vendor limit, a transient failure, a spent budget).  Each hands the
run a ``Stop``; the run keeps the stronger through one setter (``stop_with``), and the
driver asks ``next_move`` what follows from the replayed walk and that one value: pure
functions over recorded facts, pinned case by case by tests/unit/test_stop.py.

A run's stops are layered by rank, strongest on top:

* ``halt`` (5): settle failed, halt ``fail_action`` (no ``return_to`` budget is
  spent), perhaps with the ticket queued again at ``requeue_at_ms``;
* ``cancel`` (4): settle aborted; the ticket is queued again now if ``requeue``;
* ``stopping`` (3): the daemon stops: the executing child is stopped, its execution
  ends ``interrupted`` and the run stays in flight, to continue at the next start;
* ``timed_out`` / ``budget_exceeded`` (2): the daemon stopped the stage's child;
  the stage fails with the detail;
* ``stalled`` (1): the child was silent past stall_kill_after and was stopped;
  a failed agent stage is diagnosed so.

The first stop of a rank wins; a weaker stop that comes later is kept beneath the
stronger (a panel seat's timeout under an abort still names the seat), except a
stall after a stop of rank 2: a child the daemon stopped is not judged for silence.
The child's stops (ranks 1-2) end with the stage that had them; a run's stops
(3-5) last until it settles (or, stopping, until the driver lets it go).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any, Final, Literal

from sloopd.flows.diagnosed import diagnosed
from sloopd.flows.flow import Stage
from sloopd.flows.results import StageResult, daemon_diagnosis
from sloopd.flows.walk import ENDED_BY_REBUILT, Execution, Walk

StopKind = Literal[
    "stalled", "timed_out", "budget_exceeded", "rebuilt", "stopping", "cancel", "halt"
]
BUDGET_EXCEEDED: Final = "budget_exceeded"
TIMED_OUT: Final = "timed_out"
STALLED: Final = "stalled"
# The merge queue made the gate's candidate stale (sloopd.landing): its child is
# stopped and the execution ends ``ended_by: "rebuilt"``, no failure of the run's.
REBUILT: Final = "rebuilt"
STOPPING: Final = "stopping"
# How many executions or panel sittings in a row a daemon's crash may cut short before
# the run stops continuing and settles failed (a stage that crashes the daemon): the
# default of [agent] max_interruptions.
MAX_INTERRUPTED_IN_A_ROW: Final = 3

RANK: Final[dict[str, int]] = {
    STALLED: 1,
    TIMED_OUT: 2,
    BUDGET_EXCEEDED: 2,
    REBUILT: 2,
    STOPPING: 3,
    "cancel": 4,
    "halt": 5,
}
CHILD_STOPPED: Final = 2  # the rank of the daemon stopping a stage's child
RUN_STOPPED: Final = 3  # from here on the stop is the run's, not its stage's


@dataclass(frozen=True, slots=True)
class Stop:
    kind: StopKind
    # cancel: the abort's reason; halt: the settle's (None: told from the log);
    # timed_out / budget_exceeded: the detail the stage fails with.
    reason: str | None = None
    requeue: bool = False  # cancel: the ticket is ready again at once
    requeue_at_ms: int | None = None  # halt: the ticket's next trigger
    stalled_after_ms: int | None = None  # stalled: the stall_kill_after that stopped it
    beneath: Stop | None = None  # the weaker stops still in force, strongest first

    def layers(self) -> Iterator[Stop]:
        stop: Stop | None = self
        while stop is not None:
            yield stop
            stop = stop.beneath

    def find(self, *kinds: str) -> Stop | None:
        return next((s for s in self.layers() if s.kind in kinds), None)


def stalled(after_ms: int) -> Stop:
    return Stop(STALLED, stalled_after_ms=after_ms)


def timed_out(detail: str) -> Stop:
    return Stop(TIMED_OUT, reason=detail)


def over_budget(detail: str) -> Stop:
    return Stop(BUDGET_EXCEEDED, reason=detail)


def rebuilt(cause: str) -> Stop:
    return Stop(REBUILT, reason=cause)


def stopping() -> Stop:
    return Stop(STOPPING, reason="the daemon stopped")


def cancel(reason: str, *, requeue: bool = False) -> Stop:
    return Stop("cancel", reason=reason, requeue=requeue)


def halt(reason: str | None, requeue_at_ms: int | None = None) -> Stop:
    return Stop("halt", reason=reason, requeue_at_ms=requeue_at_ms)


def _stacked(layers: list[Stop]) -> Stop | None:
    stop: Stop | None = None
    for layer in sorted(layers, key=lambda s: RANK[s.kind]):
        stop = replace(layer, beneath=stop)
    return stop


def stop_with(current: Stop | None, new: Stop) -> Stop:
    """The run's stop once ``new`` arrives: today's precedence, in one place."""
    if current is None:
        return replace(new, beneath=None)
    ranks = {RANK[s.kind] for s in current.layers()}
    if RANK[new.kind] in ranks:
        return current  # the first of a rank wins: a second abort, a second timeout
    if new.kind == STALLED and CHILD_STOPPED in ranks:
        return current
    stacked = _stacked([*(replace(s, beneath=None) for s in current.layers()), new])
    assert stacked is not None
    return stacked


def _without(stop: Stop | None, drop: Callable[[Stop], bool]) -> Stop | None:
    if stop is None:
        return None
    return _stacked([replace(s, beneath=None) for s in stop.layers() if not drop(s)])


def after_seat(stop: Stop | None) -> Stop | None:
    """A panel seat ended: its timeout is spent (each seat has its own clock).

    A stall stays: the next seat is not judged for silence again, and a failed panel
    is diagnosed stalled, as it always was.
    """
    return _without(stop, lambda s: s.kind == TIMED_OUT)


def after_stage(stop: Stop | None) -> Stop | None:
    """The stage's result is taken: the child's stops end with it, the run's stay."""
    return _without(stop, lambda s: RANK[s.kind] < RUN_STOPPED)


def stops_children(stop: Stop | None) -> bool:
    """A child started now is stopped at once, and a panel sits no more seats."""
    return stop is not None and any(s.kind != STALLED for s in stop.layers())


def child_stopped(stop: Stop | None) -> Stop | None:
    """The daemon's stop of the executing child (a timeout, a spent budget), if any."""
    return stop.find(TIMED_OUT, BUDGET_EXCEEDED, REBUILT) if stop is not None else None


def cancelled(stop: Stop | None) -> Stop | None:
    return stop.find("cancel") if stop is not None else None


def suspended(stop: Stop | None) -> bool:
    """The daemon stops and nothing stronger settles the run: it is left to continue."""
    return stop is not None and stop.kind == STOPPING


def interrupts_git(stop: Stop | None) -> bool:
    """The git that makes the run's branch or moves main is killed, hooks and all."""
    return stop is not None and stop.find("cancel", STOPPING) is not None


def merged_despite(stop: Stop | None, stage: Stage, result: StageResult) -> str | None:
    """The abort's reason when it came too late: main moved, so the run merged."""
    aborted = cancelled(stop)
    if aborted is not None and stage.action == "ff_only" and result.passed:
        return aborted.reason
    return None


def judged(
    result: StageResult,
    stop: Stop | None,
    stage: Stage,
    classify: Callable[[], dict[str, Any]],
) -> StageResult:
    """A stage's result with the run's stop over it; ``classify`` reads a failed
    agent's output, and is asked only when no stop explains the failure (its
    words then reach the reason: sloopd.flows.diagnosed)."""
    aborted = cancelled(stop)
    if aborted is not None:
        if merged_despite(stop, stage, result) is not None:
            return result
        return result.failed(aborted.reason)
    if suspended(stop) and not (result.passed and stage.action in ("sync", "ff_only")):
        # Cut short by the daemon's stop: run again from the same commit once the run
        # continues, so its own commit (an agent's half-done work) is not kept.
        interrupted = StageResult.interrupted("interrupted: the daemon stopped")
        return interrupted.but(usage=result.usage, node=result.node, clean=True)
    stopped = child_stopped(stop)
    if stopped is not None and stopped.kind == REBUILT:
        return result.but(
            passed=False,
            reason=f"rebuilt: {stopped.reason}",
            diagnosis=None,
            ended_by=ENDED_BY_REBUILT,
        )
    if stopped is not None:
        return stopped_result(result, stopped)
    if not result.passed and stage.action == "agent" and result.diagnosis is None:
        stall = stop.find(STALLED) if stop is not None else None
        if stall is not None and stall.stalled_after_ms is not None:
            silence = _duration(stall.stalled_after_ms)
            detail = f"no output for {silence} (stall_kill_after); stopped"
            return result.but(diagnosis=daemon_diagnosis(STALLED, detail))
        return diagnosed(result, stage, classify())
    return result


def stopped_result(result: StageResult, stopped: Stop) -> StageResult:
    """A stage the daemon stopped: failed, with its cause as reason and diagnosis.

    A spent budget is final: no return_to mends it, the run ends failed.
    """
    detail = stopped.reason or ""
    return result.but(
        passed=False,
        reason=detail,
        diagnosis=daemon_diagnosis(stopped.kind, detail),
        final=result.final or stopped.kind == BUDGET_EXCEEDED,
    )


@dataclass(frozen=True, slots=True)
class Execute:
    """Run ``stage``'s execution ``attempt``."""

    stage: Stage
    attempt: int


@dataclass(frozen=True, slots=True)
class Rebuild:
    """Back to the landing's sync after an execution the merge queue cut short."""

    stage: Stage
    attempt: int
    reason: str | None


@dataclass(frozen=True, slots=True)
class Return:
    """The execution ended failing: back to its ``return_to`` stage ``to``."""

    stage: Stage
    attempt: int
    to: Stage


@dataclass(frozen=True, slots=True)
class Interrupted:
    """Close an execution this driver did not finish (a step the store refused)."""

    stage: Stage
    attempt: int


@dataclass(frozen=True, slots=True)
class Continue:
    """Go on with a panel a stop left between seats: those that sat keep their verdicts."""

    stage: Stage
    attempt: int


@dataclass(frozen=True, slots=True)
class Suspend:
    """The daemon stops: the driver lets the run go unsettled, to continue at next start."""


@dataclass(frozen=True, slots=True)
class Settle:
    """The run ends: merged | failed | needs_review | aborted."""

    outcome: str
    halt: str | None = None
    reason: str | None = None  # None is told from the log (explain.run_reason)
    requeue: bool = False
    requeue_at_ms: int | None = None


# What the driver does next; each case carries exactly what it needs.
Move = Execute | Continue | Rebuild | Return | Interrupted | Suspend | Settle


def next_move(state: Walk, stop: Stop | None, bound: int = MAX_INTERRUPTED_IN_A_ROW) -> Move:
    """The driver's next step from the replayed walk and the run's stop."""
    current = state.current
    run_stop = stop if stop is not None and RANK[stop.kind] >= RUN_STOPPED else None
    if state.next == "running" and current is not None:
        return _unfinished(state, current, run_stop, bound)
    # A merge that moved main wins over any stop: the record follows the ref, and
    # what follows the merge does not run once the run is stopped.
    if state.main_moved() and (run_stop is not None or state.next in ("done", "halt")):
        return Settle("merged")
    if run_stop is not None and run_stop.kind == "halt":
        # The stage failed and the walk stops as if its fail_action were "fail": a
        # vendor limit, a transient failure or a spent budget never spends a
        # return_to budget.
        return Settle(
            "failed",
            halt="fail_action",
            reason=run_stop.reason,
            requeue_at_ms=run_stop.requeue_at_ms,
        )
    if suspended(run_stop):
        if state.next not in ("done", "halt"):
            return Suspend()
        run_stop = None  # the walk ended on its own before the stop: settled as it says
    if run_stop is not None:
        return Settle("aborted", reason=run_stop.reason, requeue=run_stop.requeue)
    if state.next == "start" and state.next_stage is not None:
        stage = state.next_stage
        if state.interrupted_in_a_row >= bound:
            return Settle("failed", halt="fail_action", reason=_too_often(state, stage, bound))
        return Execute(stage, state.attempts_of(stage.name) + 1)
    if state.next == "rebuild" and state.executions:
        last = state.executions[-1]
        return Rebuild(last.stage, last.attempt, last.reason)
    if state.next == "return" and state.next_stage is not None and state.executions:
        last = state.executions[-1]
        return Return(last.stage, last.attempt, state.next_stage)
    # The walk ends (halt or done) only with its outcome said (sloopd.flows.walk).
    assert state.outcome is not None, f"a walk at {state.next!r} with no outcome"
    return Settle(state.outcome, halt=state.halt)


def _unfinished(state: Walk, current: Execution, run_stop: Stop | None, bound: int) -> Move:
    """An execution no driver finished (a refused step, a restart, a panel between seats)."""
    if suspended(run_stop):
        return Suspend()  # a panel between seats stays as it is, to continue
    bounded = state.interrupted_in_a_row >= bound
    if current.stage.result_check == "panel" and run_stop is None and not bounded:
        return Continue(current.stage, current.attempt)
    return Interrupted(current.stage, current.attempt)


def _too_often(state: Walk, stage: Stage, bound: int) -> str:
    last = state.executions[-1].attempt if state.executions else 0
    return (
        f"stage '{stage.name}' execution {last} was cut short by a crash of the daemon "
        f"{state.interrupted_in_a_row} times in a row (agent.max_interruptions = {bound}); "
        "the run is not continued again"
    )


def _duration(ms: int) -> str:
    seconds = ms // 1000
    if seconds < 120:
        return f"{seconds} s"
    if seconds < 7200:
        return f"{seconds // 60} min"
    return f"{seconds / 3600:.1f} h"
