"""Replaying a run's stage log against its flow snapshot.

The stage log is the source of truth for a run's progress: ``replay`` turns
it into the executions so far and the one next step, and both ``show`` and
the run driver use that result, so what an operator sees is exactly what the
daemon will do.  Replay never trusts the log: a row that does not fit the
flow makes the whole log ``corrupt``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from sloopd.flows.flow import Flow, Stage

STAGE_STARTED = "stage_started"
STAGE_FINISHED = "stage_finished"
SEAT_STARTED = "seat_started"
SEAT_FINISHED = "seat_finished"
# 0.9: a daemon's stop cut a panel seat short; it sits again when the run continues.
SEAT_INTERRUPTED = "seat_interrupted"
VERDICT = "verdict"
RETURNED = "returned"
HALTED = "halted"
NOTE = "note"
# ff_only's, before main's ref moves: after a crash the ref says if it did (sloopd.resume).
MERGE_INTENT = "merge_intent"
# 0.9 (store schema 4): the merge queue sends the walk back to its landing's sync,
# spending no returns: a run ahead left the queue, or main moved outside it.
REBUILT = "rebuilt"
# Why an execution ended before its check could decide it (the stage row's ``ended_by``).
ENDED_BY_REBUILT = "rebuilt"
ENDED_BY_INTERRUPTED = "interrupted"
# Never stored (an aborted row stays as 0.8.0 wrote it): the wire derives it (views.runview).
ENDED_BY_ABORTED = "aborted"


@dataclass(frozen=True, slots=True)
class LogRow:
    seq: int
    kind: str
    stage: str | None
    attempt: int | None
    seat: int | None
    at_ms: int
    data: dict[str, Any]


@dataclass(slots=True)
class Execution:
    """One execution of a stage: one row of ``stages`` on the wire."""

    stage: Stage
    attempt: int
    started_at_ms: int
    finished_at_ms: int | None = None
    passed: bool | None = None  # None while running
    exit_code: int | None = None
    verdict_source: str | None = None
    reason: str | None = None
    confidence: str | None = None
    verdict: dict[str, Any] | None = None  # a reported stage's first verdict
    diagnosis: dict[str, Any] | None = None  # a failed agent's classified output
    seats: dict[int, dict[str, Any]] = field(default_factory=dict)
    commit: str | None = None  # the commit it ran on, or (a producing stage) ended on
    discarded: list[dict[str, Any]] | None = None  # what a reviewing stage left, not merged
    # Failed for a reason no return can mend (nothing to merge): the run ends failed.
    final: bool = False
    # ff_only only: {"from": main's sha, "to": the tip} once the ref is about to move.
    merge_intent: dict[str, Any] | None = None
    # What its agent (a panel: all its seats) reported spending; None: nothing.
    usage: dict[str, Any] | None = None
    # The Ray node its child ran on ({"id", "host"}); None: the daemon's host.
    node: dict[str, Any] | None = None
    # Why it ended before its check decided it: "rebuilt" (the merge queue rebuilt the
    # run's candidate), "interrupted" (a restart); None: it ran to its verdict.
    ended_by: str | None = None
    # What its row listed: a sync conflict's paths, a stage's uncommitted paths.
    paths: list[str] = field(default_factory=list)
    # A merge-queue sync: the runs whose work its candidate holds besides main's.
    onto: list[str] | None = None
    # A sync conflict's marked regions, as its row stored them (absent before 0.9.0).
    hunks: list[str] = field(default_factory=list)
    hunks_clipped: bool = False
    # Sittings a daemon's stop cut short ({"reviewer", "at_ms", "usage"}); seat_cut: its
    # last row was one (that stop counts once in interrupted_in_a_row, not again).
    interrupted_seats: list[dict[str, Any]] = field(default_factory=list)
    seat_cut: bool = False

    @property
    def running(self) -> bool:
        return self.passed is None


# "rebuild": an execution the merge queue cut short; a ``rebuilt`` row follows.
Next = Literal["start", "running", "return", "rebuild", "halt", "done"]


@dataclass(slots=True)
class Walk:
    """The replayed state: executions in order and the single next step."""

    flow: Flow
    executions: list[Execution] = field(default_factory=list)
    returns_used: dict[str, int] = field(default_factory=dict)
    next: Next = "start"
    next_stage: Stage | None = None  # for start / return (the target)
    outcome: str | None = None  # merged | failed | needs_review (halt / done)
    halt: str | None = None  # fail_action | return_budget_exhausted | corrupt_log
    corrupt: str | None = None
    settled: dict[str, Any] | None = None  # the halted row's data, once written
    notes: list[dict[str, Any]] = field(default_factory=list)
    # The merge queue's rebuilds so far, each {"stage", "cause", "at_ms"} (none spends
    # a returns budget).
    rebuilds: list[dict[str, Any]] = field(default_factory=list)
    # Executions and sittings a crash cut short since the last that ended on its own.
    interrupted_in_a_row: int = 0

    @property
    def current(self) -> Execution | None:
        if self.executions and self.executions[-1].running:
            return self.executions[-1]
        return None

    def merge_target(self) -> str | None:
        """The commit the last passing gating stage ran on: what ff_only may merge."""
        for execution in reversed(self.executions):
            if execution.passed and not execution.stage.advisory and execution.commit:
                return execution.commit
        return None

    def own_work(self, stage_name: str) -> str | None:
        """What a landing's ``sync`` builds from: the run's own work, i.e. the last passing
        gating stage's commit outside that landing.  A rebuild must not build on the old
        candidate, which holds the work of runs that have since left the queue."""
        span = self.flow.landing(stage_name)
        for execution in reversed(self.executions):
            index = self.flow.index(execution.stage.name)
            if span is not None and span.holds(index):
                continue
            if execution.passed and not execution.stage.advisory and execution.commit:
                return execution.commit
        return None

    def main_moved(self) -> bool:
        """Some merge stage of this run advanced main: whatever follows, it merged."""
        return any(e.passed is True and e.stage.action == "ff_only" for e in self.executions)

    def attempts_of(self, stage_name: str) -> int:
        return sum(1 for e in self.executions if e.stage.name == stage_name)

    def executions_of(self, stage_name: str) -> list[Execution]:
        return [e for e in self.executions if e.stage.name == stage_name]


class CorruptLog(Exception):
    pass


def replay(flow: Flow, rows: Iterable[LogRow]) -> Walk:
    walk = Walk(flow=flow, next_stage=flow.stages[0])
    try:
        for row in rows:
            _apply(walk, row)
    except CorruptLog as exc:
        walk.corrupt = str(exc)
        walk.next, walk.outcome, walk.halt = "halt", "failed", "corrupt_log"
    return walk


def _apply(walk: Walk, row: LogRow) -> None:
    if walk.settled is not None:
        raise CorruptLog(f"row {row.seq} ({row.kind}) follows the run's end")
    handler = _HANDLERS.get(row.kind)
    if handler is None:
        raise CorruptLog(f"row {row.seq} has unknown kind '{row.kind}'")
    handler(walk, row)


def _on_started(walk: Walk, row: LogRow) -> None:
    expected = walk.next_stage
    if walk.next not in ("start",) or expected is None:
        raise CorruptLog(f"row {row.seq} starts '{row.stage}' while the walk expects {walk.next}")
    if row.stage != expected.name:
        raise CorruptLog(
            f"row {row.seq} starts '{row.stage}' where the flow continues with '{expected.name}'"
        )
    if row.attempt != walk.attempts_of(expected.name) + 1:
        raise CorruptLog(
            f"row {row.seq} starts '{row.stage}' as execution {row.attempt}, "
            f"not {walk.attempts_of(expected.name) + 1}"
        )
    walk.executions.append(Execution(stage=expected, attempt=row.attempt, started_at_ms=row.at_ms))
    walk.next, walk.next_stage = "running", None


def _running(walk: Walk, row: LogRow) -> Execution:
    current = walk.current
    if current is None or current.stage.name != row.stage or current.attempt != row.attempt:
        raise CorruptLog(
            f"row {row.seq} ({row.kind}) names '{row.stage}#{row.attempt}', which is not executing"
        )
    return current


def _sitting_seat(current: Execution, row: LogRow) -> dict[str, Any]:
    seat = current.seats.get(row.seat if row.seat is not None else -1)
    if seat is None or seat["done"]:
        raise CorruptLog(f"row {row.seq} ({row.kind}) names seat {row.seat}, which is not sitting")
    return seat


def _on_verdict(walk: Walk, row: LogRow) -> None:
    current = _running(walk, row)
    if row.seat is not None:
        seat = _sitting_seat(current, row)
        if seat["verdict"] is not None:
            raise CorruptLog(f"row {row.seq} reports twice for seat {row.seat}")
        seat.update(
            verdict=row.data.get("verdict"),
            confidence=row.data.get("confidence"),
            reason=row.data.get("reason"),
        )
        return
    if current.stage.result_check != "reported" or current.verdict is not None:
        raise CorruptLog(f"row {row.seq} reports a verdict '{row.stage}' cannot take")
    current.verdict = dict(row.data)


def _on_note(walk: Walk, row: LogRow) -> None:
    current = _running(walk, row)
    if row.seat is not None:
        _sitting_seat(current, row)
    walk.notes.append(
        {
            "stage": row.stage,
            "attempt": row.attempt,
            "reviewer": row.seat,
            "at_ms": row.at_ms,
            "text": row.data.get("text"),
        }
    )


def _on_seat_started(walk: Walk, row: LogRow) -> None:
    current = _running(walk, row)
    seat = row.seat
    if (
        current.stage.result_check != "panel"
        or seat is None
        or seat in current.seats
        or seat != len(current.seats)
        or seat >= len(current.stage.reviewers)
        or any(not s["done"] for s in current.seats.values())
    ):
        raise CorruptLog(f"row {row.seq} starts seat {seat} out of order")
    reviewer = current.stage.reviewers[seat]
    current.seats[seat] = {
        "reviewer": seat,
        "target": reviewer.target,
        "verdict": None,
        "confidence": None,
        "reason": None,
        "usage": None,
        "node": None,
        "done": False,
    }
    current.seat_cut = False


def _on_seat_finished(walk: Walk, row: LogRow) -> None:
    seat = _sitting_seat(_running(walk, row), row)
    # A seat that never reported is the fail the quorum counts, with no confidence.
    if seat["verdict"] is None:
        seat["verdict"] = "fail"
    seat["usage"] = row.data.get("usage")
    seat["node"] = row.data.get("node")
    seat["done"] = True
    walk.interrupted_in_a_row = 0


def _on_seat_interrupted(walk: Walk, row: LogRow) -> None:
    """The sitting ends unjudged: the seat is free to sit again in this execution."""
    current = _running(walk, row)
    _sitting_seat(current, row)
    assert row.seat is not None  # _sitting_seat found it
    del current.seats[row.seat]
    current.interrupted_seats.append(
        {"reviewer": row.seat, "at_ms": row.at_ms, "usage": row.data.get("usage")}
    )
    walk.interrupted_in_a_row += 0 if row.data.get("clean") else 1
    current.seat_cut = True


def _on_finished(walk: Walk, row: LogRow) -> None:
    current = _running(walk, row)
    if any(not seat["done"] for seat in current.seats.values()):
        raise CorruptLog(f"row {row.seq} finishes '{row.stage}' while a seat still sits")
    data = row.data
    passed = data.get("passed")
    if not isinstance(passed, bool):
        raise CorruptLog(f"row {row.seq} finishes '{row.stage}' without an outcome")
    current.passed = passed
    current.finished_at_ms = row.at_ms
    current.exit_code = data.get("exit_code")
    current.verdict_source = data.get("verdict_source")
    current.reason = data.get("reason")
    current.confidence = data.get("confidence")
    current.diagnosis = data.get("diagnosis")
    current.commit = data.get("commit")
    current.discarded = data.get("discarded")
    current.final = data.get("final") is True
    current.usage = data.get("usage")
    current.node = data.get("node")
    current.ended_by = data.get("ended_by")
    current.paths = list(data.get("paths") or ())
    current.onto = data.get("onto")
    current.hunks = list(data.get("hunks") or ())
    current.hunks_clipped = bool(data.get("hunks_clipped"))
    if current.ended_by != ENDED_BY_INTERRUPTED:
        walk.interrupted_in_a_row = 0
    elif not current.seat_cut and not data.get("clean"):
        walk.interrupted_in_a_row += 1
    _decide_after(walk, current)


def _decide_after(walk: Walk, done: Execution) -> None:
    """What follows a finished execution: the flow's rules, nothing else."""
    stage = done.stage
    if done.ended_by == ENDED_BY_INTERRUPTED:
        # No failure of the run's: the stage runs again from the same commit, no returns.
        walk.next, walk.next_stage = "start", stage
        return
    if done.ended_by == ENDED_BY_REBUILT:
        # Not the run's failure: its candidate went stale under it (sloopd.landing).
        if walk.flow.landing(stage.name) is None:
            raise CorruptLog(f"'{stage.name}' ended rebuilt outside a landing")
        walk.next, walk.next_stage = "rebuild", None
        return
    if done.passed or stage.advisory:
        position = walk.flow.index(stage.name) + 1
        if position < len(walk.flow.stages):
            walk.next, walk.next_stage = "start", walk.flow.stages[position]
            return
        walk.next = "done"
        walk.outcome = "merged" if _merged(walk) else "needs_review"
        return
    if stage.return_to is not None and not done.final:
        if walk.returns_used.get(stage.name, 0) < stage.returns:
            walk.next, walk.next_stage = "return", walk.flow.stage(stage.return_to)
            return
        walk.next, walk.outcome, walk.halt = "halt", "needs_review", "return_budget_exhausted"
        return
    walk.next, walk.outcome, walk.halt = "halt", "failed", "fail_action"


