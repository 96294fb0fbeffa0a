"""A run as ``show`` gives it: the row, its timeline, and one row per stage execution."""

from __future__ import annotations

from typing import Any

from sloopd.core import rows
from sloopd.core.state import Daemon, LiveRun
from sloopd.flows import walk
from sloopd.flows.explain import agent_exit_code
from sloopd.flows.stagelog import flow_of, replay_run
from sloopd.util import quoting
from sloopd.wire.api import ErrorCode, ProtocolError


def run_detail(daemon: Daemon, run_id: str, active: LiveRun | None) -> dict[str, Any]:
    store = daemon.require_store()
    record = store.run_by_id(run_id)
    if record is None:
        raise ProtocolError(ErrorCode.NOT_FOUND, f"no run '{run_id}'", {"ref": run_id})
    row = rows.run_row_of(record)
    row["usage"] = rows.run_usage(store, run_id)
    state = replay_run(store, run_id, flow_of(record))
    silent_for_ms = _silent_for_ms(active)
    live = active.live_usage() if active is not None else None
    row["stages"] = stage_rows(state, silent_for_ms, live)
    node = active.live_node() if active is not None else None
    for stage in row["stages"]:
        if node is not None and stage["state"] == "running" and stage["node"] is None:
            stage["node"] = node  # where the executing child runs, before its row says
    if row["terminal"]:
        _close_interrupted(row["stages"], state)
    # Additive in 0.8.0: a settled run's rows of stages its walk never reached stay
    # "pending" (v1's word) and say they never will be.
    for stage in row["stages"]:
        stage["unreached"] = row["terminal"] and stage["state"] == "pending"
    # Only a settled run can have a next attempt: no store read for the runs in flight.
    row["followed_by"] = _followed_by(daemon, record.ticket, run_id) if row["terminal"] else None
    _mark_aborted(row)
    # Additive in 0.9.0: the run's place in the merge queue (sloopd.landing), or null.
    merge_queue = daemon.merge_queue
    row["queue"] = (
        merge_queue.row_of(run_id) if merge_queue is not None and not row["terminal"] else None
    )
    row["stall"] = active.stall() if active is not None else None
    row["notes"] = state.notes
    # exit_code has always been the agent stage's exit; agent_exit_code says so.
    row["exit_code"] = row["agent_exit_code"]
    if not row["terminal"]:
        row["agent_exit_code"] = row["exit_code"] = agent_exit_code(state)
    # Additive in 0.6.0: what the run's agents reported spending, the running stage's
    # so far included.
    row["usage"] = rows.usage_sum(stage["usage"] for stage in row["stages"])
    return row


def _followed_by(daemon: Daemon, ticket: str, run_id: str) -> dict[str, Any] | None:
    """The ticket's run right after this one (its next attempt), or None: where an
    aborted or failed run's work went on (additive in 0.8.0)."""
    store = daemon.require_store()
    later = None
    for other, _state, _classification in store.all("run_outcomes_for_ticket", (ticket,)):
        if other == run_id:
            break
        later = other  # newest first: the last one seen before this run is the next
    else:
        return None
    record = store.run_by_id(later) if later is not None else None
    if record is None:
        return None
    follower = rows.run_row_of(record)
    return {key: follower[key] for key in ("id", "alias", "state")}


def _close_interrupted(stages: list[dict[str, Any]], state: walk.Walk) -> None:
    """A settled run has nothing running: an execution its log never finished
    (a corrupt log stops the replay) is shown failed, saying why."""
    for stage in stages:
        if stage["state"] == "running":
            stage["state"] = "failed"
            stage["silent_for_ms"] = None
            stage["reason"] = (
                "the stage log does not replay past this execution"
                if state.corrupt
                else IN_FLIGHT_AT_END
            )
            stage["ended_by"] = "interrupted"


IN_FLIGHT_AT_END = "the run ended while this execution was in flight"


def _mark_aborted(row: dict[str, Any]) -> None:
    """Additive in 0.8.0: ``aborted`` on each row, true on the execution an abort (or a
    restart) cut short. Its ``state`` stays ``failed`` for v1 clients; a view that
    reads ``aborted`` can draw a stop, not a failure with the signal's exit code.
    0.9.0's ``ended_by`` says it in one field ("aborted" where ``aborted`` is true)."""
    executed = [stage for stage in row["stages"] if stage["attempt"] > 0]
    for stage in row["stages"]:
        stage["aborted"] = False
    if row["state"] != "aborted" or not executed:
        return
    last = executed[-1]
    if last["state"] == "failed" and last["reason"] in (row["reason"], IN_FLIGHT_AT_END):
        last["aborted"] = True
        last["ended_by"] = walk.ENDED_BY_ABORTED


