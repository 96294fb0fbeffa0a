"""Executing one stage: a child (agent, command or panel seats) or git.

The run driver (sloopd.runs.runner) decides *which* stage runs from the replayed
stage log; this module runs it and returns the facts its stage_finished row
records: passed, exit_code, verdict_source, reason, the commit it ran on (or,
producing work, ended on), what a reviewing stage discarded, and a diagnosis.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any, Literal

from sloopd import vendor
from sloopd.core import cli_sight
from sloopd.core.state import Daemon
from sloopd.flows import explain, walk
from sloopd.flows.diagnosed import failed_session
from sloopd.flows.flow import Stage
from sloopd.flows.results import (
    StageResult,
    daemon_diagnosis,
)
from sloopd.git import ops as gitops
from sloopd.git.run_branches import RunBranches
from sloopd.git.workspace import Workspace
from sloopd.landing.merge_slot import MergeSlot
from sloopd.landing.queue import MergeQueue
from sloopd.proc.stage_io import Collected, Lost
from sloopd.runs import disk_full, outcomes, placing
from sloopd.runs.placing import Work
from sloopd.runs.records import RunRecords
from sloopd.runs.runstate import ActiveRun, RunFacts
from sloopd.runs.spawning import ChildStarter, NotStarted, Ran, said_streams, stream_of
from sloopd.runs.stop import TIMED_OUT, child_stopped, interrupts_git, stops_children, suspended
from sloopd.util import quoting
from sloopd.util.clock import now_ms
from sloopd.vendor.usage import Usage
from sloopd.vendor.usage import from_row as usage_from_row
from sloopd.vendor.usage import total as usage_total


class StageExecutor:
    """Runs stages; it gets only the collaborators a stage needs, not the run manager."""

    def __init__(
        self,
        daemon: Daemon,
        records: RunRecords,
        children: ChildStarter,
        branches: RunBranches,
        workspaces: Mapping[str, Workspace],
        *,
        merge_slot: MergeSlot,
        queue: MergeQueue | None = None,
    ) -> None:
        self.daemon = daemon
        self.records = records
        self.children = children
        self.branches = branches
        self.workspaces = workspaces  # by a child's placement's ``where``
        self.merge_slot = merge_slot
        self.queue = queue  # where a landing's sync builds (None: on main, as in 0.8)

    async def execute(
        self, active: ActiveRun, facts: RunFacts, stage: Stage, attempt: int
    ) -> StageResult:
        if stage.action != "ff_only":
            # The slot a sync took is for the ff_only right after it, nothing else.
            self.merge_slot.give_back(facts.run_id)
        try:
            if stage.action in ("agent", "command"):
                return await self._run_child(active, facts, stage, attempt)
            return await self._run_git(active, facts, stage, attempt)
        except (gitops.GitError, OSError) as exc:  # the git layer's errors, every kind
            # No room for a checkout or a bring-back: transient, queued again.
            full = disk_full.cause(exc, self.branches.places(facts))
            if full is not None:
                return disk_full.failed(full)
            if isinstance(exc, OSError):
                raise
            # git refused for a reason that is not a verdict; the stage fails with it.
            return StageResult.checked("git", False, str(exc))

    def _pinned(self, facts: RunFacts, base: str) -> str:
        """The commit the work stands at: the last passing gating stage's, else the base."""
        state = self.records.replay(facts)
        return state.merge_target() or base

    def _recorded_tip(self, facts: RunFacts) -> str:
        """Where the checkout stands, as the stage log recorded it: the last execution's
        commit, else the run's base.  Read without git, so no turn of the loop passes
        between a stage's start and its child's (show never sees one without the other)."""
        state = self.records.replay(facts)
        recorded = [e.commit for e in state.executions if e.commit]
        return recorded[-1] if recorded else facts.base

    async def _run_git(
        self, active: ActiveRun, facts: RunFacts, stage: Stage, attempt: int
    ) -> StageResult:
        main = active.config.repo.main
        name = facts.execution_name(stage.name, attempt, None)
        if stage.action == "sync":
            return await self._sync(active, facts, stage, main, name)
        tip = self._pinned(facts, await self.branches.base(facts))

        def announce(old: str, new: str) -> bool:
            # The last moment an abort can keep main where it is for sure; past it
            # an abort kills the git that moves the ref (and its hooks), and the ref
            # says whether the run merged.  The intent is durable before the ref
            # moves, so a crash from here on is settled from the ref too.
            if interrupts_git(active.stop):
                return False  # an abort, or a stopping daemon (the run continues later)
            self.records.append_steps(
                facts.run_id,
                walk.MERGE_INTENT,
                stage.name,
                attempt,
                data={"ref": f"refs/heads/{main}", "from": old, "to": new},
            )
            return True

        await self.merge_slot.take(facts.run_id)
        try:
            outcome = await gitops.ff_only(
                self.daemon.layout.repo,
                tip,
                main,
                allow_empty=stage.allow_empty,
                timeout=active.config.repo.git_timeout_ms / 1000,
                before_move=announce,
                # An abort past ``announce`` kills git and its hooks; the ref decides.
                interrupt=active.interrupt,
                descends_from=self.branches.merged_onto_main(facts, tip),
                moved=lambda: self.merge_slot.give_back(facts.run_id),
            )
        finally:
            self.merge_slot.give_back(facts.run_id)
        return outcomes.git_result(outcome).but(commit=tip)

    async def _sync(
        self, active: ActiveRun, facts: RunFacts, stage: Stage, main: str, name: str
    ) -> StageResult:
        """The run's own work merged with main, or, at a landing, with the merge-queue
        candidate ahead (``main + A + …``, sloopd.landing): its candidate.  A sync right
        before its ``ff_only`` keeps main's slot across that one boundary instead
        (sloopd.landing.merge_slot): main cannot move between the merge and the merge."""
        mode: Literal["merge", "rebase"] = "rebase" if stage.mode == "rebase" else "merge"
        state = self.records.replay(facts)
        # Its own work, never an earlier candidate: that holds runs that may have left.
        work = state.own_work(stage.name) or await self.branches.base(facts)
        build = self.queue.build_of(facts.run_id) if self.queue is not None else None
        keeps_slot = build is None and _followed_by_ff_only(facts, stage)
        if keeps_slot:
            await self.merge_slot.take(facts.run_id)
        kept = False
        try:
            onto = None if build is None else (build.onto, build.ahead)
            # The run's admitted repo.git_timeout bounds the merge or rebase and its record.
            timeout = active.config.repo.git_timeout_ms / 1000
            outcome = await self.branches.sync(facts, main, mode, work, name, onto, timeout=timeout)
            kept = keeps_slot and outcome.ok
        finally:
            if not kept:
                self.merge_slot.give_back(facts.run_id)
        result = outcomes.git_result(outcome)
        if outcome.hunks is not None and outcome.hunks.lines:
            # What conflicted, for the stage the conflict sends back (runs.feedback).
            result = result.but(hunks=outcome.hunks.lines, hunks_clipped=outcome.hunks.clipped)
        return result.but(commit=outcome.head) if outcome.ok else result

    def diagnose(self, active: ActiveRun) -> dict[str, Any]:
        """Why an agent failed, in vendor terms, from its own recent output."""
        settings = active.config
        # Vendors print clock times in the host's zone ("resets 3pm").
        local_zone = datetime.now().astimezone().tzinfo
        diagnosis = vendor.classify(
            active.recent_output,
            now_ms(),
            settings.vendor_patterns + vendor.DEFAULT_PATTERNS,
            tz=local_zone,
        )
        return diagnosis.as_json()

    async def _child(
        self,
        active: ActiveRun,
        facts: RunFacts,
        stage: Stage,
        attempt: int,
        seat: int | None,
        command: tuple[str, ...],
        start: str,
        work: Work,
    ) -> tuple[Ran | NotStarted, Collected | None]:
        """Commit in, the child, commit out: the one path of every child, wherever it
        runs (its placement, decided once, picks the launcher and the workspace)."""
        plan = placing.placement(active, facts, stage, seat, work)
        workspace = self.workspaces[plan.where]
        # A commit in: the place is made anew from it, whatever the last one left.
        await workspace.make(facts, start)
        ran = await self.children.run(active, facts, stage, attempt, seat, command, start, plan)
        if isinstance(ran, NotStarted) or isinstance(ran.end, Lost):
            return ran, None  # nothing ran there, or nothing came back from the lost node
        return ran, await workspace.collect(facts, ran.end, plan)

    async def _run_child(
        self, active: ActiveRun, facts: RunFacts, stage: Stage, attempt: int
    ) -> StageResult:
        pinned = ""
        if not stage.produces:
            # A reviewer reviews exactly this commit; what it changes is not merged.
            pinned = self._pinned(facts, await self.branches.base(facts))
        if stage.result_check == "panel":
            return await self._run_panel(active, facts, stage, attempt, pinned)
        command = stage.command or (active.config.agent.command if stage.action == "agent" else ())
        start = pinned or self._recorded_tip(facts)  # the commit the child starts from
        name = facts.execution_name(stage.name, attempt, None)
        # Only a producing agent stage's leftovers are committed or refused; a reviewer's
        # are recorded, a command's are not looked for.
        producing_agent = stage.action == "agent" and stage.produces
        auto = _auto_message(facts, stage, attempt) if stage.commit == "auto" else None
        work = await self._work(
            facts, name, auto if producing_agent else None,
            listing=producing_agent or not stage.produces, advance=stage.produces,
        )  # fmt: skip
        ran, collected = await self._child(
            active, facts, stage, attempt, None, command, start, work
        )
        if isinstance(ran, NotStarted):
            return StageResult.checked("exit_code", False, ran.reason)
        end = ran.end
        if isinstance(end, Lost):
            return outcomes.lost(end.reason, end.node, end.cluster_down)
        code = end.exit_code
        result = self._judge(facts, stage, attempt, code)
        if result.verdict_source == "exit_code" and not result.passed:
            # The cause after the rule: what the child said last (stderr first).
            result = result.saying(active.last_words.said(said_streams(active, stage)))
        # Exit 0 is no pass when the CLI's own stream says the session failed (Gemini).
        result = failed_session(result, stream_of(active, stage, None), active.recent_output)
        if code == 127 and not result.passed:
            result = _unseen_program(active, command, result)
        if ran.usage is not None:
            result = result.but(usage=ran.usage.row())
        if end.node is not None:
            result = result.but(node=dict(end.node))
        if active.refused_tools:
            # A headless CLI that refuses a tool still exits 0: say what it refused.
            refused = "the agent's CLI refused tools: " + quoting.quote_names(active.refused_tools)
            result = result.but(reason=f"{result.reason}; {refused}" if result.reason else refused)
        assert collected is not None  # an exit always has its work taken back
        if not stage.produces:
            left = outcomes.discarded_row(collected, pinned, None)
            return result.but(commit=pinned, discarded=(left,) if left else ())
        if producing_agent and collected.uncommitted and result.passed:
            result = outcomes.left_uncommitted(result, collected.uncommitted)
        return result.but(commit=collected.tip)

    async def _work(
        self, facts: RunFacts, name: str, auto_commit: str | None, *, listing: bool, advance: bool
    ) -> Work:
        return Work(
            base=await self.branches.base(facts),
            ref=self.branches.ref(facts, name),
            identity=self.branches.identity,
            auto_commit=auto_commit,
            listing=listing,
            advance=advance,
        )

    async def _run_panel(
        self, active: ActiveRun, facts: RunFacts, stage: Stage, attempt: int, pinned: str
    ) -> StageResult:
        """Seats one after another, each with its own credential; passes ≥ quorum.

        A panel continued after a daemon's stop (``Continue``) starts at its first seat
        that has not reported: the seats that did keep their verdicts and usage."""
        discarded: list[dict[str, Any]] = []
        sat = self.records.replay(facts).current
        seat_usage: list[Usage | None] = usage_so_far(sat)
        timed_out: list[str] = []
        lost: list[str] = []
        cluster_down = False  # a seat was lost while the cluster could not be reached
        for seat, reviewer in enumerate(stage.reviewers):
            if sat is not None and seat in sat.seats:
                continue  # it reported before the daemon's stop
            if stops_children(active.stop):
                break  # stopped: a spent budget ends the panel too
            await self.records.append_steps_durably(
                facts.run_id,
                walk.SEAT_STARTED,
                stage.name,
                attempt,
                seat,
                {"target": reviewer.target},
            )
            name = facts.execution_name(stage.name, attempt, seat)
            # Each seat in a place of its own: nothing a seat before it left applies.
            work = await self._work(facts, name, None, listing=True, advance=False)
            ran, collected = await self._child(
                active, facts, stage, attempt, seat, reviewer.command, pinned, work
            )
            ended = outcomes.SeatEnd.of(ran)
            if ended.lost is not None:
                lost.append(f"seat {seat} ({reviewer.target}): {ended.lost}")
                cluster_down = cluster_down or ended.cluster_down
            seat_usage.append(ended.usage)
            cause = child_stopped(active.stop)
            if cause is not None and cause.kind == TIMED_OUT:
                # Each seat has its own clock: this one fails, the next one sits.
                ended = ended.failing(cause.reason)
                timed_out.append(f"seat {seat} ({reviewer.target}) {cause.reason}")
                active.seat_ended()
            left = outcomes.discarded_row(collected, pinned, seat) if collected else None
            if left is not None:
                discarded.append(left)
            result = ended.row()
            # Cut short by the daemon's stop: the seat sits again when the run continues.
            kind = walk.SEAT_INTERRUPTED if suspended(active.stop) else walk.SEAT_FINISHED
            result |= {"clean": True} if kind == walk.SEAT_INTERRUPTED else {}
            await self.records.append_steps_durably(
                facts.run_id, kind, stage.name, attempt, seat, result
            )
        state = self.records.replay(facts)
        current = state.current
        seats = current.seats if current is not None else {}
        passes = sum(1 for s in seats.values() if s["verdict"] == "pass")
        total = len(stage.reviewers)
        passed = passes >= stage.quorum and len(seats) == total
        spent = usage_total(seat_usage)
        return StageResult(
            passed=passed,
            exit_code=None,
            verdict_source="panel",
            # The rule, then (failed) its failing seats with their reasons.
            reason=explain.panel_reason(stage, seats, passed=passed),
            commit=pinned,
            discarded=tuple(discarded),
            usage=spent.row() if spent is not None else None,
            # A panel that failed with seats stopped by their timeout says so; one whose
            # seat's node was lost is a transient failure (the ticket is queued again).
            diagnosis=None
            if passed or not (timed_out or lost)
            else outcomes.lost_diagnosis("; ".join(lost), cluster_down)
            if lost
            else daemon_diagnosis(TIMED_OUT, "; ".join(timed_out)),
        )

    def _judge(self, facts: RunFacts, stage: Stage, attempt: int, code: int) -> StageResult:
        """The stage's result check applied to what the child did."""
        if stage.result_check == "exit_code":
            passed = code == 0
            return StageResult.checked(
                "exit_code", passed, None if passed else outcomes.exit_reason(code), code
            )
        state = self.records.replay(facts)
        current = state.current
        verdict = current.verdict if current is not None else None
        if stage.result_check == "reported":
            if verdict is None:
                reason = "no verdict was reported before the worker exited"
                return StageResult.checked("missing", False, reason, code)
            return StageResult(
                passed=verdict.get("verdict") == "pass",
                exit_code=code,
                verdict_source="reported",
                reason=verdict.get("reason"),
                confidence=verdict.get("confidence"),
            )
        return StageResult.checked("panel", False, "panel stages need reviewer seats", code)


