"""The worker verbs: ``brief``, ``show``, ``note`` and ``verdict``, each in its caller's scope.

They read and append to the run's stage log, through the run's records, which they
name by a narrow protocol (``Records``: ``sloopd.runs.records.RunRecords``), so the
worker layer still imports nothing of the runs; the socket, the credential and the
dispatch around them are this layer's too.  Every refusal outside the caller's scope
is the same ``unauthorized``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

from sloopd.core import bodies
from sloopd.core.state import Daemon
from sloopd.flows import walk
from sloopd.flows.flow import Stage
from sloopd.flows.stagelog import replay_run
from sloopd.proc.sandbox import CHECKOUT_PATH
from sloopd.queue import refs
from sloopd.store import TicketExtra
from sloopd.util import quoting
from sloopd.util.clock import now_ms
from sloopd.views import feedback, show
from sloopd.wire import api
from sloopd.wire.api import ErrorCode, ProtocolError
from sloopd.worker.credentials import UNAUTHORIZED, Credential
from sloopd.worker.dispatcher import WorkerHandler


class Facts(feedback.Run, Protocol):
    """A run's stored facts (``sloopd.runs.runstate.RunFacts``)."""

    @property
    def branch(self) -> str: ...
    @property
    def worktree(self) -> Path: ...


class Records(feedback.StageLogs, Protocol):
    """A run's records as the verbs read and append them (``RunRecords``)."""

    def facts(self, run_id: str) -> Facts: ...
    def append_steps(
        self,
        run_id: str,
        kind: str,
        stage: str | None = None,
        attempt: int | None = None,
        seat: int | None = None,
        data: dict[str, Any] | None = None,
        at_ms: int | None = None,
    ) -> None: ...


def definition_of_done(stage: Stage) -> list[str]:
    """What the caller's own stage turns on; identical for every seat of a panel."""
    if stage.result_check == "panel":
        return [
            "Review the run's branch against the ticket; change nothing.",
            "Report exactly one verdict, pass or fail, with a reason "
            "('sloopctl verdict pass|fail --reason ...').",
            f"The stage passes when at least {stage.quorum} of {len(stage.reviewers)} reviewers "
            "report pass; a reviewer that reports nothing counts as fail.",
        ]
    if stage.result_check == "reported":
        return [
            f"Stage '{stage.name}' passes only if you report 'pass' with 'sloopctl verdict' "
            "before you exit; 'fail' or no verdict at all fails it.",
            "Only your first verdict counts.",
        ]
    done = [f"Stage '{stage.name}' passes when your process exits with code 0."]
    if stage.action == "agent":
        done.append(
            "Commit your work on the run's branch before you exit; uncommitted "
            "changes are not merged."
        )
    return done