def _silent_for_ms(active: LiveRun | None) -> int | None:
    return active.silent_for_ms() if active is not None else None


def stage_rows(
    state: walk.Walk, silent_for_ms: int | None, live: dict[str, Any] | None = None
) -> list[dict[str, Any]]:
    """Executions in the order the walk made them, then unreached stages in flow order.

    ``live`` is the executing child's usage so far, counted on the running row.
    """
    result = [_execution_row(execution, silent_for_ms, live) for execution in state.executions]
    reached = {execution.stage.name for execution in state.executions}
    for stage in state.flow.stages:
        if stage.name not in reached:
            result.append(
                {
                    "stage": stage.name,
                    "state": "pending",
                    "attempt": 0,
                    "advisory": stage.advisory,
                    "started_at_ms": None,
                    "finished_at_ms": None,
                    "duration_ms": None,
                    "exit_code": None,
                    "verdict_source": None,
                    "reason": None,
                    "confidence": None,
                    "silent_for_ms": None,
                    "reviewers": [],
                    "commit": None,
                    "discarded": [],
                    "usage": None,
                    "node": None,
                    "ended_by": None,
                }
            )
    return result


def _execution_row(
    execution: walk.Execution, silent_for_ms: int | None, live: dict[str, Any] | None
) -> dict[str, Any]:
    running = execution.running
    seats = sorted(execution.seats.items())
    spent = execution.usage
    cut = execution.interrupted_seats
    if running:  # the seats that sat (a daemon's stop cut short, too), and the child now
        spent = rows.usage_sum([*(s["usage"] for _, s in seats), *(s["usage"] for s in cut), live])
    state = "running" if running else "passed" if execution.passed else "failed"
    finished = execution.finished_at_ms
    return {
        "stage": execution.stage.name,
        "state": state,
        "attempt": execution.attempt,
        "advisory": execution.stage.advisory,
        "started_at_ms": execution.started_at_ms,
        "finished_at_ms": finished,
        "duration_ms": None if finished is None else finished - execution.started_at_ms,
        "exit_code": execution.exit_code,
        "verdict_source": execution.verdict_source,
        "reason": _verdict_reason(execution.reason)
        if execution.verdict_source == "reported"
        else execution.reason,
        "confidence": execution.confidence if execution.stage.result_check == "reported" else None,
        "silent_for_ms": silent_for_ms if running else None,
        "reviewers": [
            {
                "reviewer": seat["reviewer"],
                "target": seat["target"],
                "verdict": seat["verdict"],
                "confidence": seat["confidence"],
                "reason": _verdict_reason(seat["reason"]),
                "usage": seat["usage"],
            }
            # Additive in 0.8.0: the Ray node the seat ran on (null: the daemon's host).
            | {"node": seat.get("node")}
            # Additive in 0.9.0: its sittings a daemon's stop cut short (issue 38).
            | {"interrupted": [_sitting(s) for s in cut if s["reviewer"] == seat["reviewer"]]}
            for _, seat in seats
        ]
        if execution.stage.result_check == "panel"
        else [],
        # Additive in 0.5.0: the commit the execution ran on (a producing stage: the one
        # it ended on), and what a reviewing stage committed or left that is not merged.
        "commit": execution.commit,
        "discarded": execution.discarded or [],
        # Additive in 0.6.0: tokens and cost its agent (a panel: its seats) reported.
        "usage": spent,
        # Additive in 0.8.0: the Ray node its child ran on (null: the daemon's host).
        "node": execution.node,
        # Additive in 0.9.0: why it ended before its check decided (null: it was decided):
        # "rebuilt" (the merge queue rebuilt its candidate), "interrupted", "aborted".
        "ended_by": execution.ended_by,
    }


def _sitting(cut: dict[str, Any]) -> dict[str, Any]:
    return {"at_ms": cut["at_ms"], "usage": cut["usage"]}


def _verdict_reason(reason: str | None) -> str | None:
    """A reported verdict's reason as shown: bounded as the verdict verb stores it since
    0.9.0, also when an older daemon stored it whole (up to a request line, 1 MiB)."""
    return None if reason is None else quoting.clip(reason, quoting.VERDICT_REASON_CHARS)
