"""The runs a stopped or killed daemon left in flight: settled, or continued.

The invariant: a run is ``merged`` exactly when main holds the commit its merge
moved to, and a merged ticket is never queued again.  A merge writes its intent
(``merge_intent``: the ref, main's sha, the tip) before the ref moves, so after a
crash the ref decides: main holds the tip → the merge happened and the run settles
``merged``; otherwise it did not, and the merge is run again when the run continues.
A run whose walk had already ended (only the settle was lost) settles as its walk
says.  Every other run continues (issue 38): the execution the stop cut short ends
``interrupted`` (no returns, no retries spent; its output and usage kept), a panel's
sitting seat ``seat_interrupted``, and the driver starts the same stage again from
the same commit.  A run that cannot continue (its log does not replay against its
flow, a commit it needs is gone) settles ``aborted`` and its ticket is queued again.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from sloopd.flows import walk
from sloopd.flows.results import StageResult
from sloopd.git import ops as gitops
from sloopd.git.errors import CheckoutError
from sloopd.resume.landing_order import rejoin
from sloopd.resume.spent import spent_by
from sloopd.runs.runner import RunManager
from sloopd.runs.runstate import RunFacts

log = logging.getLogger(__name__)

RESTARTED = "the daemon restarted while the run was in flight"


@dataclass(slots=True)
class Recovered:
    settled: list[tuple[str, str]] = field(default_factory=list)  # (run, its state)
    continuing: list[str] = field(default_factory=list)


async def recover(runs: RunManager) -> Recovered:
    """Settle or continue every run the last daemon left in flight; the continuing ones
    in the order their drivers start (``RunManager.resume``, after the read model)."""
    ids = [run_id for (run_id,) in runs.store.all("runs_active_ids")]
    recovered = await Recovery(runs).recover(ids)
    recovered.continuing = rejoin(runs, recovered.continuing)
    bound = runs.daemon.config.agent.max_interruptions
    for run_id in recovered.continuing:
        facts = runs.records.facts(run_id)
        state = runs.records.replay(facts)
        if state.interrupted_in_a_row >= bound:
            continue  # its driver settles it failed at its first step: it goes on no more
        at = state.current.stage if state.current is not None else state.next_stage
        runs.daemon.append_event(
            "run_continued",
            ticket=facts.ticket,
            run=run_id,
            data={
                "stage": at.name if at is not None else None,
                "interrupted_in_a_row": state.interrupted_in_a_row,
            },
        )
    return recovered


class Recovery:
    def __init__(self, runs: RunManager) -> None:
        self.runs = runs
        self.records = runs.records
        self.repo = runs.daemon.layout.repo

    async def recover(self, run_ids: list[str]) -> Recovered:
        recovered = Recovered()
        for run_id in run_ids:
            outcome = await self._recover(run_id)
            if outcome is None:
                recovered.continuing.append(run_id)
            else:
                recovered.settled.append((run_id, outcome))
        return recovered

    async def _recover(self, run_id: str) -> str | None:
        """The state the run settled in; None: it continues."""
        records = self.records
        facts = records.facts(run_id)
        state = records.replay(facts)
        if state.corrupt is not None:
            why = f"{RESTARTED}; its stage log does not replay against its flow: {state.corrupt}"
            records.settle(run_id, "aborted", None, why, requeue=True, state=state)
            return "aborted"
        # The walk had reached its end before the crash: only the settle is missing.
        ended = state.current is None and state.next in ("done", "halt")
        current = state.current
        reason = RESTARTED
        hold = False
        if current is not None:
            reason += f" (stage '{current.stage.name}' execution {current.attempt})"
            hold = await self._cut_short(facts, current)
            state = records.replay(facts)
        if state.main_moved():
            try:
                await self.runs.remove_worktree(run_id)
            except CheckoutError:
                raise  # not git's failure to remove it: the daemon's, as it always was
            except gitops.GitError as exc:
                log.warning("%s merged but its worktree stays: %s", run_id, exc)
            records.settle(run_id, "merged", None, None, state=state)
            return "merged"
        if ended and state.outcome is not None:
            records.settle(run_id, state.outcome, state.halt, None, state=state)
            return state.outcome
        if hold:
            reason += "; whether main moved could not be told, so the ticket is held"
            records.settle(run_id, "aborted", None, reason, requeue=False)
            return "aborted"
        gone = await self._missing_commit(facts, state)
        if gone is not None and not state.executions:
            # Killed while its branch was made: nothing to continue, queued again.
            reason = f"{RESTARTED}, before its first stage started"
            records.settle(run_id, "aborted", None, reason, requeue=True)
            return "aborted"
        if gone is not None:
            records.settle(run_id, "aborted", None, f"{RESTARTED}; {gone}", requeue=True)
            return "aborted"
        return None

    async def _cut_short(self, facts: RunFacts, current: walk.Execution) -> bool:
        """Record how the executing stage ended; True: git cannot say whether main moved
        (a person decides, nothing runs again)."""
        records, run_id = self.records, facts.run_id
        if current.merge_intent is not None:
            result = await self._merge_outcome(current.merge_intent)
            records.finish(run_id, current.stage, current.attempt, result)
            return result.undetermined
        config = self.runs.daemon.config
        if current.stage.result_check == "panel":
            # The seats that reported keep their verdicts; the sitting one sits again.
            stage, attempt = current.stage, current.attempt
            for seat in [s for s, sitting in current.seats.items() if not sitting["done"]]:
                used = spent_by(records.store, config, run_id, stage, attempt, seat)
                row: dict[str, Any] = {"exit_code": None}
                if used is not None:
                    row["usage"] = used
                await records.append_steps_durably(
                    run_id, walk.SEAT_INTERRUPTED, stage.name, attempt, seat, row
                )
            return False
        used = spent_by(records.store, config, run_id, current.stage, current.attempt, None)
        result = StageResult.interrupted("interrupted: the daemon restarted").but(usage=used)
        records.finish(run_id, current.stage, current.attempt, result)
        return False

    async def _missing_commit(self, facts: RunFacts, state: walk.Walk) -> str | None:
        """Why the run cannot continue for want of a commit (a store restored beside a
        repository that lost the run's refs or objects); None: all are there."""
        base_ref = self.runs.branches.ref(facts, "base")
        if await gitops.rev_parse(self.repo, base_ref) is None:
            return f"it cannot continue: its start commit ({base_ref}) is gone"
        for execution in state.executions:
            sha = execution.commit
            if sha and await gitops.rev_parse(self.repo, sha) is None:
                return (
                    f"it cannot continue: commit {sha[:12]} of stage '{execution.stage.name}' "
                    f"execution {execution.attempt} is gone from the repository"
                )
        return None

    async def _merge_outcome(self, intent: dict[str, Any]) -> StageResult:
        """The interrupted merge's stage result, as main's ref tells it."""
        ref, tip = str(intent.get("ref")), str(intent.get("to"))
        base = StageResult(passed=False, exit_code=None, verdict_source="git", commit=tip)
        try:
            checkout = await gitops.checkout_of(self.repo, ref)
            stale = await gitops.release_stale_locks(
                self.repo, ref, since_ms=int(intent.get("at_ms") or 0), checkout=checkout
            )
            for lock in stale:
                log.warning("removed %s, left by the merge a killed daemon was making", lock)
            moved = await gitops.contains(self.repo, ref, tip)
        except gitops.GitError as exc:
            return base.but(
                reason=f"interrupted: the daemon restarted mid-merge and git cannot tell "
                f"whether {ref} moved: {exc}",
                undetermined=True,
                ended_by=walk.ENDED_BY_INTERRUPTED,
            )
        if moved:
            return base.but(
                passed=True,
                reason=f"{ref} holds {tip[:12]}: the merge finished before the daemon restarted",
            )
        if checkout is not None:
            await self._put_back(checkout, ref, str(intent.get("from") or ""), tip)
        # Not moved: the merge runs again when the run continues (its rules hold then).
        return base.but(
            reason=f"interrupted: the daemon restarted before {ref} moved",
            ended_by=walk.ENDED_BY_INTERRUPTED,
        )

    async def _put_back(self, checkout: Any, ref: str, old: str, tip: str) -> None:
        """A merge killed at start-up (it outlived the wait for survivors) may have moved
        the checkout's files but not the ref: back where the ref is, or every later
        merge refuses the checkout as dirty.  Only while the ref is where the merge
        found it; a failure here is logged, it changes nothing of the settle."""
        try:
            if not old or await gitops.rev_parse(self.repo, ref) != old:
                return
            left = await gitops.put_back(checkout, old, tip)
        except gitops.GitError as exc:
            left = f"the checkout {checkout} could not be checked: {exc}"
        if left is not None:
            log.warning("after the merge a killed daemon was making, %s", left)
