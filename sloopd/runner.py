"""Runs in flight: prepare the worktree, walk the flow, settle.

The driver of a run appends to its stage log and asks ``walk.replay`` for the
next step after every append, so the log alone decides what happens; a run
interrupted by a crash is settled from its log on the next start.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections import deque
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

import orjson

from sloopd import gate, gitops, vendor, walk
from sloopd.children import Child, ChildSpawnError, ProcessGroups
from sloopd.clock import now_ms
from sloopd.daemon import Daemon
from sloopd.explain import agent_exit_code, run_diagnosis, run_reason
from sloopd.flow import Flow, Stage
from sloopd.logsink import LogSink
from sloopd.stagelog import append_step, read_log
from sloopd.store import Store
from sloopd.worker import Credentials, WorkerDispatcher, WorkerSockets, WorkerVerbs

log = logging.getLogger(__name__)

# Never handed to a child: systemd's channels and the operator's own socket.
RECENT_LINES = 2000
STALL_CHECK_SECONDS = 1.0
_SCRUBBED_ENV = (
    "NOTIFY_SOCKET",
    "WATCHDOG_USEC",
    "WATCHDOG_PID",
    "LISTEN_FDS",
    "LISTEN_PID",
    "LISTEN_FDNAMES",
    "SLOOP_OPERATOR_SOCKET",
    "SLOOP_SOCKET_DIR",
    "SLOOP_SOCKET",
    "SLOOP_TOKEN",
    "SLOOP_CHILD_MARKER",
)


@dataclass
class ActiveRun:
    run_id: str
    task: asyncio.Task[None] | None = None
    child: Child | None = None
    stage: str | None = None
    attempt: int | None = None
    stage_started_ms: int | None = None
    # Set when the run must stop early: why, and whether its ticket is queued again.
    cancel_reason: str | None = None
    requeue: bool = False
    stall_after_ms: int = 0
    # A vendor limit settles the run failed and queues its ticket again then.
    requeue_at_ms: int | None = None
    # Set when the stall watchdog stopped the stage's group.
    stall_killed_after_ms: int | None = None
    # The stage's recent output, for classifying a failure.
    recent_output: deque[str] = field(default_factory=lambda: deque(maxlen=RECENT_LINES))

    def silent_for_ms(self) -> int | None:
        """Time since the executing child's last output (or its start)."""
        if self.child is None:
            return None
        return int((time.monotonic() - self.child.last_output_monotonic) * 1000)

    def stall(self) -> dict[str, Any] | None:
        silent = self.silent_for_ms()
        if silent is None or silent < self.stall_after_ms:
            return None
        return {
            "stage": self.stage,
            "attempt": self.attempt,
            "silent_for_ms": silent,
            "stall_after_ms": self.stall_after_ms,
        }


@dataclass(frozen=True, slots=True)
class RunFacts:
    run_id: str
    ticket: str
    ticket_name: str
    attempt: int
    branch: str
    worktree: Path
    flow: Flow


