"""Worker sockets: a run's own socket, one live credential, four verbs.

An agent reaches Sloop only here.  Its token is minted for one stage
execution or one panel seat and dies when the next is minted, when its
child exits, and when the run settles.  Every refusal outside the caller's
scope is the same ``unauthorized``, so a probing worker learns nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import os
import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from sloopd.core.state import Daemon
from sloopd.flows import walk
from sloopd.flows.flow import Stage
from sloopd.queue import refs
from sloopd.runs.records import RunRecords
from sloopd.util.clock import now_ms
from sloopd.views import show
from sloopd.wire import api
from sloopd.wire.api import ErrorCode, ProtocolError
from sloopd.wire.connection import LISTEN_BACKLOG, Connection, bound_private
from sloopd.wire.dispatch import Dispatcher, Result, error_line

UNAUTHORIZED = ProtocolError(ErrorCode.UNAUTHORIZED, "not authorized")


@dataclass(frozen=True, slots=True)
class Credential:
    run: str
    stage: str
    attempt: int
    seat: int | None  # the reviewer index for a panel seat
    token: str


class Credentials:
    """One live credential per run."""

    def __init__(self) -> None:
        self._live: dict[str, Credential] = {}

    def mint(self, run: str, stage: str, attempt: int, seat: int | None = None) -> Credential:
        credential = Credential(run, stage, attempt, seat, secrets.token_urlsafe(32))
        self._live[run] = credential  # the previous one stops validating now
        return credential

    def revoke(self, run: str, credential: Credential | None = None) -> None:
        live = self._live.get(run)
        if live is not None and (credential is None or live is credential):
            del self._live[run]

    def check(self, run: str, token: str | None) -> Credential:
        live = self._live.get(run)
        presented = (token or "").encode()
        expected = live.token.encode() if live is not None else b"\0" * 43
        # compare_digest runs in time independent of where the strings differ.
        if not hmac.compare_digest(presented, expected) or live is None:
            raise UNAUTHORIZED
        return live


WorkerHandler = Callable[[Credential, dict[str, Any]], Result]


class WorkerDispatcher(Dispatcher):
    def __init__(
        self, run: str, credentials: Credentials, handlers: Mapping[str, WorkerHandler]
    ) -> None:
        self._run = run
        self._credentials = credentials
        self._handlers = handlers

    def _envelope_error(self, err: ProtocolError) -> ProtocolError:
        # An unknown verb would list every verb the daemon has: scope leaks.
        if err.code == ErrorCode.UNKNOWN_VERB:
            return UNAUTHORIZED
        return err

    def _call(self, request: api.Request) -> Result:
        if not request.verb.worker:
            raise UNAUTHORIZED
        credential = self._credentials.check(self._run, request.token)
        args = request.verb.parse(request.args)
        return self._handlers[request.verb.name](credential, args)


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

    def __init__(self, daemon: Daemon, records: RunRecords) -> None:
        self.daemon = daemon
        self.records = records

    def handlers(self) -> dict[str, WorkerHandler]:
        return {"brief": self.brief, "show": self.show, "note": self.note, "verdict": self.verdict}

    def _executing(self, credential: Credential) -> tuple[walk.Walk, walk.Execution]:
        """The execution the credential names, which must still be running."""
        facts = self.records.facts(credential.run)
        state = walk.replay(facts.flow, self.records.read_log(credential.run))
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
        record = store.one("ticket_by_id", (facts.ticket,))
        extra = store.one("ticket_extra", (facts.ticket,))
        if stage is None or record is None or extra is None:
            raise UNAUTHORIZED
        keys = ("id", "name", "title", "path", "project", "flow", "priority", "state")
        ticket = dict(zip(keys, record[:8], strict=True))
        ticket["body"] = extra[0]
        return {
            "run": credential.run,
            "ticket": ticket,
            "worktree": str(facts.worktree),
            "branch": facts.branch,
            "stage": {
                "name": stage.name,
                "attempt": credential.attempt,
                "result_check": stage.result_check,
            },
            "definition_of_done": definition_of_done(stage),
        }

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
            credential.run, credential.stage, credential.attempt, "note", args["text"], ts_ms=at
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


# An agent that opens connections without end must not take the daemon's file
# descriptors from the operator and the other runs: past this many on one
# socket (or the shared budget), a connection is answered with one error and closed.
WORKER_CONNECTIONS_MAX = 32


def _refusal(limit: int) -> bytes:
    return error_line(
        None,
        ProtocolError(
            ErrorCode.DAEMON_UNAVAILABLE,
            f"too many connections on this worker socket (at most {limit}); close some",
            {"limit": limit},
        ),
    )


class _Refused(asyncio.Protocol):
    def __init__(self, limit: int) -> None:
        self._limit = limit

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        cast(asyncio.Transport, transport).write(_refusal(self._limit))
        transport.close()


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


class WorkerSockets:
    """Creates a run's socket when it starts and removes it when it settles."""

    def __init__(
        self,
        directory: Path,
        dispatcher_for: Callable[[str], WorkerDispatcher],
        *,
        per_socket: int = WORKER_CONNECTIONS_MAX,
        budget: int = 512,
    ) -> None:
        self.directory = directory
        self._dispatcher_for = dispatcher_for
        self._servers: dict[str, tuple[asyncio.AbstractServer, set[Connection]]] = {}
        self._per_socket = per_socket
        # Worker connections of every run together: what is left for them once the
        # operator socket, the store and the children's pipes have their share.
        self.budget = budget

    def _open_connections(self) -> int:
        return sum(len(connections) for _, connections in self._servers.values())

    def path(self, run: str) -> Path:
        return self.directory / f"{run}.sock"

    async def open(self, run: str) -> Path:
        self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(self.directory, 0o700)
        path = self.path(run)
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        dispatcher = self._dispatcher_for(run)
        connections: set[Connection] = set()

        def factory() -> asyncio.Protocol:
            if len(connections) >= self._per_socket or self._open_connections() >= self.budget:
                return _Refused(self._per_socket)
            conn = Connection(dispatcher.handle_line, connections.discard)
            connections.add(conn)
            return conn

        server = await asyncio.get_running_loop().create_unix_server(
            factory, sock=bound_private(path), backlog=LISTEN_BACKLOG
        )
        self._servers[run] = (server, connections)
        return path

    def clear_stale(self) -> None:
        """At start: sockets of runs a crashed daemon left; nothing listens on them."""
        if self.directory.is_dir():
            for path in self.directory.glob("*.sock"):
                path.unlink(missing_ok=True)

    async def close(self, run: str) -> None:
        entry = self._servers.pop(run, None)
        if entry is not None:
            server, connections = entry
            server.close()
            for conn in list(connections):
                conn.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(server.wait_closed(), 2)
        with contextlib.suppress(FileNotFoundError):
            self.path(run).unlink()
