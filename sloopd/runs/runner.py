"""Runs in flight: prepare the worktree, walk the flow, settle.

The driver of a run appends to its stage log and asks ``walk.replay`` for the
next step after every append, so the log alone decides what happens; a run
interrupted by a crash is settled from its log on the next start.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any

from sloopd import vendor
from sloopd.core.logsink import LogSink
from sloopd.core.state import Daemon
from sloopd.flows import walk
from sloopd.flows.flow import Stage
from sloopd.git import checkout
from sloopd.git import ops as gitops
from sloopd.proc.children import ProcessGroups
from sloopd.proc.sandbox import probe as sandbox_probe
from sloopd.queue import gate
from sloopd.runs import budget, retries, watchdog
from sloopd.runs.branch import RunBranches
from sloopd.runs.execute import StageExecutor
from sloopd.runs.launch import HostLauncher, SandboxLauncher
from sloopd.runs.records import RunRecords
from sloopd.runs.recovery import Recovery
from sloopd.runs.runstate import ActiveRun, RunFacts
from sloopd.runs.spawning import ChildStarter
from sloopd.runs.worker_verbs import WorkerVerbs
from sloopd.store import Store, StoreUnavailable
from sloopd.util.clock import now_ms
from sloopd.worker.credentials import Credentials
from sloopd.worker.dispatcher import WorkerDispatcher
from sloopd.worker.sockets import WorkerSockets

log = logging.getLogger(__name__)

STALL_CHECK_SECONDS = 1.0
# A stall tick later than this means the daemon was stopped or held, not the agents.
PAUSE_TOLERANCE_SECONDS = 0.5


class SandboxUnavailable(Exception):
    """bubblewrap or user namespaces are missing: stages must not start unsandboxed."""


class RunManager:
    """Starts, drives, aborts and settles runs; the scheduler hands it claims."""

    def __init__(self, daemon: Daemon, groups: ProcessGroups, sink: LogSink) -> None:
        self.daemon = daemon
        self.groups = groups
        self.sink = sink
        self.records = RunRecords(daemon, sink)
        self.active: dict[str, ActiveRun] = {}
        daemon.active_runs = self.active
        self.worktree_lock = asyncio.Lock()
        self.on_settled: list[Any] = []
        self.credentials = Credentials()
        verbs = WorkerVerbs(daemon, self.records)
        self.worker_sockets = WorkerSockets(
            daemon.layout.worker_socket_dir,
            lambda run: WorkerDispatcher(run, self.credentials, verbs.handlers()),
        )
        settings = lambda: daemon.config.agent  # noqa: E731
        self.launchers = {
            "bwrap": SandboxLauncher(daemon.layout, settings, groups),
            "none": HostLauncher(daemon.layout, settings, groups),
        }
        sandbox = self.launchers["bwrap"]
        assert isinstance(sandbox, SandboxLauncher)
        self.branches = RunBranches(
            daemon.layout,
            sandboxed=self._sandboxed,
            protected=tuple(sandbox.protected()),
        )
        children = ChildStarter(
            daemon.layout,
            self.records,
            self.credentials,
            self.worker_sockets.path,
            lambda mode: self.launchers[mode],
        )
        self.executor = StageExecutor(
            daemon,
            self.records,
            children,
            self.branches,
            merge_lock=asyncio.Lock(),  # merges are serialised across runs
        )

    @property
    def store(self) -> Store:
        return self.daemon.require_store()

    def _sandboxed(self, run_id: str) -> bool:
        """Whether a run's git steps are sandboxed: as the run was admitted."""
        active = self.active.get(run_id)
        config = active.config if active is not None else self.daemon.config
        return config.sandbox != "none"

    def start(self, run_id: str) -> None:
        config = self.daemon.config
        active = ActiveRun(run_id, config, stall_after_ms=config.agent.stall_after_ms)
        self.active[run_id] = active
        active.task = asyncio.get_running_loop().create_task(self._drive(active))

    async def _drive(self, active: ActiveRun) -> None:
        run_id = active.run_id
        records = self.records
        try:
            facts = records.facts(run_id)
            active.budget = facts.flow.budget(active.config.agent)
            try:
                await self._prepare(active, facts)
            except SandboxUnavailable as exc:
                await records.settle_durably(run_id, "failed", None, str(exc))
                return
            except gitops.GitError as exc:
                reason = f"the run's checkout could not be created: {exc}"
                await records.settle_durably(run_id, "failed", None, reason)
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
            for callback in self.on_settled:
                callback()

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

    async def _prepare(self, active: ActiveRun, facts: RunFacts) -> None:
        if active.config.sandbox != "none":
            missing = await asyncio.to_thread(sandbox_probe)
            self.daemon.sandbox_problem = missing
            if missing is not None:
                raise SandboxUnavailable(
                    f"the sandbox cannot start, so no stage of this run was started: {missing} "
                    'Or set sandbox = "none" in sloop.toml to run agents unsandboxed (unsafe).'
                )
        for old_id, _old_path in self.store.all("run_worktrees_of_ticket", (facts.ticket,)):
            await self.remove_worktree(old_id)
        facts.worktree.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        await self.worker_sockets.open(facts.run_id)
        async with self.worktree_lock:
            await self.branches.create(facts, active.config.repo.main)
        with self.store.writer.transaction() as tx:
            tx.run("run_set_worktree", (str(facts.worktree), facts.run_id))
            tx.run("run_started", {"id": facts.run_id, "now": now_ms()})
        self.daemon.append_event(
            "run_started",
            ticket=facts.ticket,
            run=facts.run_id,
            data={"worktree": str(facts.worktree), "branch": facts.branch},
        )

    async def _step(self, active: ActiveRun, facts: RunFacts) -> bool:
        """Take the walk's next step; True once the run is settled."""
        state = self.records.replay(facts)
        # A merge that moved main wins over any stop: the record follows the ref.
        merged = state.main_moved() and state.next != "running"
        halting = active.requeue_at_ms is not None or active.halt_reason is not None
        stopping = active.cancel_reason is not None or halting
        if merged and stopping and state.next in ("start", "return"):
            # Stopped after the merge: what follows it does not run, the run merged.
            await self._remove_merged_worktree(facts.run_id)
            self.records.settle(facts.run_id, "merged", None, None, state=state)
            return True
        if halting and state.next != "running" and not merged:
            self.records.settle(
                facts.run_id,
                "failed",
                # The stage failed and the walk stops as if its fail_action were
                # "fail": a vendor limit, a transient failure or a spent budget
                # never spends a return_to budget.
                "fail_action",
                active.halt_reason,
                state=state,
                requeue_at_ms=active.requeue_at_ms,
            )
            return True
        if active.cancel_reason is not None and state.next != "running" and not merged:
            self.records.settle(
                facts.run_id,
                "aborted",
                None,
                active.cancel_reason,
                requeue=active.requeue,
                state=state,
            )
            return True
        if state.next == "start":
            assert state.next_stage is not None
            stage = state.next_stage
            await self._execute(active, facts, stage, state.attempts_of(stage.name) + 1)
        elif state.next == "return":
            assert state.next_stage is not None
            last = state.executions[-1]
            self.records.append_steps(
                facts.run_id,
                walk.RETURNED,
                last.stage.name,
                last.attempt,
                data={"to": state.next_stage.name},
            )
            self.sink.append(
                facts.run_id,
                last.stage.name,
                last.attempt,
                "system",
                f"returning to '{state.next_stage.name}'",
            )
        elif state.next == "running":
            current = state.current
            assert current is not None
            self.records.finish(
                facts.run_id,
                current.stage,
                current.attempt,
                {"passed": False, "reason": "interrupted before it finished"},
            )
        else:
            outcome = "merged" if merged else state.outcome
            assert outcome is not None
            if outcome == "merged":
                await self._remove_merged_worktree(facts.run_id)
            halt = None if merged else state.halt
            self.records.settle(facts.run_id, outcome, halt, None, state=state)
            return True
        return False

    async def _remove_merged_worktree(self, run_id: str) -> None:
        # Gone before the run reads merged, so no one sees a merged run that still
        # holds a worktree.
        try:
            await self.remove_worktree(run_id)
        except gitops.GitError as exc:
            log.warning("%s merged but its worktree stays: %s", run_id, exc)

    async def _execute(
        self, active: ActiveRun, facts: RunFacts, stage: Stage, attempt: int
    ) -> None:
        self.records.append_steps(facts.run_id, walk.STAGE_STARTED, stage.name, attempt)
        active.stage, active.attempt, active.stage_started_ms = stage.name, attempt, now_ms()
        self.sink.append(
            facts.run_id,
            stage.name,
            attempt,
            "system",
            f"stage '{stage.name}' execution {attempt} started",
        )
        result = await self.executor.execute(active, facts, stage, attempt)
        if active.cancel_reason is not None and stage.action == "ff_only" and result["passed"]:
            # Too late to stop: main moved before the stop arrived, so the run merged.
            self.sink.append(
                facts.run_id,
                stage.name,
                attempt,
                "system",
                f"the merge had started when the run was stopped ({active.cancel_reason}); "
                "it finished, so the run merged",
            )
        elif active.cancel_reason is not None:
            result = {**result, "passed": False, "reason": active.cancel_reason}
        elif active.stop_cause is not None:  # a timeout or a spent budget stopped it
            result = budget.stopped_result(result, active.stop_cause)
        elif not result["passed"] and stage.action == "agent" and "diagnosis" not in result:
            result["diagnosis"] = self.executor.diagnose(active)
        active.child = None
        active.stall_killed_after_ms = active.stop_cause = None
        # The child ran: its result is a fact that must be kept, so wait for the store.
        await self.records.durably(
            lambda: self.records.finish(
                facts.run_id, stage, attempt, result, active.stage_started_ms
            ),
            f"{facts.run_id}: the result of '{stage.name}' execution {attempt}",
        )
        diagnosis = result.get("diagnosis") or {}
        kind = diagnosis.get("classification")
        if kind in vendor.LIMIT_CLASSES:
            self._vendor_limit(facts, diagnosis)
        elif kind in retries.TRANSIENT_CLASSES and not stage.advisory:
            retries.after_transient(self.store, active, facts, stage.name, attempt, diagnosis)
        elif kind == budget.BUDGET_EXCEEDED:
            active.halt_reason = (
                f"stage '{stage.name}' failed on execution {attempt}: {kind} ({result['reason']})"
            )

    def _vendor_limit(self, facts: RunFacts, diagnosis: dict[str, Any]) -> None:
        """A rate or usage limit: close the gate, settle failed, queue the ticket again.

        No return_to budget is spent and no agent is respawned before the
        deadline: the ticket's next trigger is due when the cooldown ends.
        """
        kind = diagnosis["classification"].replace("_", " ")
        reason = f"{kind} reported by the agent of {facts.run_id}"
        # Capped at agent.max_cooldown (the reason then says so).
        until = gate.cool_down_for_limit(self.daemon, diagnosis.get("reset_at_ms"), reason)
        active = self.active.get(facts.run_id)
        if active is not None:
            active.requeue_at_ms = until

    async def remove_worktree(self, run_id: str) -> None:
        facts = self.records.facts(run_id)
        async with self.worktree_lock:
            await self.branches.remove(facts.worktree)
            # The run's own HOME, git home and prompts go with its checkout.
            await checkout.remove(self.daemon.layout.state_dir / "runs" / run_id)
        with self.store.writer.transaction() as tx:
            tx.run("run_clear_worktree", (run_id,))

    async def watch_stalls(self) -> None:
        """Stop a stage whose child has been silent past stall_kill_after, or ran past
        its timeout (sloopd.runs.watchdog).

        Time the daemon itself did not run (SIGSTOP, a suspended VM, a loop held by
        a long call) is not the agents' silence: an agent blocked on a request to a
        stopped daemon is waiting for us.  A tick that comes late by more than
        PAUSE_TOLERANCE_SECONDS credits the gap to every child before judging.
        """
        last_tick = time.monotonic()
        while True:
            await asyncio.sleep(STALL_CHECK_SECONDS)
            tick = time.monotonic()
            paused = tick - last_tick - STALL_CHECK_SECONDS
            last_tick = tick
            if paused > PAUSE_TOLERANCE_SECONDS:
                log.warning("the daemon did not run for %.1f s; not counted as silence", paused)
                for active in self.active.values():
                    active.credit_pause(paused)
            for active in list(self.active.values()):
                watchdog.check(active)

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
        """Stop a run in flight and wait until it is settled."""
        active = self.active.get(run_id)
        if active is None:
            return
        if active.cancel_reason is None:
            active.cancel_reason, active.requeue = reason, requeue
        if active.child is not None:
            await active.child.stop()
        if active.task is not None:
            await asyncio.shield(active.task)

    async def stop_all(self, reason: str) -> None:
        """A stopping daemon stops every run; each is settled and queued again."""
        self.records.stopping = True
        await asyncio.gather(
            *(self.abort(run_id, reason, requeue=True) for run_id in list(self.active)),
            return_exceptions=True,
        )

    async def recover(self) -> list[tuple[str, str]]:
        """Settle runs a crashed daemon left in flight (sloopd.runs.recovery)."""
        ids = [run_id for (run_id,) in self.store.all("runs_active_ids")]
        recovery = Recovery(self.records, self.daemon.layout.repo, self.remove_worktree)
        return await recovery.recover(ids)
