"""The operator socket's verb handlers, by name."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import Any

import orjson

from sloopd.core import rows
from sloopd.core.state import Daemon
from sloopd.queue import actions as queue
from sloopd.queue import gate, refs, resolutions
from sloopd.runs.runner import RunManager
from sloopd.store import TicketRow
from sloopd.util.clock import now_ms
from sloopd.views import diff, feeds, show
from sloopd.views.audit import Audit
from sloopd.views.board import Board
from sloopd.wire import api
from sloopd.wire.dispatch import Handler, OperatorDispatcher

WAIT_DEFAULT_TIMEOUT_MS = 30_000
ABORTED_BY_OPERATOR = "aborted by the operator"


class OperatorVerbs:
    def __init__(self, daemon: Daemon, runs: RunManager) -> None:
        self.daemon = daemon
        self.runs = runs
        self._background: set[asyncio.Future[None]] = set()
        self.board = Board(daemon)
        self.audit = Audit.from_environment(daemon)
        self.logs = feeds.Logs(self.daemon, self.runs.sink)

    def handlers(self) -> dict[str, Handler]:
        return {
            "show": self.show,
            "status": self.status,
            "list": self.list,
            "wait": self.wait,
            "post": self.post,
            "hold": self._queue_verb(queue.hold),
            "ready": self._queue_verb(queue.ready),
            "run": self._queue_verb(queue.run),
            "abort": self.abort,
            "gc": self.gc,
            "pause": self.pause,
            "resume": self.resume,
            "logs": self.logs.page,
            "events": feeds.Events(self.daemon).page,
            "diff": self.diff,
            "runs": lambda args: show.settled_runs(self.daemon, args),
            "resolve": self._queue_verb(resolutions.resolve),
        }

    def _queue_verb(self, action: Callable[[Daemon, dict[str, Any]], dict[str, Any]]) -> Handler:
        def handler(args: dict[str, Any]) -> dict[str, Any]:
            result = action(self.daemon, args)
            self.daemon.poke()  # the queue changed: the scheduler may have work
            return result

        return handler

    async def post(self, args: dict[str, Any]) -> dict[str, Any]:
        """Read the file in a thread, register it on the loop.

        A ticket file may be a megabyte on a slow disk (or a network mount): read on
        the loop, every other client would wait for it.  The registering transaction
        stays on the loop, the one writer's thread.
        """
        self.daemon.require_store()  # a refused store answers before any file is read
        ticket = await asyncio.to_thread(queue.read_posted, self.daemon, args)
        result = queue.post(self.daemon, args, ticket)
        self.daemon.poke()  # the queue changed: the scheduler may have work
        return result

    def show(self, args: dict[str, Any]) -> Any:
        if not args and self.audit is None and self.daemon.model is not None:
            # The hot path (a dashboard follower, a status bar): straight to the bytes.
            return orjson.Fragment(self.board.dashboard(api.DEFAULT_RECENT_LIMIT))
        return held_until_newer(self.daemon, args, self._show_now)

    def _show_now(self, args: dict[str, Any]) -> Any:
        daemon = self.daemon
        if "ref" not in args:
            limit = args.get("limit") or api.DEFAULT_RECENT_LIMIT
            if daemon.model is None:
                return show.dashboard(daemon, self.board, limit)
            data = self.board.dashboard(limit)
            if self.audit is not None:
                self.audit.served(data, limit)
            return orjson.Fragment(data)
        # Read before the reply is built: nothing runs between the two, so the
        # reply reflects exactly this epoch.
        epoch = daemon.changes.epoch
        reply = show.show_ref(daemon, args["ref"], args.get("limit"))
        reply["epoch"] = epoch
        return reply

    def status(self, args: dict[str, Any]) -> dict[str, Any]:
        return show.status(self.daemon)

    def list(self, args: dict[str, Any]) -> dict[str, Any]:
        limit = args.get("limit")
        if "ref" in args:
            return {"tickets": show.matches(self.daemon, args["ref"], limit)["tickets"]}
        store = self.daemon.require_store()
        facts = self.daemon.queue_facts()
        listed = [rows.ticket_row(t, facts) for t in store.rows(TicketRow, "tickets_nonterminal")]
        return {"tickets": listed[:limit] if limit else listed}

    async def wait(self, args: dict[str, Any]) -> dict[str, Any]:
        run_id = self._run_id(args["run"])
        deadline = now_ms() + args.get("timeout_ms", WAIT_DEFAULT_TIMEOUT_MS)
        while True:
            detail = show.run_detail(self.daemon, run_id)
            left_ms = deadline - now_ms()
            if detail["terminal"] or left_ms <= 0:
                return {"kind": "run", "value": detail}
            # Woken by the settle itself: no replay of the stage log until it happens.
            await self.runs.records.until_settled(run_id, left_ms / 1000)

    async def abort(self, args: dict[str, Any]) -> dict[str, Any]:
        run_id = self._run_id(args["run"])
        reason = ABORTED_BY_OPERATOR
        if args.get("reason"):  # 0.8.0: the operator's words, kept on the run for whoever reads it
            reason = f"{ABORTED_BY_OPERATOR}: {args['reason']}"
        if run_id not in self.daemon.active_runs:
            state = show.run_detail(self.daemon, run_id)["state"]
            raise api.ProtocolError(
                api.ErrorCode.CONFLICT,
                f"{run_id} is already {state}",
                {"run": run_id, "state": state},
            )
        store = self.daemon.require_store()
        fault = store.fault
        if fault is not None:
            # Stopping goes ahead; the settle waits for the store, so do not hold the client.
            stopping = asyncio.ensure_future(self.runs.abort(run_id, reason))
            self._background.add(stopping)
            stopping.add_done_callback(self._background.discard)
            raise api.ProtocolError(
                api.ErrorCode.DAEMON_UNAVAILABLE,
                f"{run_id} is being stopped, but its store cannot be written ({fault.detail}); "
                "it settles aborted once the store takes writes again",
                {
                    "run": run_id,
                    "store": str(self.daemon.require_store().path),
                    "reason": fault.reason,
                },
            )
        await self.runs.abort(run_id, reason)
        return {"run": rows.run_row(self.daemon.require_store(), run_id)}

    async def diff(self, args: dict[str, Any]) -> dict[str, Any]:
        """A run's branch against its base (read-only; sloopd/views/diff.py)."""
        return await diff.run_diff(self.daemon, args["run"], args.get("max_bytes"))

    async def gc(self, args: dict[str, Any]) -> dict[str, Any]:
        self.daemon.require_store()
        return {"removed": await self.runs.collect_worktrees()}

    def pause(self, args: dict[str, Any]) -> dict[str, Any]:
        """Close the gate by hand: nothing is claimed until 'resume'."""
        self.daemon.require_store()
        reason = args.get("reason", "paused by the operator")
        return {"gate": gate.change(self.daemon, "paused", None, reason).row()}

    def resume(self, args: dict[str, Any]) -> dict[str, Any]:
        """Reopen the gate, ending a pause or a cooldown early."""
        self.daemon.require_store()
        return {"gate": gate.reopen_by_hand(self.daemon).row()}

    def _run_id(self, ref: str) -> str:
        return refs.run_id(self.daemon.require_store(), self.daemon.layout.repo, ref)


