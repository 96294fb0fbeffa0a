"""The operator socket's verb handlers, by name."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import Any

from sloopd.core import rows
from sloopd.core.state import Daemon
from sloopd.queue import actions as queue
from sloopd.queue import gate, refs
from sloopd.runs.runner import RunManager
from sloopd.util.clock import now_ms
from sloopd.views import feeds, show
from sloopd.wire import api
from sloopd.wire.dispatch import Handler, OperatorDispatcher

WAIT_DEFAULT_TIMEOUT_MS = 30_000
ABORTED_BY_OPERATOR = "aborted by the operator"


class OperatorVerbs:
    def __init__(self, daemon: Daemon, runs: RunManager) -> None:
        self.daemon = daemon
        self.runs = runs
        self._background: set[asyncio.Future[None]] = set()
        self.logs = feeds.Logs(self.daemon, self.runs.sink)

    def handlers(self) -> dict[str, Handler]:
        return {
            "show": self.show,
            "status": self.status,
            "list": self.list,
            "wait": self.wait,
            "post": self._queue_verb(queue.post),
            "hold": self._queue_verb(queue.hold),
            "ready": self._queue_verb(queue.ready),
            "run": self._queue_verb(queue.run),
            "abort": self.abort,
            "gc": self.gc,
            "pause": self.pause,
            "resume": self.resume,
            "logs": self.logs.page,
            "events": feeds.Events(self.daemon).page,
        }

    def _queue_verb(self, action: Callable[[Daemon, dict[str, Any]], dict[str, Any]]) -> Handler:
        def handler(args: dict[str, Any]) -> dict[str, Any]:
            result = action(self.daemon, args)
            self.daemon.poke()  # the queue changed: the scheduler may have work
            return result

        return handler

    def show(self, args: dict[str, Any]) -> dict[str, Any]:
        if "ref" not in args:
            return show.dashboard(self.daemon, args.get("limit"))
        return show.show_ref(self.daemon, args["ref"], args.get("limit"))

    def status(self, args: dict[str, Any]) -> dict[str, Any]:
        return show.status(self.daemon)

    def list(self, args: dict[str, Any]) -> dict[str, Any]:
        limit = args.get("limit")
        if "ref" in args:
            return {"tickets": show.matches(self.daemon, args["ref"], limit)["tickets"]}
        store = self.daemon.require_store()
        facts = self.daemon.queue_facts()
        listed = [rows.ticket_row(t, facts) for t in store.all("tickets_nonterminal")]
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
            stopping = asyncio.ensure_future(self.runs.abort(run_id, ABORTED_BY_OPERATOR))
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
        await self.runs.abort(run_id, ABORTED_BY_OPERATOR)
        return {"run": rows.run_row(self.daemon.require_store(), run_id)}

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
    handlers["show"] = lambda args: show.dashboard(daemon, args.get("limit"))
    return handlers