class WorkerVerbs:
    """The worker verbs; they read and append through the run's records only."""

    def __init__(self, daemon: Daemon, records: Records) -> None:
        self.daemon = daemon
        self.records = records

    def handlers(self) -> dict[str, WorkerHandler]:
        return {"brief": self.brief, "show": self.show, "note": self.note, "verdict": self.verdict}

    def _executing(self, credential: Credential) -> tuple[walk.Walk, walk.Execution]:
        """The execution the credential names, which must still be running."""
        facts = self.records.facts(credential.run)
        state = replay_run(self.records.store, facts.run_id, facts.flow)
        current = state.current
        if (
            current is None
            or current.stage.name != credential.stage
            or current.attempt != credential.attempt
        ):
            raise UNAUTHORIZED
        if credential.seat is not None and (
            credential.seat not in current.seats or current.seats[credential.seat]["done"]
        ):
            raise UNAUTHORIZED
        return state, current

    def brief(self, credential: Credential, args: dict[str, Any]) -> dict[str, Any]:
        facts = self.records.facts(credential.run)
        stage = facts.flow.stage(credential.stage)
        store = self.records.store
        record = store.ticket_by_id(facts.ticket)
        extra = store.row(TicketExtra, "ticket_extra", (facts.ticket,))
        if stage is None or record is None or extra is None:
            raise UNAUTHORIZED
        keys = ("id", "name", "title", "path", "project", "flow", "priority", "state")
        ticket: dict[str, Any] = {key: getattr(record, key) for key in keys}
        # The whole ticket is in the prompt file: a brief carries a bounded part of it.
        ticket.update(
            bodies.shown(extra.body, "the whole ticket is in the prompt file, $SLOOP_PROMPT_FILE")
        )
        told = feedback.of_execution(self.records, facts, stage)
        brief: dict[str, Any] = {
            "run": credential.run,
            "ticket": ticket,
            "worktree": self._checkout_seen(credential.run, facts.worktree),
            "branch": facts.branch,
            "stage": {
                "name": stage.name,
                "attempt": credential.attempt,
                "result_check": stage.result_check,
            },
            "definition_of_done": definition_of_done(stage),
        }
        if told:
            # Additive in 0.9.0, present when there is some: why the executions before
            # this one failed (the prompt's "What happened since your last execution").
            brief["feedback"] = told
        return brief

    def _checkout_seen(self, run: str, host_path: Path) -> str:
        """The checkout's path as the caller sees it: a sandboxed agent is never told a
        host path (it does not exist in its view, and it would name the state folder)."""
        active = self.daemon.active_runs.get(run)
        config = active.config if active is not None else self.daemon.config
        return CHECKOUT_PATH if config.sandbox != "none" else str(host_path)

    def show(self, credential: Credential, args: dict[str, Any]) -> Any:
        """As the operator's: now, or once the epoch passes ``since`` (0.7.0)."""
        since = args.get("since")
        wait_ms = args.get("wait_ms", 0)
        if since is not None and wait_ms > 0 and self.daemon.changes.epoch <= since:
            return self._show_later(credential, args, since, wait_ms)
        return self._show_now(credential, args)

    async def _show_later(
        self, credential: Credential, args: dict[str, Any], since: int, wait_ms: int
    ) -> dict[str, Any]:
        await self.daemon.changes.wait_past(since, wait_ms / 1000)
        return self._show_now(credential, args)

    def _show_now(self, credential: Credential, args: dict[str, Any]) -> dict[str, Any]:
        reply = self._shown(credential, args)
        reply["epoch"] = self.daemon.changes.epoch
        return reply

    def _shown(self, credential: Credential, args: dict[str, Any]) -> dict[str, Any]:
        daemon = self.daemon
        facts = self.records.facts(credential.run)
        ref = args.get("ref")
        exact = (
            None
            if ref is None
            else refs.resolve_exact(daemon.require_store(), daemon.layout.repo, ref)
        )
        if ref is None or (
            exact is not None and exact.kind == "run" and exact.key == credential.run
        ):
            return {
                "kind": "run",
                "value": _independent(show.run_detail(daemon, credential.run), credential),
            }
        if exact is not None and exact.kind == "ticket" and exact.key == facts.ticket:
            return {"kind": "ticket", "value": show.ticket_detail(daemon, facts.ticket)}
        raise UNAUTHORIZED

    def note(self, credential: Credential, args: dict[str, Any]) -> dict[str, Any]:
        self._executing(credential)
        at = now_ms()
        self.records.append_steps(
            credential.run,
            walk.NOTE,
            credential.stage,
            credential.attempt,
            credential.seat,
            {"text": args["text"]},
            at_ms=at,
        )
        self.records.sink.append(
            credential.run,
            credential.stage,
            credential.attempt,
            "note",
            args["text"],
            ts_ms=at,
            seat=credential.seat,
        )
        note = {
            "run": credential.run,
            "stage": credential.stage,
            "attempt": credential.attempt,
            "text": args["text"],
            "at_ms": at,
        }
        if credential.seat is not None:
            note["reviewer"] = credential.seat
        return {"note": note}

    def verdict(self, credential: Credential, args: dict[str, Any]) -> dict[str, Any]:
        _, current = self._executing(credential)
        confidence = args.get("confidence", api.DEFAULT_CONFIDENCE)
        reason = args.get("reason")
        if reason is not None:
            # Stored as given up to the bound, the rest cut with "…" (the answer says so).
            reason = quoting.clip(reason, quoting.VERDICT_REASON_CHARS)
        report = {"verdict": args["verdict"], "confidence": confidence, "reason": reason}
        if credential.seat is None:
            if current.stage.result_check != "reported":
                raise UNAUTHORIZED
            if current.verdict is not None:
                raise ProtocolError(
                    ErrorCode.CONFLICT, "a verdict was already reported for this stage execution"
                )
        elif not reason:
            raise api.invalid_arguments("a panel reviewer must give a 'reason'", field="reason")
        elif current.seats[credential.seat]["verdict"] is not None:
            raise ProtocolError(ErrorCode.CONFLICT, "this seat has already reported")
        self.records.append_steps(
            credential.run,
            walk.VERDICT,
            credential.stage,
            credential.attempt,
            credential.seat,
            report,
        )
        placed: dict[str, Any] = {"run": credential.run, "stage": credential.stage}
        if credential.seat is None:
            placed["attempt"] = credential.attempt
        else:
            placed["reviewer"] = credential.seat
        return {"verdict": {**placed, **report}}


def _independent(detail: dict[str, Any], credential: Credential) -> dict[str, Any]:
    """A panel seat sees no other seat's verdict until its panel's stage has finished.

    Reviewers that could read each other's verdicts would not be independent:
    the last seat could simply agree with the majority.
    """
    if credential.seat is None:
        return detail
    # Nor another seat's notes: a note is as good as a verdict to the next seat.
    detail["notes"] = [
        note
        for note in detail.get("notes", ())
        if not (note.get("stage") == credential.stage and note.get("attempt") == credential.attempt)
        or note.get("reviewer") == credential.seat
    ]
    for row in detail.get("stages", ()):
        if row["stage"] == credential.stage and row["attempt"] == credential.attempt:
            row["reviewers"] = [
                seat
                if seat["reviewer"] == credential.seat
                else {**seat, "verdict": None, "confidence": None, "reason": None}
                for seat in row["reviewers"]
            ]
    return detail