def held_until_newer(daemon: Daemon, args: dict[str, Any], answer: Handler) -> Any:
    """``answer(args)`` now, or (``since`` and ``wait_ms``) once the epoch passes ``since``."""
    since = args.get("since")
    wait_ms = args.get("wait_ms", 0)
    if since is None or wait_ms <= 0 or daemon.changes.epoch > since:
        return answer(args)

    async def later() -> Any:
        # Held here, this request holds back the replies pipelined behind it on its
        # connection (protocol: responses come in request order), like 'wait'.
        await daemon.changes.wait_past(since, wait_ms / 1000)
        return answer(args)

    return later()


def operator_handlers(daemon: Daemon, runs: RunManager) -> dict[str, Handler]:
    return OperatorVerbs(daemon, runs).handlers()


def operator_dispatcher(handlers: Mapping[str, Handler]) -> OperatorDispatcher:
    """The operator socket's dispatcher: the hot ``logs`` page on dispatch's fast path
    (the same ``feeds.Logs`` as its handler, so both share the run lookups)."""
    logs = getattr(handlers.get("logs"), "__self__", None)
    fast = {"logs": logs.fast} if isinstance(logs, feeds.Logs) else {}
    return OperatorDispatcher(handlers, fast=fast)


def refused_handlers(daemon: Daemon) -> dict[str, Handler]:
    """A daemon refusing its store answers ``show`` (its health) and nothing else."""

    def refuse(args: dict[str, Any]) -> dict[str, Any]:
        daemon.require_store()
        raise AssertionError("unreachable: the store is refused")

    handlers: dict[str, Handler] = {
        name: refuse for name, verb in api.VERBS.items() if verb.operator
    }
    board = Board(daemon)
    # Its epoch never moves: a held show waits out its wait_ms, as the protocol says.
    handlers["show"] = lambda args: held_until_newer(
        daemon, args, lambda now: show.dashboard(daemon, board, now.get("limit"))
    )
    return handlers