def usage_so_far(sat: walk.Execution | None) -> list[Usage | None]:
    """What a continued panel's earlier sittings spent: its stage row counts them too."""
    if sat is None:
        return []
    rows = [s["usage"] for s in sat.seats.values()] + [s["usage"] for s in sat.interrupted_seats]
    return [usage_from_row(row) for row in rows]


def _auto_message(facts: RunFacts, stage: Stage, attempt: int) -> str:
    return f"sloop: {facts.ticket_name} ({facts.ticket}), stage '{stage.name}' execution {attempt}"


def _followed_by_ff_only(facts: RunFacts, stage: Stage) -> bool:
    stages = facts.flow.stages
    position = facts.flow.index(stage.name) + 1
    return position < len(stages) and stages[position].action == "ff_only"


def _unseen_program(
    active: ActiveRun, command: tuple[str, ...], result: StageResult
) -> StageResult:
    """Exit 127 is the shell's "not found": say which program the sandbox hid, and the fix."""
    agent = active.config.agent
    hint = cli_sight.explain_exit_127(
        active.recent_output,
        command,
        (*agent.ro_mounts, *agent.rw_mounts),
        sandboxed=active.config.sandbox != "none",
    )
    if hint is None:
        return result
    # The shell's "not found" line is what the hint explains: the hint takes its place.
    result = result.unsaid()
    return result.but(reason=f"{result.reason}: {hint}")
