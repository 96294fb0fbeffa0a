"""Settling the runs a killed daemon left in flight, from the stage log and from git.

The invariant: a run is ``merged`` exactly when main holds the commit its merge
moved to, and a merged ticket is never queued again.  A merge writes its intent
(``merge_intent``: the ref, main's sha, the tip) before the ref moves, so after a
crash the ref decides: main holds the tip → the merge happened and the run settles
``merged``; otherwise it did not, and the run is ``aborted`` and queued again.  A
run whose walk had already ended (only the settle was lost) settles as its walk says.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from sloopd.flows.results import StageResult
from sloopd.git import ops as gitops
from sloopd.git.errors import CheckoutError
from sloopd.runs.records import RunRecords

log = logging.getLogger(__name__)

RESTARTED = "the daemon restarted while the run was in flight"


class Recovery:
    def __init__(
        self,
        records: RunRecords,
        repo: Path,
        remove_worktree: Callable[[str], Awaitable[None]],
    ) -> None:
        self.records = records
        self.repo = repo
        self.remove_worktree = remove_worktree

    async def recover(self, run_ids: list[str]) -> list[tuple[str, str]]:
        """Settle each run; (run, the state it settled in)."""
        return [(run_id, await self._recover(run_id)) for run_id in run_ids]

    async def _recover(self, run_id: str) -> str:
        records = self.records
        facts = records.facts(run_id)
        state = records.replay(facts)
        # The walk had reached its end before the crash: only the settle is missing.
        ended = state.current is None and state.next in ("done", "halt")
        current = state.current
        reason = RESTARTED
        hold = False
        if current is not None:
            reason += f" (stage '{current.stage.name}' execution {current.attempt})"
            result = StageResult.interrupted("interrupted: the daemon restarted")
            if current.merge_intent is not None:
                result = await self._merge_outcome(current.merge_intent)
                # Git could not say whether main moved: a person decides, nothing re-runs.
                hold = result.undetermined
            records.finish(run_id, current.stage, current.attempt, result)
            state = records.replay(facts)
        if state.main_moved():
            try:
                await self.remove_worktree(run_id)
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
        records.settle(run_id, "aborted", None, reason, requeue=not hold)
        return "aborted"

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
            )
        if moved:
            return base.but(
                passed=True,
                reason=f"{ref} holds {tip[:12]}: the merge finished before the daemon restarted",
            )
        if checkout is not None:
            await self._put_back(checkout, ref, str(intent.get("from") or ""), tip)
        return base.but(reason=f"interrupted: the daemon restarted before {ref} moved")

    async def _put_back(self, checkout: Path, ref: str, old: str, tip: str) -> None:
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
