"""Executing one stage: a child (agent, command or panel seats) or git.

The run driver (sloopd.runs.runner) decides *which* stage runs from the replayed
stage log; this module runs it and returns the facts its stage_finished row
records: passed, exit_code, verdict_source, reason, and a diagnosis.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

from sloopd import vendor
from sloopd.core.state import Daemon
from sloopd.flows import walk
from sloopd.flows.flow import Stage
from sloopd.runs import gitops
from sloopd.runs.children import ChildSpawnError, ProcessGroups
from sloopd.runs.records import RunRecords
from sloopd.runs.runstate import SCRUBBED_ENV, ActiveRun, RunFacts
from sloopd.runs.worker import Credentials
from sloopd.util.clock import now_ms


class StageExecutor:
    """Runs stages; it gets only the collaborators a stage needs, not the run manager."""

    def __init__(
        self,
        daemon: Daemon,
        records: RunRecords,
        groups: ProcessGroups,
        credentials: Credentials,
        socket_path: Callable[[str], Path],
        *,
        merge_lock: asyncio.Lock,
    ) -> None:
        self.daemon = daemon
        self.records = records
        self.groups = groups
        self.credentials = credentials
        self.socket_path = socket_path
        self.merge_lock = merge_lock

    async def execute(
        self, active: ActiveRun, facts: RunFacts, stage: Stage, attempt: int
    ) -> dict[str, Any]:
        if stage.action in ("agent", "command"):
            return await self._run_child(active, facts, stage, attempt)
        return await self._run_git(facts, stage)

    async def _run_git(self, facts: RunFacts, stage: Stage) -> dict[str, Any]:
        main = self.daemon.config.repo.main
        try:
            if stage.action == "sync":
                mode: Literal["merge", "rebase"] = "rebase" if stage.mode == "rebase" else "merge"
                return _git_result(await gitops.sync(facts.worktree, main, mode))
            async with self.merge_lock:
                return _git_result(
                    await gitops.ff_only(self.daemon.layout.repo, facts.worktree, main)
                )
        except gitops.GitError as exc:
            # git refused for a reason that is not a conflict; the stage fails with it.
            return {"passed": False, "exit_code": None, "verdict_source": "git", "reason": str(exc)}

    def diagnose(self, active: ActiveRun) -> dict[str, Any]:
        """Why an agent failed, in vendor terms, from its own recent output."""
        if active.stall_killed_after_ms is not None:
            silence = _duration(active.stall_killed_after_ms)
            return {
                "classification": "stalled",
                "evidence": None,
                "vendor": None,
                "reset_at_ms": None,
                "detail": f"no output for {silence} (stall_kill_after); stopped",
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
        prompt_file, prompt = self._write_prompt(facts, stage, attempt)
        argv = [part.replace("{prompt}", prompt) for part in base]
        credential = self.credentials.mint(facts.run_id, stage.name, attempt, seat)
        env = self._child_env(facts, stage, attempt, prompt_file)
        env.update(
            SLOOP_SOCKET=str(self.socket_path(facts.run_id)),
            SLOOP_TOKEN=credential.token,
        )

        recent = active.recent_output
        recent.clear()

        def on_line(stream: str, text: str, split: bool) -> None:
            recent.append(text)
            self.records.sink.append(facts.run_id, stage.name, attempt, stream, text, split)

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
            self.records.append_steps(
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
            self.records.append_steps(
                facts.run_id, walk.SEAT_FINISHED, stage.name, attempt, seat, result
            )
        state = walk.replay(facts.flow, self.records.read_log(facts.run_id))
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
        state = walk.replay(facts.flow, self.records.read_log(facts.run_id))
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

    def _write_prompt(self, facts: RunFacts, stage: Stage, attempt: int) -> tuple[Path, str]:
        """The rendered prompt, written where SLOOP_PROMPT_FILE points."""
        record = self.records.store.one("ticket_by_id", (facts.ticket,))
        extra = self.records.store.one("ticket_extra", (facts.ticket,))
        assert record is not None and extra is not None
        directory = self.daemon.layout.state_dir / "runs" / facts.run_id
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / f"prompt-{stage.name}-{attempt}.md"
        instructions = stage.prompt or ""
        prompt = (
            f"{instructions}\n\n# {record[2]}\n\nTicket {facts.ticket} "
            f"({facts.ticket_name}), run {facts.run_id}, stage '{stage.name}' "
            f"execution {attempt}.\n\n{extra[0]}\n".lstrip("\n")
        )
        path.write_text(prompt, encoding="utf-8")
        return path, prompt

    def _child_env(
        self, facts: RunFacts, stage: Stage, attempt: int, prompt_file: Path
    ) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in SCRUBBED_ENV}
        env.update(
            SLOOP_RUN=facts.run_id,
            SLOOP_TICKET=facts.ticket,
            SLOOP_STAGE=stage.name,
            SLOOP_ATTEMPT=str(attempt),
            SLOOP_RUN_ATTEMPT=str(facts.attempt),
            SLOOP_WORKTREE=str(facts.worktree),
            SLOOP_PROMPT_FILE=str(prompt_file),
        )
        return env


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


def _duration(ms: int) -> str:
    seconds = ms // 1000
    if seconds < 120:
        return f"{seconds} s"
    if seconds < 7200:
        return f"{seconds // 60} min"
    return f"{seconds / 3600:.1f} h"
