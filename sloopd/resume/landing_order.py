"""Continued runs at a merge-queue landing join the queue again, in their old order.

The queue lives in memory (sloopd.landing), so a restart empties it; the candidates
the runs had built hold work of runs ahead that the new queue has not built yet.  So
each continued run at a landing joins the new queue in the order it had joined the
old one (the start of the first execution of its latest pass through the landing, or
when it reached the landing's ``sync``), and one past its ``sync`` is sent back to
it with a ``rebuilt`` row, which spends none of its returns: every candidate is built
again on ``main``, in the old order, before a gate runs or a merge lands.
"""

from __future__ import annotations

from sloopd.flows import walk
from sloopd.flows.flow import Flow
from sloopd.flows.results import StageResult
from sloopd.runs.runner import RunManager

REBUILT_CAUSE = "the daemon restarted: the merge queue builds its candidates again, in order"


def _joined_at(flow: Flow, state: walk.Walk) -> int | None:
    """When the run joined the queue it is in (or is about to join); None: it is at no
    landing."""
    upcoming = state.next_stage if state.next == "start" else None
    running = state.current
    at = running.stage if running is not None else upcoming
    if at is None and state.next == "rebuild" and state.executions:
        at = state.executions[-1].stage
    span = flow.landing(at.name) if at is not None else None
    if span is None:
        return None
    joined: int | None = None
    for execution in reversed(state.executions):
        if not span.holds(flow.index(execution.stage.name)):
            return joined if joined is not None else execution.finished_at_ms
        joined = execution.started_at_ms
    return joined if joined is not None else 0


def _past_sync(flow: Flow, stage: str) -> bool:
    span = flow.landing(stage)
    return span is not None and flow.index(stage) > span.sync


def rejoin(runs: RunManager, run_ids: list[str]) -> list[str]:
    """Put the continued runs at a landing back in the queue, in old order; the run ids
    in the order their drivers start."""
    records, queue = runs.records, runs.landing.queue
    joined: list[tuple[int, str]] = []
    for run_id in run_ids:
        facts = records.facts(run_id)
        at = _joined_at(facts.flow, records.replay(facts))
        if at is not None:
            joined.append((at, run_id))
    joined.sort()
    for _, run_id in joined:
        facts = records.facts(run_id)
        state = records.replay(facts)
        current = state.current
        if current is not None:  # a panel at a gate: its candidate is gone, so is it
            result = StageResult.interrupted("interrupted: the daemon restarted")
            records.finish(run_id, current.stage, current.attempt, result)
            state = records.replay(facts)
        upcoming = state.next_stage if state.next == "start" else None
        if upcoming is not None and _past_sync(facts.flow, upcoming.name):
            records.append_steps(run_id, walk.REBUILT, upcoming.name, data={"cause": REBUILT_CAUSE})
        queue.join(run_id, f"{facts.ticket_name}#{facts.attempt}", facts.ticket, facts.branch)
    landing = [run_id for _, run_id in joined]
    return landing + [run_id for run_id in run_ids if run_id not in landing]