class RunManager:
    """Starts, drives, aborts and settles runs; the scheduler hands it claims."""

    def __init__(self, daemon: Daemon, groups: ProcessGroups, sink: LogSink) -> None:
        self.daemon = daemon
        self.groups = groups
        self.sink = sink
        self.active = daemon.active_runs
        self._merge_lock = asyncio.Lock()  # merges are serialised across runs
        self.on_settled: list[Any] = []
        self.credentials = Credentials()
        self.worker_sockets = WorkerSockets(
            daemon.layout.worker_socket_dir,
            lambda run: WorkerDispatcher(run, self.credentials, WorkerVerbs(self).handlers()),
        )

    def read_log(self, run_id: str) -> list[walk.LogRow]:
        return read_log(self.store, run_id)

    def append_steps(
        self,
        run_id: str,
        kind: str,
        stage: str | None = None,
        attempt: int | None = None,
        seat: int | None = None,
        data: dict[str, Any] | None = None,
    ) -> None:
        with self.store.writer.transaction() as tx:
            append_step(tx, run_id, kind, stage, attempt, seat, data)

    @property
    def store(self) -> Store:
        return self.daemon.require_store()

    def facts(self, run_id: str) -> RunFacts:
        row = self.store.one("run_by_id", (run_id,))
        assert row is not None
        ticket_row = self.store.one("ticket_by_id", (row[2],))
        assert ticket_row is not None
        worktree = row[9] or str(self.daemon.layout.state_dir / "worktrees" / run_id)
        return RunFacts(
            run_id=run_id,
            ticket=row[2],
            ticket_name=ticket_row[1],
            attempt=row[3],
            branch=row[8],
            worktree=Path(worktree),
            flow=Flow.from_json(orjson.loads(row[7])),
        )

    def start(self, run_id: str) -> None:
        active = ActiveRun(run_id, stall_after_ms=self.daemon.config.agent.stall_after_ms)
        self.active[run_id] = active
        active.task = asyncio.get_running_loop().create_task(self._drive(active))

    async def _drive(self, active: ActiveRun) -> None:
        run_id = active.run_id
        try:
            facts = self.facts(run_id)
            try:
                await self._prepare(active, facts)
            except gitops.GitError as exc:
                self._settle(
                    run_id, "failed", None, f"the run's worktree could not be created: {exc}"
                )
                return
            while not await self._step(active, facts):
                pass
            if self.store.one("run_state", (run_id,)) == ("merged",):
                await self.remove_worktree(run_id)
        except Exception as exc:
            log.exception("run %s failed inside the daemon", run_id)
            with contextlib.suppress(Exception):
                self._settle(
                    run_id,
                    "failed",
                    None,
                    f"the daemon failed to drive the run: {exc.__class__.__name__}: {exc}",
                )
        finally:
            self.credentials.revoke(run_id)
            await self.worker_sockets.close(run_id)
            self.active.pop(run_id, None)
            self.sink.forget(run_id)
            for callback in self.on_settled:
                callback()

    async def _prepare(self, active: ActiveRun, facts: RunFacts) -> None:
        repo = self.daemon.layout.repo
        for old_id, old_path in self.store.all("run_worktrees_of_ticket", (facts.ticket,)):
            await gitops.remove_worktree(repo, Path(old_path))
            with self.store.writer.transaction() as tx:
                tx.run("run_clear_worktree", (old_id,))
        facts.worktree.parent.mkdir(parents=True, exist_ok=True)
        await self.worker_sockets.open(facts.run_id)
        await gitops.create_worktree(
            repo, facts.worktree, facts.branch, self.daemon.config.repo.main
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

    async def _step(self, active: ActiveRun, facts: RunFacts) -> bool:
        """Take the walk's next step; True once the run is settled."""
        state = walk.replay(facts.flow, read_log(self.store, facts.run_id))
        merged = state.next == "done" and state.outcome == "merged"
        if active.requeue_at_ms is not None and state.next != "running" and not merged:
            self._settle(
                facts.run_id, "failed", None, None, state=state, requeue_at_ms=active.requeue_at_ms
            )
            return True
        if active.cancel_reason is not None and state.next != "running" and not merged:
            self._settle(
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
            with self.store.writer.transaction() as tx:
                append_step(
                    tx,
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
            self._finish(
                facts.run_id,
                current.stage,
                current.attempt,
                {"passed": False, "reason": "interrupted before it finished"},
            )
        else:
            assert state.outcome is not None
            self._settle(facts.run_id, state.outcome, state.halt, None, state=state)
            return True
        return False

    async def _execute(
        self, active: ActiveRun, facts: RunFacts, stage: Stage, attempt: int
    ) -> None:
        with self.store.writer.transaction() as tx:
            append_step(tx, facts.run_id, walk.STAGE_STARTED, stage.name, attempt)
        active.stage, active.attempt, active.stage_started_ms = stage.name, attempt, now_ms()
        self.sink.append(
            facts.run_id,
            stage.name,
            attempt,
            "system",
            f"stage '{stage.name}' execution {attempt} started",
        )
        if stage.action in ("agent", "command"):
            result = await self._run_child(active, facts, stage, attempt)
        else:
            result = await self._run_git(facts, stage)
        if active.cancel_reason is not None:
            result = {**result, "passed": False, "reason": active.cancel_reason}
        elif not result["passed"] and stage.action == "agent":
            result["diagnosis"] = self._diagnose(active)
        active.child = None
        active.stall_killed_after_ms = None
        self._finish(facts.run_id, stage, attempt, result)
        diagnosis = result.get("diagnosis") or {}
        if diagnosis.get("classification") in vendor.LIMIT_CLASSES:
            self._vendor_limit(facts, diagnosis)

    async def _run_git(self, facts: RunFacts, stage: Stage) -> dict[str, Any]:
        main = self.daemon.config.repo.main
        try:
            if stage.action == "sync":
                mode: Literal["merge", "rebase"] = "rebase" if stage.mode == "rebase" else "merge"
                return _git_result(await gitops.sync(facts.worktree, main, mode))
            async with self._merge_lock:
                return _git_result(
                    await gitops.ff_only(self.daemon.layout.repo, facts.worktree, main)
                )
        except gitops.GitError as exc:
            # git refused for a reason that is not a conflict; the stage fails with it.
            return {"passed": False, "exit_code": None, "verdict_source": "git", "reason": str(exc)}

    def _diagnose(self, active: ActiveRun) -> dict[str, Any]:
        """Why an agent failed, in vendor terms, from its own recent output."""
        if active.stall_killed_after_ms is not None:
            minutes = active.stall_killed_after_ms // 60_000
            return {
                "classification": "stalled",
                "evidence": None,
                "vendor": None,
                "reset_at_ms": None,
                "detail": f"no output for {minutes} min (stall_kill_after); stopped",
            }
        settings = self.daemon.config
        # Vendors print clock times in the host's zone ("resets 3pm").
        local_zone = datetime.now().astimezone().tzinfo
        diagnosis = vendor.classify(
            active.recent_output,
            now_ms(),
            settings.vendor_patterns + vendor.DEFAULT_PATTERNS,
            tz=local_zone,
        )
        return diagnosis.as_json()

    def _vendor_limit(self, facts: RunFacts, diagnosis: dict[str, Any]) -> None:
        """A rate or usage limit: close the gate, settle failed, queue the ticket again.

        No return_to budget is spent and no agent is respawned before the
        deadline: the ticket's next trigger is due when the cooldown ends.
        """
        now = now_ms()
        until = diagnosis.get("reset_at_ms") or 0
        if until <= now:
            until = now + self.daemon.config.agent.cooldown_ms
        kind = diagnosis["classification"].replace("_", " ")
        gate.cool_down(self.daemon, until, f"{kind} reported by the agent of {facts.run_id}")
        active = self.active.get(facts.run_id)
        if active is not None:
            active.requeue_at_ms = until

    def _finish(self, run_id: str, stage: Stage, attempt: int, result: dict[str, Any]) -> None:
        with self.store.writer.transaction() as tx:
            append_step(tx, run_id, walk.STAGE_FINISHED, stage.name, attempt, data=result)
        metrics = self.daemon.metrics
        if metrics is not None and "started_at_ms" not in result:
            facts_flow = self.store.one("run_by_id", (run_id,))
            flow_name = str(facts_flow[6]) if facts_flow else "?"
            active = self.active.get(run_id)
            started = active.stage_started_ms if active and active.stage_started_ms else now_ms()
            metrics.stage_duration.labels(
                flow_name, stage.name, "passed" if result["passed"] else "failed"
            ).observe(max(0, now_ms() - started) / 1000)
        verdict = "passed" if result["passed"] else "failed"
        detail = f": {result['reason']}" if result.get("reason") else ""
        self.sink.append(
            run_id,
            stage.name,
            attempt,
            "system",
            f"stage '{stage.name}' execution {attempt} {verdict}{detail}",
        )

    async def _run_child(
        self, active: ActiveRun, facts: RunFacts, stage: Stage, attempt: int
    ) -> dict[str, Any]:
        if stage.result_check == "panel":
            return await self._run_panel(active, facts, stage, attempt)
        base = stage.command or (
            self.daemon.config.agent.command if stage.action == "agent" else ()
        )
        code = await self._spawn_and_wait(active, facts, stage, attempt, None, base)
        if code is None or isinstance(code, str):
            return {
                "passed": False,
                "exit_code": None,
                "verdict_source": "exit_code",
                "reason": code or "cancelled",
            }
        return self._judge(facts, stage, attempt, code)

    async def _spawn_and_wait(
        self,
        active: ActiveRun,
        facts: RunFacts,
        stage: Stage,
        attempt: int,
        seat: int | None,
        base: tuple[str, ...],
    ) -> int | str | None:
        """Run one child under a fresh credential; its exit code, or why it never ran."""
        prompt_file = self._write_prompt(facts, stage, attempt)
        prompt = prompt_file.read_text(encoding="utf-8")
        argv = [part.replace("{prompt}", prompt) for part in base]
        credential = self.credentials.mint(facts.run_id, stage.name, attempt, seat)
        env = self._child_env(facts, stage, attempt, prompt_file)
        env.update(
            SLOOP_SOCKET=str(self.worker_sockets.path(facts.run_id)), SLOOP_TOKEN=credential.token
        )

        recent = active.recent_output
        recent.clear()

        def on_line(stream: str, text: str, split: bool) -> None:
            recent.append(text)
            self.sink.append(facts.run_id, stage.name, attempt, stream, text, split)

        owner = f"{facts.run_id}/{stage.name}#{attempt}" + (
            f"/seat{seat}" if seat is not None else ""
        )
        try:
            child = await self.groups.spawn(
                argv, cwd=facts.worktree, env=env, owner=owner, on_line=on_line
            )
        except ChildSpawnError as exc:
            self.credentials.revoke(facts.run_id, credential)
            return str(exc)
        active.child = child
        try:
            if active.cancel_reason is not None:
                await child.stop()
            code = await child.wait()
            await self.groups.reap_leftovers(child)
        finally:
            self.credentials.revoke(facts.run_id, credential)
            active.child = None
        return code

    async def _run_panel(
        self, active: ActiveRun, facts: RunFacts, stage: Stage, attempt: int
    ) -> dict[str, Any]:
        """Seats one after another, each with its own credential; passes ≥ quorum."""
        for seat, reviewer in enumerate(stage.reviewers):
            if active.cancel_reason is not None:
                break
            self.append_steps(
                facts.run_id,
                walk.SEAT_STARTED,
                stage.name,
                attempt,
                seat,
                {"target": reviewer.target},
            )
            code = await self._spawn_and_wait(active, facts, stage, attempt, seat, reviewer.command)
            result: dict[str, Any] = {"exit_code": code if isinstance(code, int) else None}
            if isinstance(code, str):
                result["error"] = code
            self.append_steps(facts.run_id, walk.SEAT_FINISHED, stage.name, attempt, seat, result)
        state = walk.replay(facts.flow, self.read_log(facts.run_id))
        current = state.current
        seats = current.seats if current is not None else {}
        passes = sum(1 for s in seats.values() if s["verdict"] == "pass")
        total = len(stage.reviewers)
        passed = passes >= stage.quorum and len(seats) == total
        return {
            "passed": passed,
            "exit_code": None,
            "verdict_source": "panel",
            "reason": f"{passes} of {total} reviewers passed (quorum {stage.quorum})",
        }

    def _judge(self, facts: RunFacts, stage: Stage, attempt: int, code: int) -> dict[str, Any]:
        """The stage's result check applied to what the child did."""
        base: dict[str, Any] = {"exit_code": code}
        if stage.result_check == "exit_code":
            passed = code == 0
            return {
                **base,
                "passed": passed,
                "verdict_source": "exit_code",
                "reason": None if passed else _exit_reason(code),
            }
        state = walk.replay(facts.flow, read_log(self.store, facts.run_id))
        current = state.current
        verdict = current.verdict if current is not None else None
        if stage.result_check == "reported":
            if verdict is None:
                return {
                    **base,
                    "passed": False,
                    "verdict_source": "missing",
                    "reason": "no verdict was reported before the worker exited",
                }
            return {
                **base,
                "passed": verdict.get("verdict") == "pass",
                "verdict_source": "reported",
                "reason": verdict.get("reason"),
                "confidence": verdict.get("confidence"),
            }
        return {
            **base,
            "passed": False,
            "verdict_source": "panel",
            "reason": "panel stages need reviewer seats",
        }

    def _write_prompt(self, facts: RunFacts, stage: Stage, attempt: int) -> Path:
        record = self.store.one("ticket_by_id", (facts.ticket,))
        extra = self.store.one("ticket_extra", (facts.ticket,))
        assert record is not None and extra is not None
        directory = self.daemon.layout.state_dir / "runs" / facts.run_id
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / f"prompt-{stage.name}-{attempt}.md"
        instructions = stage.prompt or ""
        path.write_text(
            f"{instructions}\n\n# {record[2]}\n\nTicket {facts.ticket} "
            f"({facts.ticket_name}), run {facts.run_id}, stage '{stage.name}' "
            f"execution {attempt}.\n\n{extra[0]}\n".lstrip("\n"),
            encoding="utf-8",
        )
        return path

    def _child_env(
        self, facts: RunFacts, stage: Stage, attempt: int, prompt_file: Path
    ) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in _SCRUBBED_ENV}
        env.update(
            SLOOP_RUN=facts.run_id,
            SLOOP_TICKET=facts.ticket,
            SLOOP_STAGE=stage.name,
            SLOOP_ATTEMPT=str(attempt),
            SLOOP_WORKTREE=str(facts.worktree),
            SLOOP_PROMPT_FILE=str(prompt_file),
        )
        return env

    def _settle(
        self,
        run_id: str,
        outcome: str,
        halt: str | None,
        reason: str | None,
        *,
        requeue: bool = False,
        state: walk.Walk | None = None,
        requeue_at_ms: int | None = None,
    ) -> None:
        """End the run: its halted row, its row, its ticket and its event, atomically."""
        facts = self.facts(run_id)
        if state is None:
            state = walk.replay(facts.flow, read_log(self.store, run_id))
        if outcome != "merged" and reason is None:
            reason = run_reason(state, outcome, halt, facts.branch)
        diagnosis = run_diagnosis(state) if outcome != "merged" else None
        now = now_ms()
        with self.store.writer.transaction() as tx:
            append_step(
                tx, run_id, walk.HALTED, data={"state": outcome, "halt": halt, "reason": reason}
            )
            tx.run(
                "run_settle",
                {
                    "id": run_id,
                    "state": outcome,
                    "now": now,
                    "halt": halt,
                    "reason": reason,
                    "agent_exit_code": agent_exit_code(state),
                    "classification": orjson.dumps(diagnosis).decode() if diagnosis else None,
                },
            )
            ticket_state = outcome
            if outcome == "aborted":
                ticket_state = "ready" if requeue else "held"
            if requeue_at_ms is not None:
                ticket_state = "ready"
                if tx.one("trigger_queued_for_ticket", (facts.ticket,)) is None:
                    tx.run(
                        "trigger_requeue_at",
                        {"ticket": facts.ticket, "due": requeue_at_ms, "now": now},
                    )
            tx.run("ticket_set_state", {"id": facts.ticket, "state": ticket_state, "now": now})
            if outcome == "aborted" and requeue:
                if tx.one("trigger_queued_for_ticket", (facts.ticket,)) is None:
                    tx.one("trigger_insert", {"ticket": facts.ticket, "due": now, "now": now})
        # Tagged with the last execution, so every record belongs to a stage.
        last = state.executions[-1] if state.executions else None
        self.sink.append(
            run_id,
            last.stage.name if last else facts.flow.stages[0].name,
            last.attempt if last else 1,
            "system",
            f"run settled {outcome}" + (f": {reason}" if reason else ""),
        )
        if self.daemon.metrics is not None:
            self.daemon.metrics.runs_finished.labels(outcome).inc()
        kind = "run_aborted" if outcome == "aborted" else "run_finished"
        self.daemon.append_event(
            kind,
            ticket=facts.ticket,
            run=run_id,
            data={"state": outcome, "halt": halt, "reason": reason},
        )

    async def remove_worktree(self, run_id: str) -> None:
        facts = self.facts(run_id)
        await gitops.remove_worktree(self.daemon.layout.repo, facts.worktree)
        with self.store.writer.transaction() as tx:
            tx.run("run_clear_worktree", (run_id,))

    async def watch_stalls(self) -> None:
        """Stop a stage whose child has been silent past stall_kill_after."""
        while True:
            await asyncio.sleep(STALL_CHECK_SECONDS)
            kill_after = self.daemon.config.agent.stall_kill_after_ms
            for active in list(self.active.values()):
                silent = active.silent_for_ms()
                child = active.child
                if (
                    child is not None
                    and silent is not None
                    and silent >= kill_after
                    and active.stall_killed_after_ms is None
                ):
                    active.stall_killed_after_ms = kill_after
                    log.warning(
                        "%s: stage %s silent for %d ms; stopping it",
                        active.run_id,
                        active.stage,
                        silent,
                    )
                    asyncio.get_running_loop().create_task(child.stop())

    async def collect_worktrees(self) -> list[str]:
        """``gc``: remove the worktrees that settled runs kept for inspection."""
        removed = []
        for run_id, _path in self.store.all("run_worktrees_terminal"):
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
        await asyncio.gather(
            *(self.abort(run_id, reason, requeue=True) for run_id in list(self.active)),
            return_exceptions=True,
        )

    def recover(self) -> list[str]:
        """Settle runs a crashed daemon left in flight; their tickets are queued again."""
        recovered = []
        for (run_id,) in self.store.all("runs_active_ids"):
            facts = self.facts(run_id)
            state = walk.replay(facts.flow, read_log(self.store, run_id))
            current = state.current
            reason = "the daemon restarted while the run was in flight"
            if current is not None:
                reason += f" (stage '{current.stage.name}' execution {current.attempt})"
                self._finish(
                    run_id,
                    current.stage,
                    current.attempt,
                    {"passed": False, "reason": "interrupted: the daemon restarted"},
                )
            self._settle(run_id, "aborted", None, reason, requeue=True)
            recovered.append(run_id)
        return recovered


def _exit_reason(code: int) -> str:
    if code < 0:
        return f"killed by signal {-code}"
    return f"exited with code {code}"


def _git_result(outcome: gitops.GitResult) -> dict[str, Any]:
    result: dict[str, Any] = {
        "passed": outcome.ok,
        "exit_code": None,
        "verdict_source": "git",
        "reason": outcome.reason,
    }
    if outcome.paths:
        result["paths"] = list(outcome.paths)
    return result
