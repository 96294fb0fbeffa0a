"""Runs in flight: prepare the worktree, walk the flow, settle.

The driver of a run appends to its stage log and asks ``walk.replay`` for the
next step after every append, so the log alone decides what happens; a run a
stopped or crashed daemon left in flight continues from its log on the next start
(``resume``, after sloopd.resume recorded what the stop cut short).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import replace

from sloopd import vendor
from sloopd.core.state import Daemon
from sloopd.flows import walk
from sloopd.flows.diagnosed import REFUSED, is_transient
from sloopd.flows.flow import Stage
from sloopd.flows.results import StageResult
from sloopd.git import ops as gitops
from sloopd.git.errors import CheckoutError
from sloopd.git.run_branches import RunBranches
from sloopd.landing.steps import LandingSteps
from sloopd.proc.stage_io import Launcher
from sloopd.queue import gate
from sloopd.runs import disk_full, retries, watchdog
from sloopd.runs import stop as stops
from sloopd.runs.execute import StageExecutor, usage_so_far
from sloopd.runs.records import RunRecords
from sloopd.runs.runstate import ActiveRun, RunFacts
from sloopd.store import Store, StoreUnavailable
from sloopd.util.clock import now_ms
from sloopd.vendor import usage as usages
from sloopd.worker.credentials import Credentials
from sloopd.worker.sockets import WorkerSockets

log = logging.getLogger(__name__)

# How long a sandbox probe that passed stands for the runs started after it.
SANDBOX_PROBE_REUSE_SECONDS = 5.0


class SandboxUnavailable(Exception):
    """bubblewrap or user namespaces are missing: stages must not start unsandboxed."""


def sandboxed_as_admitted(daemon: Daemon, active: Mapping[str, ActiveRun]) -> Callable[[str], bool]:
    """Whether a run's git steps are sandboxed: as the run was admitted, so a reload
    never changes a run in flight (a run not in flight: the current configuration)."""

    def sandboxed(run_id: str) -> bool:
        run = active.get(run_id)
        config = run.config if run is not None else daemon.config
        return config.sandbox != "none"

    return sandboxed


class RunManager:
    """Starts, drives, aborts and settles runs; the scheduler hands it claims."""

    def __init__(
        self,
        daemon: Daemon,
        *,
        records: RunRecords,
        active: dict[str, ActiveRun],
        credentials: Credentials,
        worker_sockets: WorkerSockets,
        launchers: Mapping[str, Launcher],
        branches: RunBranches,
        executor: StageExecutor,
        landing: LandingSteps,
        on_settled: Callable[[], None],
    ) -> None:
        """Collaborators built by the composition root (sloopd.compose), none here.

        ``active`` is the registry of runs in flight the daemon's read side shares
        (``Daemon.active_runs``); ``on_settled`` is told after every run's end (the
        scheduler: a slot is free).
        """
        self.daemon = daemon
        self.records = records
        self.sink = records.sink
        self.active = active
        # Serialises removing checkouts (a 0.4 store's git worktrees share git's list).
        self.worktree_lock = asyncio.Lock()
        self._sandbox_known_until = 0.0
        self.on_settled = on_settled
        self.credentials = credentials
        self.worker_sockets = worker_sockets
        self.launchers = launchers  # by sandbox mode; asked whether a child can start
        self.branches = branches
        self.executor = executor
        self.landing = landing  # the run's way through the merge queue

    @property
    def store(self) -> Store:
        return self.daemon.require_store()

    def start(self, run_id: str, *, continuing: bool = False) -> None:
        config = self.daemon.config
        active = ActiveRun(run_id, config, stall_after_ms=config.agent.stall_after_ms)
        self.active[run_id] = active
        active.task = asyncio.get_running_loop().create_task(self._drive(active, continuing))

    def resume(self, run_id: str) -> None:
        """Continue a run the last daemon left in flight (sloopd.resume decided it may)."""
        self.start(run_id, continuing=True)

    async def _drive(self, active: ActiveRun, continuing: bool = False) -> None:
        run_id = active.run_id
        records = self.records
        try:
            facts = records.facts(run_id)
            active.budget = facts.flow.budget(active.config.agent)
            try:
                prepare = self._continue if continuing else self._prepare
                facts = replace(facts, base=await prepare(active, facts))
            except SandboxUnavailable as exc:
                await records.settle_durably(run_id, "failed", None, str(exc))
                return
            except gitops.GitInterrupted as exc:
                # Stopped while its branch was made (a hook that hangs): as the stop says;
                # a stopping daemon queues the ticket again (the run has nothing to keep).
                requeue = stops.suspended(active.stop)
                stop = stops.cancelled(active.stop) or stops.cancel(str(exc), requeue=requeue)
                await records.settle_durably(
                    run_id, "aborted", None, stop.reason, requeue=stop.requeue
                )
                return
            except CheckoutError:
                raise  # no git failure to start the run: the daemon's, as it always was
            except (gitops.GitError, OSError) as exc:
                # Failed; for want of space, queued again (sloopd.runs.disk_full).
                places = self.branches.places(facts)
                await disk_full.not_created(records, active.config.agent, facts, exc, places)
                return
            except StoreUnavailable as exc:
                # Not started: queued again once the store takes the settle.
                reason = f"the run could not be started: {exc}"
                await records.settle_durably(run_id, "aborted", None, reason, requeue=True)
                return
            while not await self._step_durably(active, facts):
                pass
        except Exception as exc:
            log.exception("run %s failed inside the daemon", run_id)
            reason = f"the daemon failed to drive the run: {exc.__class__.__name__}: {exc}"
            with contextlib.suppress(Exception):
                await records.settle_durably(run_id, "failed", None, reason)
        finally:
            self.credentials.revoke(run_id)
            await self.worker_sockets.close(run_id)
            self.active.pop(run_id, None)
            self.sink.forget(run_id)
            self.branches.forget(run_id)
            # A run stopped between its sync and its ff_only must not keep main's slot.
            self.executor.merge_slot.give_back(run_id)
            # Nor its place in the merge queue: those behind it are rebuilt without it.
            self.landing.ended(active)
            self.on_settled()

    async def _step_durably(self, active: ActiveRun, facts: RunFacts) -> bool:
        """One step; a step the store refused is taken again from the replayed log.

        Every write of a step is one transaction and the next step is decided from
        the log alone, so repeating a refused step repeats nothing that was stored.
        """
        try:
            return await self._step(active, facts)
        except StoreUnavailable as exc:
            if self.records.stopping:
                raise
            log.warning("%s: a step waits for the store: %s", facts.run_id, exc)
            await asyncio.sleep(1.0)
            return False

    async def _continue(self, active: ActiveRun, facts: RunFacts) -> str:
        """A continued run's worker socket and what it spent so far; its base commit."""
        await self._probe_sandbox(active)
        base = await self.branches.base(facts)
        state = self.records.replay(facts)
        finished = [usages.from_row(e.usage) for e in state.executions if not e.running]
        active.spent = usages.total([*finished, *usage_so_far(state.current)])
        await self.worker_sockets.open(facts.run_id)
        return base

    async def _probe_sandbox(self, active: ActiveRun) -> None:
        if active.config.sandbox != "none" and time.monotonic() >= self._sandbox_known_until:
            launcher = self.launchers[active.config.sandbox]
            missing = await asyncio.to_thread(launcher.unavailable)
            self.daemon.sandbox_problem = missing
            if missing is None:
                # A sandbox that just started is not probed again for every run of a
                # busy queue (a bwrap per run); a failed probe is always repeated.
                self._sandbox_known_until = time.monotonic() + SANDBOX_PROBE_REUSE_SECONDS
            if missing is not None:
                raise SandboxUnavailable(
                    f"the sandbox cannot start, so no stage of this run was started: {missing} "
                    'Or set sandbox = "none" in sloop.toml to run agents unsandboxed (unsafe).'
                )

    async def _prepare(self, active: ActiveRun, facts: RunFacts) -> str:
        """The run's checkout, branch and worker socket; the commit its branch starts at."""
        await self._probe_sandbox(active)
        for old_id, _old_path in self.store.all("run_worktrees_of_ticket", (facts.ticket,)):
            await self.remove_worktree(old_id)
        facts.worktree.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        await self.worker_sockets.open(facts.run_id)
        # Not under worktree_lock: a checkout is a repository of its own, and its branch
        # is created by compare-and-swap in the main one (two runs cannot both make it).
        base = await self.branches.create(
            facts,
            active.config.repo.main,
            timeout=active.config.repo.git_timeout_ms / 1000,
            interrupt=active.interrupt,
        )
        with self.store.writer.transaction() as tx:
            tx.run("run_set_worktree", (str(facts.worktree), facts.run_id))
            tx.run("run_started", {"id": facts.run_id, "now": now_ms()})
        self.daemon.append_event(
            "run_started",
            ticket=facts.ticket,
            run=facts.run_id,
            data={"worktree": str(facts.worktree), "branch": facts.branch},
        )
        return base

    async def _step(self, active: ActiveRun, facts: RunFacts) -> bool:
        """Take the walk's next step (sloopd.runs.stop.next_move); True once settled."""
        state = self.records.replay(facts)
        match stops.next_move(state, active.stop, active.config.agent.max_interruptions):
            case stops.Execute(stage, attempt):
                if await self.landing.before(active, facts, stage):
                    await self._execute(active, facts, stage, attempt)
            case stops.Continue(stage, attempt):
                await self._execute(active, facts, stage, attempt, continued=True)
            case stops.Rebuild(stage, attempt, reason):
                self.landing.rebuild_after(facts, stage, attempt, reason)
            case stops.Return(stage, attempt, to):
                self.records.append_steps(
                    facts.run_id, walk.RETURNED, stage.name, attempt, data={"to": to.name}
                )
                self.sink.append(
                    facts.run_id, stage.name, attempt, "system", f"returning to '{to.name}'"
                )
            case stops.Interrupted(stage, attempt):
                result = StageResult.interrupted("interrupted before it finished")
                self.records.finish(facts.run_id, stage, attempt, result)
            case stops.Suspend():
                return True  # in flight still: the next start continues it
            case stops.Settle() as settle:
                if settle.outcome == "merged":
                    await self._remove_merged_worktree(facts.run_id)
                elif not settle.requeue:  # queued again: the next attempt removes it
                    await self._keep_worktree(facts)
                self.records.settle(
                    facts.run_id,
                    settle.outcome,
                    settle.halt,
                    settle.reason,
                    requeue=settle.requeue,
                    state=state,
                    requeue_at_ms=settle.requeue_at_ms,
                )
                return True
        return False

    async def _keep_worktree(self, facts: RunFacts) -> None:
        # A copy-on-write checkout is copied whole for a person to read (a large one
        # after the run settled); a failure to does not change how it ended.
        try:
            await self.branches.keep(facts)
        except (gitops.GitError, OSError) as exc:
            log.warning("%s: its checkout could not be kept whole: %s", facts.run_id, exc)

    async def _remove_merged_worktree(self, run_id: str) -> None:
        # Gone before the run reads merged, so no one sees a merged run that still
        # holds a worktree.
        try:
            await self.remove_worktree(run_id)
        except CheckoutError:
            raise  # not git's failure to remove it: the daemon's, as it always was
        except gitops.GitError as exc:
            log.warning("%s merged but its worktree stays: %s", run_id, exc)

    async def _execute(
        self,
        active: ActiveRun,
        facts: RunFacts,
        stage: Stage,
        attempt: int,
        continued: bool = False,
    ) -> None:
        if not continued:
            self.records.append_steps(facts.run_id, walk.STAGE_STARTED, stage.name, attempt)
        active.stage, active.attempt, active.stage_started_ms = stage.name, attempt, now_ms()
        self.sink.append(
            facts.run_id,
            stage.name,
            attempt,
            "system",
            f"stage '{stage.name}' execution {attempt} "
            + ("continues with its next seat" if continued else "started"),
        )
        result = await self.executor.execute(active, facts, stage, attempt)
        if stops.suspended(active.stop) and stage.result_check == "panel":
            # Its seats are recorded one by one: the panel continues, unjudged till then.
            active.stage_ended()
            return
        too_late = stops.merged_despite(active.stop, stage, result)
        if too_late is not None:
            # Too late to stop: main moved before the stop arrived, so the run merged.
            # A hook still running then was killed: the reason says so (the hook's
            # own work, a deploy say, did not finish, and the operator must know).
            killed = f"; {result.reason}" if result.reason else ""
            self.sink.append(
                facts.run_id,
                stage.name,
                attempt,
                "system",
                f"the merge had started when the run was stopped ({too_late}); "
                f"it finished, so the run merged{killed}",
            )
        result = stops.judged(result, active.stop, stage, lambda: self.executor.diagnose(active))
        # A landing stage's failure counts once the runs ahead in its candidate passed.
        result = await self.landing.after(active, facts, stage, result)
        # Cut short by an abort (not merged despite it): its record says so.
        aborted = stops.cancelled(active.stop) is not None and not result.passed
        active.stage_ended()
        # The child ran: its result is a fact that must be kept, so wait for the store.
        await self.records.durably(
            lambda: self.records.finish(
                facts.run_id, stage, attempt, result, active.stage_started_ms, aborted=aborted
            ),
            f"{facts.run_id}: the result of '{stage.name}' execution {attempt}",
        )
        halted = self._halt_after(active, facts, stage, attempt, result)
        if halted is not None:
            active.stop_with(halted)

    def _halt_after(
        self, active: ActiveRun, facts: RunFacts, stage: Stage, attempt: int, result: StageResult
    ) -> stops.Stop | None:
        """The run's end a stage's classified failure decides, beyond the flow's rules."""
        diagnosis = result.diagnosis or {}
        kind = diagnosis.get("classification")
        if kind in vendor.LIMIT_CLASSES:
            return retries.after_vendor_limit(self.daemon, facts, diagnosis)
        if stage.action == "agent" and kind not in (*retries.TRANSIENT_CLASSES, REFUSED):
            # Its vendor answered (an unreachable or overloaded one says nothing of a
            # limit, and a preset that refused to start asked it nothing): the next
            # limit with no named reset is probed from the start.
            gate.limit_lifted(self.daemon)
        # Not a network failure the stage's own network = false explains: that one is
        # final (sloopd.flows.diagnosed), so the ticket is not queued again for it.
        if is_transient(stage, diagnosis):
            settings = active.config.agent
            return retries.after_transient(
                self.store, settings, facts, stage.name, attempt, diagnosis
            )
        if kind == stops.BUDGET_EXCEEDED:
            return stops.halt(
                f"stage '{stage.name}' failed on execution {attempt}: {kind} ({result.reason})"
            )
        return None

    async def remove_worktree(self, run_id: str) -> None:
        facts = self.records.facts(run_id)
        async with self.worktree_lock:
            await self.branches.remove(facts.worktree)
            # The run's own HOME, git home and prompts go with its checkout.
            await self.branches.remove(self.daemon.layout.state_dir / "runs" / run_id)
        with self.store.writer.transaction() as tx:
            tx.run("run_clear_worktree", (run_id,))

    async def watch_stalls(self) -> None:
        """Stop a stage whose child has been silent or ran too long (sloopd.runs.watchdog)."""
        await watchdog.watch(self.daemon, self.active)

    async def collect_worktrees(self) -> list[str]:
        """``gc``: remove the worktrees that settled runs kept for inspection."""
        removed = []
        for run_id, _path in self.store.all("run_worktrees_terminal"):
            if run_id in self.active:
                continue  # still settling: its driver removes or keeps it
            await self.remove_worktree(run_id)
            removed.append(run_id)
        return removed

    async def abort(self, run_id: str, reason: str, *, requeue: bool = False) -> None:
        """Stop a run in flight and wait until it is settled.

        The wait is short whatever the run was doing: the stop ends its child (SIGTERM,
        SIGKILL after the grace) and kills the git that makes its branch or moves main
        with its hooks (``ActiveRun.interrupt``), so a hook that hangs holds neither the
        answer nor a stopping daemon."""
        active = self.active.get(run_id)
        if active is None:
            return
        active.stop_with(stops.cancel(reason, requeue=requeue))
        if active.child is not None:
            await active.child.stop()
        if active.task is not None:
            await asyncio.shield(active.task)

    async def stop_all(self) -> None:
        """A stopping daemon stops every run's child; each run's execution ends
        interrupted and the run stays in flight, continued at the next start."""
        self.records.stopping = True
        await asyncio.gather(
            *(self._suspend(active) for active in list(self.active.values())),
            return_exceptions=True,
        )

    async def _suspend(self, active: ActiveRun) -> None:
        active.stop_with(stops.stopping())
        if active.child is not None:
            await active.child.stop()
        if active.task is not None:
            await asyncio.shield(active.task)