def _merged(walk: Walk) -> bool:
    """The walk reached its end and its last merge stage advanced main."""
    merges = [e for e in walk.executions if e.stage.action == "ff_only"]
    return bool(merges) and merges[-1].passed is True


def _on_returned(walk: Walk, row: LogRow) -> None:
    target = walk.next_stage
    last = walk.executions[-1] if walk.executions else None
    if walk.next != "return" or target is None or last is None or row.stage != last.stage.name:
        raise CorruptLog(
            f"row {row.seq} returns from '{row.stage}' without a failed stage that may return"
        )
    if row.data.get("to") != target.name:
        raise CorruptLog(
            f"row {row.seq} returns to '{row.data.get('to')}', the flow says '{target.name}'"
        )
    walk.returns_used[last.stage.name] = walk.returns_used.get(last.stage.name, 0) + 1
    walk.next = "start"


def _on_rebuilt(walk: Walk, row: LogRow) -> None:
    """Back to the landing's sync: after a cut-short execution, or between the landing's
    stages (a gate passed, or the run waits to land, on a candidate gone stale)."""
    flow = walk.flow
    stage = flow.stage(row.stage or "")
    span = flow.landing(stage.name) if stage is not None else None
    if stage is None or span is None:
        raise CorruptLog(f"row {row.seq} rebuilds from '{row.stage}', which is in no landing")
    if walk.next == "rebuild":
        fits = walk.executions[-1].stage.name == stage.name
    else:
        upcoming = walk.next_stage if walk.next == "start" else None
        fits = (
            upcoming is not None
            and upcoming.name == stage.name
            and flow.index(stage.name) > span.sync
        )
    if not fits:
        raise CorruptLog(f"row {row.seq} rebuilds from '{row.stage}' where the walk cannot")
    walk.rebuilds.append({"stage": stage.name, "cause": row.data.get("cause"), "at_ms": row.at_ms})
    walk.next, walk.next_stage = "start", flow.stages[span.sync]


def _on_merge_intent(walk: Walk, row: LogRow) -> None:
    current = _running(walk, row)
    if current.stage.action != "ff_only" or current.merge_intent is not None:
        raise CorruptLog(f"row {row.seq} announces a merge '{row.stage}' cannot make")
    current.merge_intent = {**row.data, "at_ms": row.at_ms}


def _on_halted(walk: Walk, row: LogRow) -> None:
    # The settling row may end a walk anywhere (abort, restart, corrupt log).
    walk.settled = dict(row.data)
    current = walk.current
    if current is not None:
        raise CorruptLog(f"row {row.seq} ends the run while '{current.stage.name}' executes")


_HANDLERS = {
    STAGE_STARTED: _on_started,
    STAGE_FINISHED: _on_finished,
    SEAT_STARTED: _on_seat_started,
    SEAT_FINISHED: _on_seat_finished,
    SEAT_INTERRUPTED: _on_seat_interrupted,
    VERDICT: _on_verdict,
    RETURNED: _on_returned,
    HALTED: _on_halted,
    NOTE: _on_note,
    MERGE_INTENT: _on_merge_intent,
    REBUILT: _on_rebuilt,
}
